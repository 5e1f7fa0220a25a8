"""Guided lessons: every shipped lesson's claims hold on its run, every number its steps
state is one of those claims, hostile lesson files are refused with the file, line and
field, and the console runs a lesson (Pilot): the first step on screen, `space` past a
pause, `enter` for an answer, a step on an event when the event happens."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer, Input, TabbedContent

from omniroute_tui.config import ConfigError
from omniroute_tui.console.cli import _parser, build_app
from omniroute_tui.console.cli import main as console_main
from omniroute_tui.console.lesson_app import LessonApp
from omniroute_tui.console.model.lesson_progress import LessonBackend, LessonProgress
from omniroute_tui.console.screens.modals import ConfirmScreen, HelpScreen
from omniroute_tui.console.widgets.herd_chart import HerdChartPlot
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.console.widgets.lesson_panel import LessonPanel
from omniroute_tui.engine import BreakerState
from omniroute_tui.engine.events import AttemptEvent, BreakerEvent, Event
from simulator.cli import main as sim_main
from simulator.lesson import (
    MAX_FILE_BYTES,
    MAX_TEXT,
    load_lesson,
    resolve_lesson,
    shipped_lessons,
    stated_numbers,
)
from simulator.lesson_claims import check_lesson, run_lesson, unchecked_numbers

from .console_helpers import say_yes, settle

LESSONS = shipped_lessons()


def test_at_least_seven_lessons_ship_in_order() -> None:
    assert len(LESSONS) >= 7
    assert [name.split("-", 1)[0] for name in LESSONS] == [str(i) for i in
                                                           range(1, len(LESSONS) + 1)]
    scenarios = {load_lesson(resolve_lesson(n)).scenario.name for n in LESSONS}
    assert {"provider-outage", "429-storm", "vpn-blip", "quota-exhaustion", "retry-budget",
            "fleet-429-storm"} <= scenarios


@pytest.mark.parametrize("name", LESSONS)
def test_every_claim_of_a_shipped_lesson_holds_on_its_run(name: str) -> None:
    lesson = load_lesson(resolve_lesson(name))
    results = check_lesson(lesson)
    assert results, f"{name} checks nothing"
    failed = [f"{lesson.source}:{r.claim.line}: {r.claim} (the run shows {r.observed})"
              for r in results if not r.ok]
    assert failed == []


@pytest.mark.parametrize("name", LESSONS)
def test_every_number_a_shipped_lesson_states_is_checked(name: str) -> None:
    lesson = load_lesson(resolve_lesson(name))
    unchecked = {f"{lesson.source}:{step.line}": numbers for step in lesson.steps
                 if (numbers := unchecked_numbers(step))}
    assert unchecked == {}


def test_the_dedup_lesson_compares_with_no_dedup_and_the_herd_with_naive() -> None:
    assert load_lesson(resolve_lesson("4-dedup-vpn-blip")).compared == ("no-dedup",)
    assert load_lesson(resolve_lesson("7-the-herd")).compared == ("naive",)
    assert load_lesson(resolve_lesson("8-fleet-shared-state")).compared == ("isolated",)


def _probe_times(scenario: str) -> list[int]:
    lesson = load_lesson(resolve_lesson("2-breaker-probe"))
    assert lesson.scenario.name == scenario
    run = run_lesson(lesson)
    return [e.t for e in run.events["resilient"]
            if isinstance(e, AttemptEvent) and e.probe and e.provider == "alpha"]


def test_a_lesson_saying_one_probe_where_the_trace_shows_two_fails(tmp_path: Path) -> None:
    first, second = _probe_times("provider-outage")[:2]
    text = f"""
name: wrong
summary: a claim the run does not bear out
scenario: provider-outage
steps:
  - at: 0s
    text: one probe per window
    check:
      - {{count: {{type: attempt, provider: alpha, probe: true}}, from: {first}ms,
         to: {second + 1}ms, equals: 1}}
"""
    results = check_lesson(load_lesson(tmp_path / "wrong.yaml", text=text))
    assert [(r.ok, r.observed) for r in results] == [(False, 2.0)]


def test_a_number_no_claim_vouches_for_is_found() -> None:
    text = """
name: loose
summary: states a number it does not check
scenario: provider-outage
steps:
  - at: 60s
    text: alpha sees 7 probes in 2 minutes, one every 30 s
    check:
      - {metric: probes, provider: alpha, at_least: 1}
"""
    step = load_lesson("loose.yaml", text=text).steps[0]
    assert unchecked_numbers(step) == [7.0, 2.0, 30.0]
    assert stated_numbers("a1 and p99 are names; 1,500 and 2.5 s are numbers") == [1500.0,
                                                                                   2.5]


def _problems(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "bad.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_lesson(path)
    return [str(p) for p in caught.value.problems]


GOOD_HEAD = "name: bad\nsummary: s\nscenario: provider-outage\nsteps:\n"


@pytest.mark.parametrize(("steps", "line", "field", "reason"), [
    ("  - {at: 0s, text: hi, colour: red}", 5, "steps[0].colour", "unknown field"),
    ("  - 5", 5, "steps[0]", "expected a mapping"),
    ("  - {at: 0s, text: 5}", 5, "steps[0].text", "non-empty text"),
    ("  - {at: 0s, text: [a, b]}", 5, "steps[0].text", "non-empty text"),
    ("  - {at: soon, text: hi}", 5, "steps[0].at", "not a duration"),
    ("  - {on: [breaker], text: hi}", 5, "steps[0].on", "expected a mapping"),
    ("  - {on: {type: breaker, to: [OPEN]}, text: hi}", 5, "steps[0].on.to",
     "expected a word"),
    ("  - {at: 0s, text: hi, check: {count: 1}}", 5, "steps[0].check", "list of claims"),
    ("  - {at: 0s, text: hi, check: [{count: 5, equals: 1}]}", 5,
     "steps[0].check[0].count", "expected a mapping"),
    ("  - {text: hi}", 5, "steps[0]", "exactly one of at"),
    ("  - {at: 0s, on: {type: breaker}, text: hi}", 5, "steps[0]", "exactly one of at"),
    ("  - {on: {type: explosion}, text: hi}", 5, "steps[0].on.type", "an event type"),
    ("  - {on: {type: breaker, colour: red}, text: hi}", 5, "steps[0].on.colour",
     "unknown field"),
    ("  - {on: {type: breaker, provider: gamma}, text: hi}", 5, "steps[0].on.provider",
     "no provider 'gamma'"),
    ("  - {at: 7m, text: hi}", 5, "steps[0].at", "after the scenario's end"),
    ("  - {at: 0s, text: \"" + "x" * (MAX_TEXT + 1) + "\"}", 5, "steps[0].text",
     f"at most {MAX_TEXT}"),
    ("  - {at: 0s, text: \"look \\u202eright\"}", 5, "steps[0].text", "U+202E"),
    ("  - {at: 0s, text: \"clear \\x1b[2J\"}", 5, "steps[0].text", "U+001B"),
    ("  - {at: 0s, text: hi, pane: kitchen}", 5, "steps[0].pane", "expected one of"),
    ("  - {at: 0s, text: hi, row: alpha}", 5, "steps[0].row", "give `pane` too"),
    ("  - {at: 0s, text: hi, pane: connections, row: alpha}", 5, "steps[0].row",
     "provider/connection, got 'alpha'"),
    ("  - {at: 0s, text: hi, pane: lockouts, row: alpha//m}", 5, "steps[0].row",
     "provider/connection/model, got 'alpha//m'"),
    ("  - {at: 0s, text: hi, question: \"why?\"}", 5, "steps[0].answer", "non-empty text"),
    ("  - {at: 0s, text: hi, compare: resilient}", 5, "steps[0].compare", "compares"),
    ("  - {at: 0s, text: hi, pause: yes please}", 5, "steps[0].pause", "true or false"),
    ("  - {at: 0s, text: hi, check: [{metric: nonsense, equals: 1}]}", 5,
     "steps[0].check[0].metric", "expected one of"),
    ("  - {at: 0s, text: hi, check: [{count: {type: attempt}}]}", 5, "steps[0].check[0]",
     "one of equals"),
    ("  - {at: 0s, text: hi, check: [{count: {type: attempt}, equals: lots}]}", 5,
     "steps[0].check[0].equals", "expected a number"),
    ("  - {at: 0s, text: hi, check: [{max: {type: wait}, at_most: 1}]}", 5,
     "steps[0].check[0].field", "missing"),
    ("  - {at: 0s, text: hi, check: [{first: {type: wait}, field: colour, equals: 1}]}", 5,
     "steps[0].check[0].field", "a field of the wait event"),
    ("  - {at: 0s, text: hi, check: [{metric: probes, provider: gamma, equals: 1}]}", 5,
     "steps[0].check[0].provider", "no provider 'gamma'"),
    ("  - {at: 60s, text: a}\n  - {at: 30s, text: b}", 6, "steps[1].at",
     "before the time of an earlier step"),
    ("  - at: 0s\n    text: hi\n    given: [one]", 7, "steps[0].given", "list of numbers"),
    ("  - {at: 0s, text: hi, check: [{metric: probes, strategy: fastest, equals: 1}]}", 5,
     "steps[0].check[0].strategy", "one of priority, round_robin"),
    ("  - {at: 0s, text: hi, check: [{metric: probes, strategy: priority, policy: naive, "
     "equals: 1}]}", 5, "steps[0].check[0].strategy", "got 'priority' with policy naive"),
])
def test_a_bad_step_is_refused_with_its_line_and_field(
        tmp_path: Path, steps: str, line: int, field: str, reason: str) -> None:
    problems = _problems(tmp_path, GOOD_HEAD + steps + "\n")
    assert any(p.startswith(f"{tmp_path / 'bad.yaml'}:{line}: {field}: ") and reason in p
               for p in problems), problems


@pytest.mark.parametrize(("body", "field", "reason"), [
    ("name: x\nsummary: s\nscenario: nowhere\nsteps: [{at: 0s, text: hi}]\n", "scenario",
     "no shipped scenario 'nowhere'"),
    ("name: x\nsummary: s\nscenario: ../../etc/passwd\nsteps: [{at: 0s, text: hi}]\n",
     "scenario", "no shipped scenario"),
    ("name: x\nsummary: s\nscenario: vpn-blip\nsteps: []\n", "steps", "non-empty list"),
    ("name: x\nscenario: vpn-blip\nsteps: [{at: 0s, text: hi}]\n", "summary",
     "non-empty text"),
    ("name: x\nsummary: s\nscenario: vpn-blip\nauthor: me\nsteps: [{at: 0s, text: hi}]\n",
     "author", "unknown field"),
    ("name: \"x\\u200by\"\nsummary: s\nscenario: vpn-blip\nsteps: [{at: 0s, text: hi}]\n",
     "name", "U+200B"),
    ("name: x\nsummary: \"two\\nlines\"\nscenario: vpn-blip\nsteps: [{at: 0s, text: hi}]\n",
     "summary", "U+000A"),
])
def test_a_bad_lesson_is_refused_with_its_field(tmp_path: Path, body: str, field: str,
                                                reason: str) -> None:
    problems = _problems(tmp_path, body)
    assert any(f": {field}: " in p and reason in p for p in problems), problems


def test_hostile_files_are_refused_whole(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text(GOOD_HEAD + "  - {at: 0s, text: hi}\n#" + "x" * MAX_FILE_BYTES)
    with pytest.raises(ConfigError, match="larger than 256 KiB"):
        load_lesson(huge)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: x\x00\n")
    with pytest.raises(ConfigError, match="binary data"):
        load_lesson(binary)
    many = tmp_path / "many.yaml"
    many.write_text(GOOD_HEAD + "".join(f"  - {{at: {i}s, text: t}}\n" for i in range(41)))
    with pytest.raises(ConfigError, match="at most 40"):
        load_lesson(many)
    with pytest.raises(ConfigError, match="no shipped lesson of that name"):
        resolve_lesson("no-such-lesson")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                    + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                              for p, c in zip("abcdefg", "bcdefgh", strict=True)))
    with pytest.raises(ConfigError, match="too many values"):
        load_lesson(bomb)


def test_on_as_a_bare_yaml_key_is_the_event_trigger() -> None:
    text = GOOD_HEAD + "  - on: {type: breaker, provider: alpha, to: OPEN}\n    text: hi\n"
    step = load_lesson("on.yaml", text=text).steps[0]
    assert step.on is not None and step.at_ms is None
    assert step.on.matches(BreakerEvent(5, "alpha", BreakerState.DEGRADED, BreakerState.OPEN,
                                        "threshold", 5, None))  # type: ignore[arg-type]
    assert not step.on.matches(BreakerEvent(5, "beta", BreakerState.DEGRADED,
                                            BreakerState.OPEN, "threshold", 5, None))  # type: ignore[arg-type]


def _progress(text: str) -> LessonProgress:
    return LessonProgress(load_lesson("p.yaml", text=GOOD_HEAD + text))


def _attempt(t: int, probe: bool) -> Event:
    return AttemptEvent(t, "r1", 1, "alpha", "a1", "m", probe)


def test_progress_shows_steps_in_order_and_holds_on_a_pause() -> None:
    progress = _progress(
        "  - {at: 10s, text: a, pause: true}\n"
        "  - {on: {type: attempt, probe: true}, text: b}\n"
        "  - {at: 20s, text: c}\n")
    progress.update(9_999)
    assert progress.current is None and progress.next_time_ms() == 10_000
    progress.update(10_000)
    assert progress.index == 0 and progress.waiting and progress.next_time_ms() is None
    progress.on_event(_attempt(10_500, probe=True))  # held: the pause comes first
    assert progress.index == 0
    assert progress.proceed() and not progress.proceed()
    progress.on_event(_attempt(11_000, probe=False))
    progress.update(25_000)  # the step on an event comes before the later one at 20 s
    assert progress.index == 0
    progress.on_event(_attempt(26_000, probe=True))
    assert progress.index == 1 and progress.shown_at_ms == 26_000
    progress.on_event(_attempt(27_000, probe=False))  # an event after 20 s brings it
    assert progress.index == 2 and progress.shown_at_ms == 20_000 and progress.finished


def test_progress_reveals_an_answer_once() -> None:
    progress = _progress("  - {at: 0s, text: a, question: \"q?\", answer: \"yes\"}\n"
                         "  - {at: 1s, text: b}\n")
    assert not progress.reveal()  # nothing shown yet
    progress.update(0)
    assert progress.reveal() and not progress.reveal()
    progress.update(1_000)
    assert not progress.revealed and not progress.reveal()


def _panel(app: LessonApp) -> str:
    return str(app.query_one(LessonPanel).render())


@asynccontextmanager
async def running_lesson(*args: str, size: tuple[int, int] = (100, 30)
                         ) -> AsyncIterator[tuple[LessonApp, Pilot[Any]]]:
    """`--lesson *args` in the console under Pilot once its first step shows; `q` ends it
    after the caller's checks."""
    app = build_app(_parser().parse_args(["--lesson", *args]))
    assert isinstance(app, LessonApp)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, lambda: "step 1" in _panel(app))
        yield app, pilot
        await pilot.press("q")


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_space_and_enter_are_the_filters_and_the_dialogs_not_the_lessons(
        size: tuple[int, int]) -> None:
    """In the filter box Enter applies the filter (it revealed the step's answer), and
    behind a dialog space leaves the lesson as it was (it resumed the replay): the
    lesson's keys only act on the panes. The first step turns to its pane at any size
    (at 120x36 the dashboard took over after it)."""
    async with running_lesson("1-cooldown-ladder", size=size) as (app, pilot):
        progress = app.progress
        assert progress is not None and progress.waiting and not progress.revealed
        assert app.query_one(TabbedContent).active == "connections"
        await pilot.press("e")  # disable the selected key? asked first
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("space")
        await pilot.pause()
        backend = app.backend
        assert isinstance(backend, LessonBackend)
        assert progress.waiting and backend.paused and backend.now_ms() == 0
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.press("slash", "a", "space", "b", "enter")
        await pilot.pause()
        assert app.query_one("#filter", Input).value == "a b"
        assert not progress.revealed and progress.waiting and backend.now_ms() == 0
        assert not app.backend.engine.connection_snapshot("alpha", "a1").disabled


async def test_the_console_shows_the_first_step_at_once_and_space_goes_on() -> None:
    started = time.perf_counter()
    async with running_lesson("1-cooldown-ladder") as (app, pilot):
        first_step_s = time.perf_counter() - started
        assert "step 1 of 4" in _panel(app) and "space to continue" in _panel(app)
        assert first_step_s < 5, first_step_s
        backend = app.backend
        assert isinstance(backend, LessonBackend)
        assert backend.paused and backend.now_ms() == 0
        assert app.query_one(TabbedContent).active == "connections"
        await pilot.press("space")
        assert not backend.paused and not backend.progress.waiting
        assert "space to continue" not in _panel(app)
        await pilot.press("space")  # nothing waits: the console's own pause
        assert backend.paused


async def test_enter_reveals_the_answer() -> None:
    async with running_lesson("1-cooldown-ladder") as (app, pilot):
        assert "(enter: the answer)" in _panel(app)
        assert "cooldown.base" not in _panel(app)
        await pilot.press("enter")
        assert "A: 3 s, level 1 of the ladder (cooldown.base" in _panel(app)


async def test_help_lists_the_lessons_keys_first() -> None:
    async with running_lesson("1-cooldown-ladder") as (app, pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = app.screen.rows
        assert rows[:4] == [
            (None, "In this lesson:"),
            ("space", "a paused lesson step: go on (no step waiting: pause or resume)"),
            ("enter", "reveal the answer to the step's question (none: the row's detail)"),
            (None, "")]
        assert rows[4] == (None, "On this pane (connections):")
        await pilot.press("escape")
        assert isinstance(app, LessonApp) and app.backend.paused  # help changed nothing
        # the overview names the lesson's routes as any replay's does (provider-outage's
        # names no strategy: the default's)
        assert app.model.overview_lines(0)[-1] == "routes     chat round_robin"


async def test_a_step_selects_its_connection_row() -> None:
    """`row: alpha/a1` on the connections pane is read as the connection it names and
    selected as the table keys it."""
    async with running_lesson("1-cooldown-ladder", "--speed", "100") as (app, pilot):
        await pilot.press("space")
        await settle(pilot, lambda: "step 2 of" in _panel(app), tries=400)
        assert app.query_one(TabbedContent).active == "connections"
        assert app.query_one("#connections-table", KeyedTable).selected_key == ("alpha", "a1")


async def test_a_step_on_an_event_appears_when_the_event_happens() -> None:
    async with running_lesson("2-breaker-probe", "--speed", "100") as (app, pilot):
        backend = app.backend
        assert isinstance(backend, LessonBackend)
        opened = next(e.t for e in run_lesson(backend.progress.lesson).events["resilient"]
                      if isinstance(e, BreakerEvent) and e.to is BreakerState.OPEN)
        await pilot.press("space")
        await settle(pilot, lambda: "step 2 of 4" in _panel(app), tries=400)
        assert "OPEN. Requests now skip alpha" in _panel(app)
        assert backend.progress.shown_at_ms == opened
        # a paused step holds the replay within one slice of its event, at any speed
        assert backend.paused and opened <= backend.now_ms() <= opened + 100
        assert app.query_one(TabbedContent).active == "providers"
        assert app.query_one("#providers-table", KeyedTable).selected_key == "alpha"


async def test_a_step_chooses_the_herd_charts_comparison() -> None:
    async with running_lesson("4-dedup-vpn-blip") as (app, pilot):
        assert app.query_one(TabbedContent).active == "scenario"
        assert app.backend.comparison is not None
        assert app.backend.comparison.policy == "no-dedup"
        chart = app.query_one(HerdChartPlot)
        assert chart._make is not None
        drawn = chart._make(40)
        assert drawn.compared_policy == "no-dedup"
        assert [label for label, _, _ in drawn.compared] == ["alpha no-dedup", "beta no-dedup"]


def test_lesson_refuses_what_it_cannot_replay(capsys: pytest.CaptureFixture[str]) -> None:
    assert console_main(["--lesson", "no-such-lesson"]) == 2
    assert "no shipped lesson of that name" in capsys.readouterr().err
    assert console_main(["--lesson", "7-the-herd", "--live"]) == 2
    assert "takes no --live" in capsys.readouterr().err
    assert console_main(["--html", "x.html"]) == 2
    assert "give --lesson NAME too" in capsys.readouterr().err


def test_the_lesson_page_is_self_contained(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "out" / "dedup.html"
    assert console_main(["--lesson", "4-dedup-vpn-blip", "--html", str(page)]) == 0
    assert "lesson page:" in capsys.readouterr().out
    body = page.read_text(encoding="utf-8")
    assert body.count("<svg") == 2  # resilient beside no-dedup
    assert 'aria-label="no-dedup"' in body and 'aria-label="naive"' not in body
    assert "Deduplication in a VPN blip" in body and "all 10 claims hold" in body
    assert "<details><summary>the answer</summary>" in body
    for fetched in ("<script", "<link", "@import"):
        assert fetched not in body, fetched
    assert re.findall(r'(?:src|href)="(?!#)[^"]*"', body) == []  # only the page's own ids
    assert re.findall(r"url\((?!#)", body) == []


def test_sim_lists_lessons_and_checks_one(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["lessons"]) == 0
    listed = capsys.readouterr().out
    for name in LESSONS:
        assert name in listed
    assert "provider-outage" in listed and "omniroute-tui --lesson NAME" in listed
    assert sim_main(["lesson", "6-retry-budget", "--html", str(tmp_path / "b.html")]) == 0
    out = capsys.readouterr().out
    assert "step 1 at 0s" in out and "FAILS" not in out
    assert (tmp_path / "b.html").stat().st_size > 10_000
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(GOOD_HEAD + "  - at: 0s\n    text: none\n    check: [{metric: probes, "
                     "provider: alpha, equals: 0}]\n")
    assert sim_main(["lesson", str(wrong)]) == 1
    assert f"FAILS {wrong}:7: probes of alpha == 0 (resilient)" in capsys.readouterr().out


def test_the_manuals_example_lesson_loads_and_holds() -> None:
    text = (Path(__file__).parent.parent / "docs" / "console.md").read_text()
    example = re.findall(r"```yaml\n(.*?)```", text.split("## Lessons", 1)[1], re.DOTALL)[0]
    lesson = load_lesson("example.yaml", text=example)
    assert [r.ok for r in check_lesson(lesson)] == [True, True, True]
    assert [unchecked_numbers(step) for step in lesson.steps] == [[], []]


async def test_at_80x24_the_panel_sits_between_the_panes_and_the_footer() -> None:
    async with running_lesson("1-cooldown-ladder", size=(80, 24)) as (app, pilot):
        await pilot.pause(0.2)
        panel = app.query_one(LessonPanel).region
        footer = app.query_one(Footer).region
        panes = app.query_one(TabbedContent).region
        assert panes.bottom <= panel.y and panel.bottom <= footer.y, (panes, panel, footer)
        assert panel.height >= 7  # the border, the head, two lines of text, Q, A, the key


async def test_a_fleet_lesson_runs_in_the_console_and_r_starts_it_again() -> None:
    async with running_lesson("8-fleet-shared-state", "--speed", "100") as (app, pilot):
        assert app.backend.comparison is not None
        assert app.backend.comparison.policy == "isolated"
        await pilot.press("space")
        await settle(pilot, lambda: "step 2 of 3" in _panel(app), tries=400)
        assert app.query_one("#providers-table", KeyedTable).selected_key == "alpha"
        await say_yes(pilot, "R")
        await settle(pilot, lambda: "step 1 of 3" in _panel(app))
        backend = app.backend
        assert isinstance(backend, LessonBackend)
        assert backend.progress.index == 0 and backend.now_ms() == 0 and backend.paused
