"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from omniroute_tui.engine import Classification
from omniroute_tui.router import Attempt, Response

README = Path(__file__).parent.parent / "README.md"

ROUTER_YAML = """\
providers:
  openai:
    base_url: http://127.0.0.1:9/v1
    models: [gpt-4o-mini]
    connections: [{id: main, api_key: sk-readme-example-0001}]
routes:
  my-route: {targets: [openai/gpt-4o-mini]}
"""


def section_code(title: str) -> str:
    text = README.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python example under {title!r}"
    return match.group(1)


def test_driving_the_core_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "router.yaml").write_text(ROUTER_YAML)
    monkeypatch.chdir(tmp_path)
    names: dict[str, object] = {}
    exec(compile(section_code("Driving the core"), "README.md", "exec"), names)
    step, routing = names["step"], names["routing"]
    assert isinstance(step, Attempt)
    assert (step.provider, step.connection, step.model) == ("openai", "main", "gpt-4o-mini")
    routing.record(200, Classification(None))  # type: ignore[attr-defined]
    answer = routing.next_step()  # type: ignore[attr-defined]
    assert isinstance(answer, Response) and answer.upstream is step


def rollout_section() -> str:
    text = README.read_text()
    return text.split("## Testing a config before rollout\n", 1)[1].split("\n## ", 1)[0]


def rollout_files(where: Path) -> dict[str, Path]:
    """The section's YAML blocks, saved under the names their first line gives."""
    files = {}
    for block in re.findall(r"```yaml\n(.*?)```", rollout_section(), re.DOTALL):
        name = re.match(r"# file: (\S+)", block)
        assert name is not None, "every YAML block of the section names its file"
        files[name.group(1)] = where / name.group(1)
        files[name.group(1)].write_text(block)
    return files


def test_testing_a_config_before_rollout_works_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    from omniroute_tui.console.cli import _parser, build_app
    from simulator.cli import main as sim

    files = rollout_files(tmp_path)
    assert set(files) == {"router.yaml", "quota.yaml"}
    monkeypatch.chdir(tmp_path)
    section = rollout_section()
    commands = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)[0].splitlines()
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
                     r"([\d,]+)", " ".join(section.split()))
    assert said is not None
    assert re.search(rf"attempts {said.group(1)} [\d,]+ ", out)  # the fault's attempts row
    assert "PASS attempts during quota <= 20 (resilient): observed " + said.group(1) in out
    assert (tmp_path / "chaos.xml").exists() and (tmp_path / "quota.html").exists()
    # the mismatch the section quotes
    error = re.search(r"\(`(quota\.yaml:\d+): (faults\[0\]\.target: .*?)`\)",
                      " ".join(section.split()))
    assert error is not None
    files["quota.yaml"].write_text(files["quota.yaml"].read_text().replace(
        "openai/*/gpt-4o", "openai/*/gpt-5"))
    assert sim(["validate", "quota.yaml", "--config", "router.yaml"]) == 2
    assert f"{error.group(1)}: {error.group(2)}" in " ".join(capsys.readouterr().err.split())
    files["quota.yaml"].write_text(files["quota.yaml"].read_text().replace(
        "openai/*/gpt-5", "openai/*/gpt-4o"))
    # the hurried rollout the section describes fails the gate as it says
    quoted = re.search(r"`(expectation failed: .*?)`", " ".join(section.split()))
    assert quoted is not None
    files["router.yaml"].write_text(files["router.yaml"].read_text().replace(
        "targets: [openai/gpt-4o, anthropic/claude-sonnet, mistral/mistral-large]",
        "targets: [openai/gpt-4o]"))
    assert sim(["run", "quota.yaml", "--config", "router.yaml", "--check"]) == 1
    assert quoted.group(1) in " ".join(capsys.readouterr().out.split())


def test_the_ci_example_gates_its_config(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main as sim

    example = README.parent / "examples" / "ci"
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
