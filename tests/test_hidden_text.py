"""Text that would not show as written: refused in names (and, but for line breaks and
tabs, in descriptions), and escaped wherever a name is printed all the same."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml
from junitparser import JUnitXml
from rich.console import Console
from textual.app import App, ComposeResult

from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.config.hidden import visible
from omniroute_tui.console.model.event_lines import LogEntry
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.console.widgets.panels import EventLog, StatusBar
from simulator.cli import main
from simulator.html_report import render_html
from simulator.junit import ScenarioOutcome, write_junit
from simulator.report import evaluate, render
from simulator.scenario import load_scenario
from simulator.timeline import Timeline
from simulator.virtual import run_virtual

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "data" / "junit.xsd")

#: (field as written in the file below, the YAML escape of a hidden character)
BASE = """\
name: {name}
description: {description}
duration: 10s
providers:
  {provider}: {{models: [{model}], latency: 5ms, connections: [{connection}]}}
routes:
  {route}: {{targets: [p/m]}}
traffic:
  - {{route: r, every: 1s}}
faults:
  - {{name: {fault}, target: p, error: 503, at: 1s, for: 2s}}
"""
PLAIN = {"name": "s", "description": "calm", "provider": "p", "model": "m",
         "connection": "a", "route": "r", "fault": "f"}
#: each hidden character, the way the error names it
HIDDEN = [("\\x1b", "U+001B, a control character"), ("\\x07", "U+0007, a control character"),
          ("\\x7f", "U+007F, a control character"), ("\\x85", "U+0085, a control character"),
          ("\\u202e", "U+202E, an invisible formatting character"),
          ("\\u200b", "U+200B, an invisible formatting character"),
          ("\\u2028", "U+2028, a line separator"), ("\\uffff", "U+FFFF, a noncharacter")]
#: field -> (line, the field as the error names it, what the error calls it)
FIELDS = {"name": (1, "name", "the name"), "description": (2, "description", "the description"),
          "provider": (5, "providers.p{c}", "the name"),
          "model": (5, "providers.p.models[0]", "the name"),
          "connection": (5, "providers.p.connections[0].id", "the name"),
          "route": (7, "routes.r{c}", "the name"), "fault": (11, "faults[0].name", "the name")}


def scenario_text(field: str, escape: str) -> str:
    values = dict(PLAIN)
    values[field] = f'"{PLAIN[field]}{escape}"'
    return BASE.format(**values)


@pytest.mark.parametrize(("escape", "what"), HIDDEN)
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_hidden_character_in_a_name_is_refused_naming_file_line_and_field(
        field: str, escape: str, what: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hidden.yaml"
    path.write_text(scenario_text(field, escape), encoding="utf-8")
    line, name, called = FIELDS[field]
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    first = info.value.problems[0]
    position = len(PLAIN[field]) + 1
    assert str(first) == (
        f"{path}:{line}: {name.format(c=escape)}: {called} holds {what}, at character "
        f"{position}: it would not show as written in a terminal or a report")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(first) in err and _raw_hidden(err, "\n") == []


def test_the_exact_message_for_an_escape_in_a_scenario_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(scenario_text("name", "\\x1b[2J"))
    assert main(["validate", str(path)]) == 2
    assert main(["run", str(path), "--junit", str(tmp_path / "j.xml")]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{path}:1: name: the name holds U+001B, a control character, at "
                     "character 2: it would not show as written in a terminal or a "
                     "report") == 2
    assert not (tmp_path / "j.xml").exists()


def test_a_description_may_hold_line_breaks_and_tabs_and_nothing_else_hidden(
        tmp_path: Path) -> None:
    ok = load_scenario("d.yaml", text=scenario_text("description", "\\n\\tindented\\n"))
    assert ok.description == "calm\n\tindented"
    with pytest.raises(ConfigError, match=r"d.yaml:2: description: the description holds "
                       r"U\+000D, a control character, at character 5"):
        load_scenario("d.yaml", text=scenario_text("description", "\\r"))


def test_a_router_config_refuses_hidden_names_and_prints_a_hidden_key_escaped() -> None:
    text = ('providers:\n  p: {models: ["m\\u202e"], connections: [a]}\n'
            'routes:\n  "r\\x1b[2J": {targets: [p/m]}\n  "p\\n": {targets: [p/m]}\n')
    with pytest.raises(ConfigError) as info:
        load_router_config("router.yaml", text=text)
    assert [str(p) for p in info.value.problems] == [
        "router.yaml:2: providers.p.models[0]: the name holds U+202E, an invisible "
        "formatting character, at character 2: it would not show as written in a terminal "
        "or a report",
        "router.yaml:4: routes.r\\x1b[2J: the name holds U+001B, a control character, at "
        "character 2: it would not show as written in a terminal or a report",
        "router.yaml:5: routes.p\\n: the name holds U+000A, a control character, at "
        "character 2: it would not show as written in a terminal or a report",
    ]


EVIL = "evil\x1b[2J\x07\x00\x0b\x0c\x1f\x7f\x85\x9b\u202e\u200b\u2028\ud800\ufffe"


def _hostile_outcome() -> tuple[ScenarioOutcome, dict[str, Timeline]]:
    """A run whose names hold every hidden character: a scenario built in code (or an
    attached gateway's names) is not validated by the loader."""
    scenario = load_scenario("s.yaml", text=BASE.format(**PLAIN))
    fault = replace(scenario.faults[0], name=EVIL)
    scenario = replace(scenario, name=EVIL, description=f"lesson {EVIL}\nline two\ttab",
                       faults=(fault,), source=f"dir/{EVIL}.yaml")
    timeline = Timeline(scenario)
    results = {"resilient": run_virtual(scenario, "resilient", timeline=timeline)}
    return ScenarioOutcome(scenario, results, evaluate(scenario, results)), {
        "resilient": timeline}


def _raw_hidden(text: str, keep: str = "") -> list[str]:
    return sorted({c for c in EVIL if c in text and c not in keep} - set("evil[2J"))


def test_hidden_characters_that_reach_a_report_are_printed_as_escapes(
        tmp_path: Path) -> None:
    outcome, timelines = _hostile_outcome()
    escaped = visible(EVIL)
    assert escaped == ("evil\\x1b[2J\\x07\\x00\\x0b\\x0c\\x1f\\x7f\\x85\\x9b\\u202e\\u200b"
                       "\\u2028\\ud800\\ufffe")
    junit = tmp_path / "chaos.xml"
    write_junit(junit, [outcome])
    SCHEMA.validate(str(junit))  # the file parses: XML 1.0 holds none of the controls
    (suite,) = JUnitXml.fromfile(str(junit))
    assert suite.name == escaped and _raw_hidden(junit.read_text("utf-8")) == []
    page = render_html(outcome, timelines)
    assert _raw_hidden(page, "\n\t") == []
    assert f"lesson {escaped}\nline two\ttab" in page
    terminal = io.StringIO()
    render(Console(file=terminal, width=200), outcome.scenario, outcome.results,
           outcome.checks)
    assert _raw_hidden(terminal.getvalue(), "\n") == [] and escaped in terminal.getvalue()


def test_the_summary_of_several_runs_prints_names_escaped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader refuses such names; a name that got past it is still not printed raw."""
    import simulator.cli as cli

    def load_hostile(names: Any, config: Any) -> list[Any]:
        first, _ = _hostile_outcome()
        return [first.scenario, replace(first.scenario, name="calm")]

    monkeypatch.setattr(cli, "load_scenarios", load_hostile)
    assert main(["run", "x", "--policy", "resilient", "--check"]) == 0
    out = capsys.readouterr().out
    assert _raw_hidden(out, "\n") == [] and visible(EVIL) in out


class _Panes(App[None]):
    def compose(self) -> ComposeResult:
        yield KeyedTable("connections", (("connection", None), ("model", None)), id="t")
        yield StatusBar(f"status {EVIL}")
        yield EventLog()


async def test_the_console_shows_an_attached_gateways_hidden_names_escaped() -> None:
    app = _Panes()
    async with app.run_test(size=(200, 20)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync({"p/a": (f"p/{EVIL}", "m\u202e")})
        table.sync({"p/a": (f"p/{EVIL}", "m\u202ex")})  # a changed cell too
        status = app.query_one(StatusBar)
        assert str(status.render()) == f"status {visible(EVIL)}"
        status.update(f"two\nlines {EVIL}")
        log = app.query_one(EventLog)
        log.show([LogEntry(1000, "console", f"fault {EVIL} start")])
        await pilot.pause()
        assert table.get_row_at(0) == [f"p/{visible(EVIL)}", "m\\u202ex"]
        assert str(status.render()) == f"two\nlines {visible(EVIL)}"
        (line,) = ["".join(segment.text for segment in strip) for strip in log.lines]
        assert line.rstrip().endswith(f"fault {visible(EVIL)} start")


def test_a_recorded_name_or_name_option_with_hidden_characters_never_reaches_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in [
        {"type": "request", "t": 0, "id": 1, "route": "r"},
        {"type": "request", "t": 5, "id": 2, "route": "r\u202e"},
        {"type": "result", "t": 10, "provider": "p\x1b", "connection": "a", "model": "m",
         "status": 503, "kind": "server_error", "latency_ms": 5},
    ]) + "\n")
    out = tmp_path / "rec.yaml"
    assert main(["record", "--events", str(events), "--name", "x\x1by", "-o", str(out)]) == 2
    assert ("--name holds U+001B, a control character, at character 2"
            in capsys.readouterr().err)
    assert main(["record", "--events", str(events), "-o", str(out)]) == 0
    recorded = yaml.safe_load(out.read_text())
    assert recorded["traffic"] == [{"route": "r", "at": [0]}] and recorded["faults"] == []
