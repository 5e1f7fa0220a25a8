"""The README's and the manual's examples run as written, their figures are the code's,
and their links lead somewhere."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omniroute_tui.config import load_router_config
from omniroute_tui.config.limits import GatewayLimits, StoreRetention
from omniroute_tui.engine import Classification, FailureKind
from omniroute_tui.engine.settings import AuthKind, ResilienceSettings, default_settings
from omniroute_tui.router import Attempt, Response, Strategy

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"

ROUTER_YAML = """\
providers:
  openai:
    base_url: http://127.0.0.1:9/v1
    models: [gpt-4o-mini]
    connections: [{id: main, api_key: sk-readme-example-0001}]
routes:
  my-route: {targets: [openai/gpt-4o-mini]}
"""

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.DOTALL | re.MULTILINE)


def section(page: Path, title: str) -> str:
    """The text under the heading `title` of `page`, up to the next heading of its level
    or above."""
    text = page.read_text()
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert match is not None, f"{page.name} has no heading {title!r}"
    rest = text[match.end():]
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", _FENCE.sub(lambda m: " " * len(m.group()), rest),
                    re.MULTILINE)
    return rest[:end.start()] if end else rest


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def manual_pages() -> list[Path]:
    """Every page a reader of the repository is pointed to."""
    return [README, ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md")),
            *sorted((ROOT / "examples").rglob("*.md"))]


# -- the examples ------------------------------------------------------------------------


def test_quick_start_is_the_two_make_commands() -> None:
    (block,) = blocks(section(README, "Quick start"), "sh")
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)


def test_driving_the_core_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "router.yaml").write_text(ROUTER_YAML)
    monkeypatch.chdir(tmp_path)
    names: dict[str, object] = {}
    (code,) = blocks(section(DOCS / "library.md", "Driving the core"), "python")
    exec(compile(code, "docs/library.md", "exec"), names)
    step, routing = names["step"], names["routing"]
    assert isinstance(step, Attempt)
    assert (step.provider, step.connection, step.model) == ("openai", "main", "gpt-4o-mini")
    routing.record(200, Classification(None))  # type: ignore[attr-defined]
    answer = routing.next_step()  # type: ignore[attr-defined]
    assert isinstance(answer, Response) and answer.upstream is step


def rollout_section() -> str:
    return section(DOCS / "pre-rollout.md", "Trying it on a config")


def rollout_files(where: Path) -> dict[str, Path]:
    """The section's YAML blocks, saved under the names their first line gives."""
    files = {}
    for block in blocks(rollout_section(), "yaml"):
        name = re.match(r"# file: (\S+)", block)
        assert name is not None, "every YAML block of the section names its file"
        files[name.group(1)] = where / name.group(1)
        files[name.group(1)].write_text(block)
    return files


def test_testing_a_config_before_rollout_works_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from omniroute_tui.console.cli import _parser, build_app
    from simulator.cli import main as sim

    files = rollout_files(tmp_path)
    assert set(files) == {"router.yaml", "quota.yaml"}
    monkeypatch.chdir(tmp_path)
    text = rollout_section()
    commands = blocks(text, "sh")[0].splitlines()
    for command in commands:
        program, *args = shlex.split(command)
        if program.endswith("omniroute-sim"):
            assert sim(args) == 0, command
        else:  # the console: built as it would start, not run
            assert program.endswith("omniroute-tui")
            app: Any = build_app(_parser().parse_args(args))
            assert list(app.model.providers) == ["openai", "anthropic", "mistral"]
    out = " ".join(capsys.readouterr().out.split())
    assert "quota.yaml: ok against router.yaml (3 providers," in out
    said = re.search(r"resilient router spends (\d+) attempts.*?naive clients spend over "
                     r"([\d,]+)", " ".join(text.split()))
    assert said is not None
    assert re.search(rf"attempts {said.group(1)} [\d,]+ ", out)  # the fault's attempts row
    assert "PASS attempts during quota <= 20 (resilient): observed " + said.group(1) in out
    assert (tmp_path / "chaos.xml").exists() and (tmp_path / "quota.html").exists()
    # the mismatch the section quotes
    error = re.search(r"\(`(quota\.yaml:\d+): (faults\[0\]\.target: .*?)`\)",
                      " ".join(text.split()))
    assert error is not None
    files["quota.yaml"].write_text(files["quota.yaml"].read_text().replace(
        "openai/*/gpt-4o", "openai/*/gpt-5"))
    assert sim(["validate", "quota.yaml", "--config", "router.yaml"]) == 2
    assert f"{error.group(1)}: {error.group(2)}" in " ".join(capsys.readouterr().err.split())
    files["quota.yaml"].write_text(files["quota.yaml"].read_text().replace(
        "openai/*/gpt-5", "openai/*/gpt-4o"))
    # the hurried rollout the section describes fails the gate as it says
    quoted = re.search(r"`(expectation failed: .*?)`", " ".join(text.split()))
    assert quoted is not None
    files["router.yaml"].write_text(files["router.yaml"].read_text().replace(
        "targets: [openai/gpt-4o, anthropic/claude-sonnet, mistral/mistral-large]",
        "targets: [openai/gpt-4o]"))
    assert sim(["run", "quota.yaml", "--config", "router.yaml", "--check"]) == 1
    assert quoted.group(1) in " ".join(capsys.readouterr().out.split())


def test_the_ci_example_gates_its_config(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main as sim

    example = ROOT / "examples" / "ci"
    junit = tmp_path / "chaos.xml"
    assert sim(["run", str(example / "chaos"), "--config", str(example / "router.yaml"),
                "--check", "--junit", str(junit), "--html", str(tmp_path / "pages")]) == 0
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == [
        "anthropic-429-storm.html", "gpt-4o-quota.html"]
    hurried = tmp_path / "router.yaml"
    hurried.write_text((example / "router.yaml").read_text().replace(
        "targets: [openai/gpt-4o, anthropic/claude-sonnet, mistral/mistral-large]",
        "targets: [openai/gpt-4o]"))
    capsys.readouterr()
    assert sim(["run", str(example / "chaos"), "--config", str(hurried), "--check"]) == 1
    out = capsys.readouterr().out
    assert "anthropic-429-storm: success_rate >= 0.99" in out
    assert "gpt-4o-quota: success_rate >= 0.999" in out


def test_the_tour_quotes_the_chaos_run(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main as sim

    text = " ".join(section(README, "2. A chaos run").split())
    said = re.search(r"\(amplification ([\d.]+)\) where clients retrying on their own spend "
                     r"\w+ \(([\d.]+) for `naive`\), and traffic is back on the primary "
                     r"([\d.]+) s after", text)
    assert said is not None
    (command,) = blocks(section(README, "2. A chaos run"), "sh")
    program, *args = shlex.split(command)
    assert program.endswith("omniroute-sim") and sim(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"amplification {said.group(1)} {said.group(2)} " in out  # resilient, naive
    assert f"back after {said.group(3)}s " in out


def test_the_config_examples_load() -> None:
    page = DOCS / "configuration.md"
    example, strategies, resume, caps, kinds, streams, families = blocks(page.read_text(),
                                                                          "yaml")
    config = load_router_config(page, text=example, env={
        "OPENAI_API_KEY": "sk-docs-example-0001", "OPENAI_SPARE_KEY": "sk-docs-example-0002"})
    openai = config.providers["openai"]
    assert [c.weight for c in openai.connections] == [1, 2]
    assert openai.settings.breaker.failure_threshold == 4
    assert openai.settings.cooldown.base_ms == 3000
    assert config.store_path == "omniroute.db"
    assert config.store_retention == StoreRetention()  # the example spells out the defaults
    routes = load_router_config(page, text=strategies).routes
    assert (routes["fast"].strategy, routes["fast"].weights) == (Strategy.WEIGHTED, (2, 1))
    assert routes["steady"].strategy is Strategy.HEADROOM
    assert (routes["careful"].fallback_wait_ms, routes["fast"].fallback_wait_ms) == (3_000, 0)
    assert not routes["fast"].stream_resume
    assert load_router_config(page, text=resume).routes["chat"].stream_resume
    claude = load_router_config(page, text=caps + "routes: {}\n", env={
        "SEAT_1": "sk-ant-1", "SEAT_2": "sk-ant-2"}).providers["claude"].spec()
    assert (claude.max_in_flight, claude.connection_caps, claude.max_queued) == (8, (2, 2), 50)
    with_kinds = load_router_config(page, text=kinds + ROUTER_YAML)
    override = with_kinds.providers["openai"].settings.breaker.kinds[
        FailureKind.QUOTA_EXHAUSTED]
    assert (override.immediate_open, override.reset_timeout_ms) == (True, 3_600_000)
    chat = load_router_config(page, text=streams).routes["chat"]
    assert [(str(t), t.first_token_ms) for t in chat.targets] == [
        ("openai/gpt-4o-mini", 8_000), ("openai/o3", 180_000), ("local/llama", 0)]
    mixed = load_router_config(page, text=families, env={
        "OPENAI_API_KEY": "sk-1", "AZURE_OPENAI_KEY": "az-1", "ANTHROPIC_API_KEY": "sk-ant-1"})
    assert [p.api.family.value for p in mixed.providers.values()] == [
        "openai", "azure", "anthropic"]
    assert mixed.providers["azure"].api.deployment("gpt-4o") == "prod-gpt-4o"


def test_the_documented_gateway_limits_are_the_defaults() -> None:
    page = DOCS / "gateway.md"
    (limits,) = blocks(section(page, "Limits"), "yaml")
    config = load_router_config(page, text=ROUTER_YAML + limits)
    assert config.gateway_limits == GatewayLimits()


def test_the_scenario_example_validates_and_passes(tmp_path: Path) -> None:
    from simulator.cli import main as sim

    (example,) = blocks(section(DOCS / "simulator.md", "The scenario format"), "yaml")
    path = tmp_path / "example.yaml"
    path.write_text(example)
    assert sim(["validate", str(path)]) == 0
    assert sim(["run", str(path), "--check"]) == 0


_PARSERS = {
    "omniroute-tui": "omniroute_tui.console.cli",
    "omniroute-sim": "simulator.cli",
    "omniroute-gateway": "omniroute_tui.gateway.cli",
}


def shown_commands() -> Iterator[tuple[str, str]]:
    """Every command line of our programs in a shell block of the manual: (page, line)."""
    for page in manual_pages():
        for block in blocks(page.read_text(), "sh"):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words and Path(words[0]).name in _PARSERS:
                    yield page.relative_to(ROOT).as_posix(), line


def test_every_command_shown_parses() -> None:
    import importlib

    shown = list(shown_commands())
    assert len(shown) >= 30  # README, console, gateway, fleet, simulator, pre-rollout, CI
    for page, line in shown:
        program, *args = shlex.split(line, comments=True)
        if args and args[-1] == "&":
            args.pop()
        parser = importlib.import_module(_PARSERS[Path(program).name])._parser()
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{page}: the command does not parse: {line}")


# -- the design's numbers are the code's ---------------------------------------------------

_UNIT_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000}


def _value(text: str) -> float:
    if text.strip() == "off":  # a limit switched off is 0
        return 0
    number, _, unit = text.strip().partition(" ")
    return float(number) * _UNIT_MS[unit] if unit else float(number)


def defaults_table() -> Iterator[tuple[str, str, str]]:
    """(setting, apikey value, oauth value) for each setting of design §8's table."""
    table = section(DESIGN, "§8 Defaults").split("\n\n", 2)[1]
    for row in table.splitlines()[2:]:
        names, apikey, oauth = (cell.strip() for cell in row.strip("|").split("|"))
        names = re.sub(r"\s*\(.*?\)", "", names).replace("`", "")
        apikeys = apikey.split(" / ")
        oauths = apikeys if oauth == "same" else oauth.split(" / ")
        group = ""
        for i, name in enumerate(names.split(" / ")):
            group, _, field = name.rpartition(".") if "." in name else (group, "", name)
            yield f"{group}.{field}" if group else field, apikeys[i], oauths[i]


def _setting(settings: ResilienceSettings, name: str) -> Any:
    target: Any = settings
    *groups, field = name.split(".")
    for group in groups:
        target = getattr(target, group)
    return getattr(target, field) if hasattr(target, field) else getattr(target, field + "_ms")


def test_the_defaults_table_is_the_code() -> None:
    rows = list(defaults_table())
    assert len(rows) == 27
    for auth in AuthKind:
        settings = default_settings(auth)
        for name, apikey, oauth in rows:
            written = apikey if auth is AuthKind.APIKEY else oauth
            assert _value(written) == _setting(settings, name), (auth, name)


def _seconds(ms: int) -> str:
    return f"{ms // 1000}"


def test_the_worked_numbers_are_the_code() -> None:
    text = " ".join(DESIGN.read_text().split())
    apikey, oauth = default_settings(AuthKind.APIKEY), default_settings(AuthKind.OAUTH)
    # cooldowns: the level climbs one a failure, up to max_level
    ladder = [apikey.cooldown.backoff_ms(min(n, apikey.cooldown.max_level)) for n in range(7)]
    assert ", ".join(map(_seconds, ladder)) + " s … (level capped at 5)" in text
    assert apikey.cooldown.max_level == 5
    steps = [oauth.cooldown.backoff_ms(n) for n in range(oauth.cooldown.max_level + 1)]
    below = [s for s in steps if s < oauth.cooldown.max_ms]
    assert steps[len(below)] == oauth.cooldown.max_ms == 20 * 60_000
    assert ", ".join(map(_seconds, below)) + " s, then the 20 min cap" in text
    # breaker windows by cycle, grouped where they repeat
    for settings in (apikey, oauth):
        windows = [settings.breaker.effective_reset_ms(c) for c in range(16)]
        groups: list[list[int]] = []
        for cycle, window in enumerate(windows):
            if groups and windows[groups[-1][0]] == window:
                groups[-1].append(cycle)
            else:
                groups.append([cycle])
        parts = [f"{g[0]}–{g[-1]}" if len(g) > 1 else f"{g[0]}" for g in groups[:-1]]
        said = "; ".join(f"{p}: {windows[int(p.split('–')[0])] // 1000} s" for p in parts)
        said += f"; {groups[-1][0]} and up: {windows[-1] // 1000} s"
        assert "cycles " + said in text
    lockouts = [apikey.lockout.duration_ms(n) // 60_000 for n in range(1, 6)]
    assert lockouts[-1] == apikey.lockout.max_ms // 60_000
    assert ", ".join(map(str, lockouts[:-1])) + f" min, then {lockouts[-1]} min" in text


# -- links, anchors and citations ----------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, without punctuation, with
    hyphens for spaces."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", _FENCE.sub("", page.read_text()), re.MULTILINE):
        anchor = base = slug(heading)
        n = 0
        while anchor in found:  # a repeated heading gets -1, -2, ...
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def test_every_relative_link_resolves() -> None:
    checked = 0
    for page in manual_pages():
        prose = re.sub(r"`[^`\n]*`", "", _FENCE.sub("", page.read_text()))
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue  # a URL: not ours to check here
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            assert linked.exists(), f"{where}: no such file"
            assert ROOT in linked.parents or linked == ROOT, f"{where}: outside the repository"
            if anchor:
                assert linked.suffix == ".md", f"{where}: an anchor in a file that is not a page"
                assert anchor in anchors(linked), f"{where}: no such heading"
            checked += 1
    assert checked > 50


def test_every_table_row_has_its_header_s_cells() -> None:
    """GitHub splits a row at every unescaped `|`, inside code spans too: a row with one
    too many shifts its cells, one too few drops them."""
    tables = 0
    for page in manual_pages():
        text = _FENCE.sub("", page.read_text())
        for table in re.findall(r"(?:^\|.*\n)+", text, re.MULTILINE):
            header, rule, *rows = table.splitlines()
            cells = len(re.split(r"(?<!\\)\|", header.strip()))
            assert re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", rule.strip()), (page.name, rule)
            for row in [rule, *rows]:
                assert len(re.split(r"(?<!\\)\|", row.strip())) == cells, (page.name, row)
            tables += 1
    assert tables > 20


_SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache",
                 ".pytest_cache", ".hypothesis", "build", "dist", "node_modules"}


def repository_texts() -> Iterator[tuple[Path, str]]:
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or path.stat().st_size > 2_000_000:
                continue
            yield path, path.read_bytes().decode("utf-8", errors="ignore")


def test_the_design_has_every_section_the_code_cites() -> None:
    numbers = [int(n) for n in re.findall(r"^## §(\d+) ", DESIGN.read_text(), re.MULTILINE)]
    assert numbers == list(range(15))
    cite = re.compile(r"docs/design\.md (§\d+(?:(?:, | and )§\d+)*)")
    for path, text in repository_texts():
        for cited in cite.findall(text):
            for number in re.findall(r"§(\d+)", cited):
                assert int(number) in numbers, f"{path.relative_to(ROOT)} cites §{number}"


def test_no_file_points_outside_the_repository_for_its_contract() -> None:
    """The repository stands on its own: its rules are cited from docs/design.md."""
    forbidden = ("SPEC" + ".md", "SPEC" + " §")
    offenders = sorted(f"{path.relative_to(ROOT)} mentions {word!r}"
                       for path, text in repository_texts() for word in forbidden
                       if word in text)
    assert not offenders, "cite docs/design.md §N instead:\n" + "\n".join(offenders)


def test_the_reload_signal_reaches_both_gateways_of_a_host(tmp_path: Path) -> None:
    """The SIGHUP line of the gateway's manual, run as written against two processes
    started on the same config file (its name made unique to this test): both hear it."""
    import subprocess
    import sys
    import uuid

    text = section(DOCS / "gateway.md", "Reloading the config")
    line = next(line for block in blocks(text, "bash") for line in block.splitlines()
                if "-HUP" in line)
    config = f"router-{uuid.uuid4().hex}.yaml"
    assert "router.yaml" in line
    script = tmp_path / "reload.sh"
    script.write_text(line.replace("router.yaml", config) + "\n")
    heard = [tmp_path / f"heard-{i}" for i in range(2)]
    hears = ("import signal, sys, pathlib\n"
             "def hup(*_): pathlib.Path(sys.argv[1]).write_text('hup'); sys.exit(0)\n"
             "signal.signal(signal.SIGHUP, hup)\n"
             "print('ready', flush=True)\n"
             "sys.stdin.read()\n")
    gateways = [subprocess.Popen([sys.executable, "-c", hears, str(path), "omniroute-gateway",
                                  "--config", config], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for path in heard]
    try:
        for gateway in gateways:
            assert gateway.stdout is not None and gateway.stdout.readline() == "ready\n"
        # a script of its own: a `bash -c LINE` would carry the pattern and match itself
        assert subprocess.run(["bash", str(script)], timeout=10).returncode == 0
        for gateway in gateways:
            assert gateway.wait(timeout=10) == 0
        assert [path.read_text() for path in heard] == ["hup", "hup"]
    finally:
        for gateway in gateways:
            if gateway.poll() is None:
                gateway.kill()
                gateway.wait()


def test_a_column_is_added_in_its_panes_module_alone(tmp_path: Path) -> None:
    """The development manual's diff, applied to a copy of the package, shows its column
    on the providers pane, in each row and in a row's detail."""
    (diff,) = blocks(section(DOCS / "development.md", "Adding a column"), "diff")
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "omniroute_tui", copy / "omniroute_tui",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "column.diff").write_text(diff)
    subprocess.run(["git", "apply", "--recount", str(tmp_path / "column.diff")], cwd=copy,
                   check=True)
    changed = subprocess.run(["git", "diff", "--no-index", "--stat", str(ROOT / "omniroute_tui"),
                              str(copy / "omniroute_tui")], capture_output=True, text=True)
    assert changed.stdout.count("|") == 1, changed.stdout  # one file touched
    probe = """
from omniroute_tui.console.model.console_model import COLUMNS, ConsoleModel
from omniroute_tui.console.model.panes import Pane
from simulator.scenario import SCENARIOS_DIR, load_scenario
scenario = load_scenario(SCENARIOS_DIR / "demo.yaml")
model = ConsoleModel(scenario.providers, lambda: 0)
name, row = next(iter(model.provider_rows(0).items()))
_, pairs, _ = model.detail(Pane.PROVIDERS, name, 0)
print(COLUMNS[Pane.PROVIDERS][-1][0], row[-1] == model.providers[name].auth, pairs[-1])
"""
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": f"{copy}{os.pathsep}{ROOT}"},
                           cwd=tmp_path, check=True)
    column, same, pair = shown.stdout.split(" ", 2)
    assert (column, same) == ("auth", "True") and pair.startswith("('auth', ")
