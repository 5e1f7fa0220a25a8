"""The providers pane shows each provider's share of the last minute's attempts, and the
overview the routes with their strategies."""

from __future__ import annotations

from collections import Counter

from omniroute_tui.console.model.console_model import COLUMNS, SHARE_S
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.widgets.keyed_table import KeyedTable

from .console_helpers import console_app

_SHARE = [name for name, _ in COLUMNS[Pane.PROVIDERS]].index("share")


async def test_the_providers_pane_shows_the_last_minutes_share_of_attempts() -> None:
    # 45 s in, 15 s into the 429 storm: alpha took most of the minute before it
    app, seen = console_app("429-storm", at_ms=45_000)
    now_s = 45
    counts = Counter(e.provider for e in seen if e.TYPE == "attempt"  # type: ignore[attr-defined]
                     and now_s - SHARE_S < e.t // 1000 <= now_s)
    total = sum(counts.values())
    assert {name: round(100 * n / total) for name, n in counts.items()} == {
        "alpha": 69, "beta": 31}
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press("1", "w")  # every column: at 160 the pane shows the narrow ones
        await pilot.pause()
        table = app.query_one("#providers-table", KeyedTable)
        shown = {key: table.get_row(key)[_SHARE] for key in ("alpha", "beta")}
        assert shown == {"alpha": "69%", "beta": "31%"}
        await pilot.press(*["n"] * 30)  # 30 virtual seconds on: the storm's first half
        await pilot.pause()
        rows = app.model.provider_rows(app.backend.now_ms())
        later = Counter(e.provider for e in seen if e.TYPE == "attempt"  # type: ignore[attr-defined]
                        and 75 - SHARE_S < e.t // 1000 <= 75)
        assert rows["alpha"][_SHARE] == f"{round(100 * later['alpha'] / later.total())}%"


def test_no_attempts_in_the_last_minute_is_no_share() -> None:
    app, _ = console_app("429-storm", at_ms=0)
    assert {row[_SHARE] for row in app.model.provider_rows(0).values()} == {"–"}


async def test_the_overview_names_each_routes_strategy() -> None:
    app, _ = console_app("demo", at_ms=10_000)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("0")
        await pilot.pause()
        lines = app.model.overview_lines(app.backend.now_ms())
        assert lines[-1] == "routes     chat priority, fast round_robin, reason weighted"
        assert lines[-1] in str(app.query_one("#overview-summary").render())
