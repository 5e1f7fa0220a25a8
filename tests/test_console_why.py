"""Why, not just what: per-provider budget, dedup, waits and skips, and a request view
that explains every step with the layer that decided it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from omniroute_tui.config.durations import format_ms
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.model.event_lines import describe, logged
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.model.request_steps import request_steps
from omniroute_tui.console.screens.modals import DetailScreen
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine import StreamCut
from omniroute_tui.engine.events import Event, ResultEvent, event_from_dict

from .console_helpers import console_app
from .shipped_runs import shipped_run


def test_providers_say_why_in_a_429_storm() -> None:
    app, seen = console_app("429-storm", at_ms=45_000)
    rows = app.model.provider_rows(app.backend.now_ms())
    budget, dedup, waits, skipped = rows["alpha"][9:]
    deduped = sum(1 for e in seen if e.TYPE == "dedup" and e.provider == "alpha")  # type: ignore[attr-defined]
    reasons = Counter(e.reason for e in seen  # type: ignore[attr-defined]
                      if e.TYPE == "skip" and e.provider == "alpha")  # type: ignore[attr-defined]
    (top, count), = reasons.most_common(1)
    assert dedup == str(deduped) and deduped > 0
    assert skipped == f"{top} {count}" and {"all_cooling", "circuit_open"} <= set(reasons)
    last = [e for e in seen if e.TYPE == "budget" and e.provider == "alpha"][-1]  # type: ignore[attr-defined]
    # the gauge as the last retry left it, and how long ago that was
    age = format_ms(app.backend.now_ms() - last.t)
    assert budget.endswith(f" {int(last.tokens)}/10 {age}")  # type: ignore[attr-defined]
    assert rows["beta"][9:] == ("full", "0", "0", "–")


async def test_the_request_view_explains_a_skip_and_an_admission_wait() -> None:
    # 12 minutes into the hour-long replay, in the blip on every provider, openai's
    # gpt-4o-mini keys are all cooling and requests wait for the first one back
    app, _ = console_app("hour-long-mixed", at_ms=724_500)
    trail = next(t for t in reversed(app.model.requests.values())
                 if t.waited_ms and t.status is not None)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()  # mounted at the dashboard's size, a key at once can be lost
        await pilot.press("6")
        await pilot.pause()
        table = app.query_one("#requests-table", KeyedTable)
        assert table.select_key(trail.id)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        steps = app.screen.history
        layers = [line.split()[1] for line in steps]
        assert layers[0] == "router" and layers[-1] == "router"
        assert "cooldown" in layers and "admission" in layers
        wait = next(line for line in steps if " waits " in line)
        assert "for openai/gpt-4o-mini (all_cooling)" in wait
        assert any("routes again after waiting" in line for line in steps)
        assert any("skipped openai/gpt-4o-mini: all_cooling, back in" in line for line in steps)
        assert dict(app.screen.current)["waited"] != "–"


async def test_operator_keys_do_nothing_to_a_request_row() -> None:
    app, seen = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("6", "r")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)
        assert any("select a provider, connection or lockout" in n.message
                   for n in app._notifications)
    assert not [e for e in seen if e.TYPE == "operator"]


def test_an_attached_consoles_budget_says_its_tokens_without_a_burst_it_does_not_know() -> None:
    """Attached, the providers come from the gateway's state, which does not say their
    retry budget's burst: the row says what the last retry left, not `7/0`."""
    from omniroute_tui.console.model.console_model import ConsoleModel
    from omniroute_tui.engine import BudgetEvent

    model = ConsoleModel({}, lambda: 0)
    model.load_state_document({"breakers": [{
        "provider": "alpha", "state": "CLOSED", "failures": 0, "threshold": 5, "cycles": 0,
        "opened_at": None, "open_for_ms": 0}], "connections": [], "lockouts": []})
    model.on_event(BudgetEvent(t=1_000, request="r1", provider="alpha", spent=True,
                               tokens=7.0))
    assert model.provider_rows(11_000)["alpha"][9] == "7 left 10s"
    _, fields, _ = model.detail(Pane.PROVIDERS, "alpha", 11_000) or ("", [], [])
    assert ("budget", "7 tokens, 10s ago") in fields


def test_the_why_view_and_the_events_pane_name_a_broken_stream_and_its_reason() -> None:
    """stream-faults: r113's stream from alpha/a1 is cut after 40 of its 60 tokens at
    31.6 s; r871's first token is late on alpha (a `first_token` timeout at 5 s, nothing
    relayed) and beta answers it whole."""
    app, seen = console_app("stream-faults", at_ms=218_000)
    cut = next(e for e in seen if isinstance(e, ResultEvent) and e.reason is StreamCut.RESET)
    assert describe(cut) == ("failure alpha/a1/m: stream_cut reset (200) for r113, "
                             "streamed 40 chunk(s), 7,682 bytes")
    late = app.model.requests["r871"]
    whats = [(layer, what) for _, layer, what in request_steps(late.events)]
    assert ("upstream", "failed: timeout: first_token after 5.0s") in whats
    answered = [what for layer, what in whats if what.startswith("answered the client")]
    assert answered == ["answered the client 200 from beta/b1/m after 5.3s"]
    assert whats[-1] == ("upstream", "answered 200 in 1.5s, streamed 61 chunk(s), 11,606 bytes")
    first = next(e for e in seen if isinstance(e, ResultEvent)
                 and e.reason is StreamCut.FIRST_TOKEN)
    assert describe(first) == "failure alpha/a1/m: timeout first_token (0) for r871"


def test_the_why_view_says_a_cut_streams_relayed_chunks() -> None:
    app, _ = console_app("stream-faults", at_ms=33_000)
    whats = [what for _, _, what in request_steps(app.model.requests["r113"].events)]
    assert "failed: stream_cut (200): reset after 1.2s, streamed 40 chunk(s), 7,682 bytes" \
        in whats


@pytest.mark.parametrize("name", ["demo", "stream-faults", "fleet-429-storm",
                                  "mixed-families", "retry-budget"])
def test_the_events_log_keeps_exactly_the_events_that_have_a_line(name: str) -> None:
    """The log keeps events, not their words (`logged` decides, `describe` writes the
    line when shown): the two agree on every event of the shipped runs."""
    events = [event_from_dict(json.loads(line))
              for line in shipped_run(name).trace.splitlines()]
    assert {type(e).__name__ for e in events if logged(e)}  # the runs log something
    assert [e for e in events if logged(e) != (describe(e) is not None)] == []
    model = ConsoleModel({}, lambda: 0)
    for event in events:
        model.on_event(event)
    assert all(isinstance(entry.what, Event) for entry in model.events)
