"""The events' lines say how long ago each happened (`12s`), counted on the data's clock
(a replay's virtual time: the same at the same moment of a run) and moving on as it runs
without the log being written again; `t` shows their clock times."""

from __future__ import annotations

from omniroute_tui.console.model.text import event_age
from omniroute_tui.console.widgets.panels import EventLog

from .console_helpers import piloted


def shown(log: EventLog) -> list[str]:
    """The log's lines as painted, blank ones left out."""
    lines = (log.render_line(y).text.rstrip()
             for y in range(log.scrollable_content_region.height))
    return [line for line in lines if line]


async def test_event_lines_say_how_long_ago_and_t_shows_their_clock_time() -> None:
    async with piloted("4", at_ms=110_000) as (app, pilot):
        log = app.query_one("#events-log", EventLog)
        assert shown(log)[-1] == ("    8s  lockout mistral/m-1/large: quota_exhausted, "
                                  "until 31:41.2")
        assert log.title_text.startswith("Events [109] newest 8s ago")
        await pilot.press("t")
        await pilot.pause()
        assert shown(log)[-1] == ("01:41.2  lockout mistral/m-1/large: quota_exhausted, "
                                  "until 31:41.2")
        await pilot.press("t")  # and back: ages
        await pilot.pause()
        assert shown(log)[-1].startswith("    8s  lockout")
        # the dashboard's events follow `t` too
        dashboard = app.query_one("#dash-events", EventLog)
        assert not dashboard.show_clock


async def test_the_ages_move_on_with_the_run_without_new_lines() -> None:
    async with piloted("4", "slash", *"mistral-quota start", "enter",
                       at_ms=110_000) as (app, pilot):
        log = app.query_one("#events-log", EventLog)
        assert shown(log) == ["   10s  fault mistral-quota start on mistral/*/large"]
        written = len(log.lines)
        for _ in range(5):  # paused: five virtual seconds, one step each
            await pilot.press("n")
        await pilot.pause()
        assert shown(log) == ["   15s  fault mistral-quota start on mistral/*/large"]
        assert len(log.lines) == written  # the same line, painted older


async def test_the_time_column_stays_put_when_a_long_line_scrolls_sideways() -> None:
    async with piloted("4", "slash", *"m-2/large: quota", "enter", at_ms=110_000,
                       size=(50, 24)) as (app, pilot):
        log = app.query_one("#events-log", EventLog)
        line = "failure mistral/m-2/large: quota_exhausted (429) for r1130"
        assert shown(log)[0] == f"    8s  {line}"[:log.scrollable_content_region.width]
        log.scroll_to(x=10, animate=False, immediate=True)
        await pilot.pause()
        assert shown(log)[0].startswith(f"    8s  {line[10:]}"[:30])
        log.scroll_to(x=log.max_scroll_x, animate=False, immediate=True)
        await pilot.pause()
        assert shown(log)[0].startswith("    8s  ") and shown(log)[0].endswith("for r1130")


def test_an_age_is_at_most_six_characters() -> None:
    assert [event_age(ms) for ms in (0, 999, 1000, 12_345, 245_000, 3_600_000,
                                     99 * 3_600_000 + 59 * 60_000, 100 * 3_600_000,
                                     30 * 86_400_000)] == [
        "<1s", "<1s", "1s", "12s", "4m05s", "1h00m", "99h59m", "4d", "30d"]
