"""Snapshots of every pane at 100x30 and 80x24, on the demo at a fixed virtual time."""

from __future__ import annotations

from typing import Any

import pytest

from .console_helpers import console_app

PANES = {"overview": "0", "providers": "1", "connections": "2", "lockouts": "3", "events": "4",
         "scenario": "5"}


@pytest.mark.parametrize("size", [(100, 30), (80, 24)], ids=["100x30", "80x24"])
@pytest.mark.parametrize("pane", list(PANES))
def test_pane_snapshot(pane: str, size: tuple[int, int], snap_compare: Any) -> None:
    # 110 s into the demo: the storm is over, the blip has passed, the quota is gone
    app, _ = console_app(at_ms=110_000)
    assert snap_compare(app, press=[PANES[pane]], terminal_size=size)


@pytest.mark.parametrize("pane", list(PANES))
def test_pane_snapshot_in_a_429_storm(pane: str, snap_compare: Any) -> None:
    # 45 s into 429-storm: alpha's keys are all cooling on the server's hint, its breaker
    # has opened, beta takes the traffic
    app, _ = console_app("429-storm", at_ms=45_000)
    assert snap_compare(app, press=[PANES[pane]], terminal_size=(80, 24))


def test_no_state_word_is_cut_in_a_429_storm() -> None:
    """Every cell of a column with a fixed width fits it, at every moment of the storm."""
    from omniroute_tui.console.model.console_model import COLUMNS

    app, _ = console_app("429-storm", at_ms=0)
    backend, model = app.backend, app.model
    for _ in range(0, 300):
        backend.replay.step(1000)  # type: ignore[union-attr]
        now = backend.now_ms()
        for pane, rows in (("providers", model.provider_rows(now)),
                           ("connections", model.connection_rows(now)),
                           ("lockouts", model.lockout_rows(now))):
            for cells in rows.values():
                for (name, width), cell in zip(COLUMNS[pane], cells, strict=True):
                    assert width is None or len(cell) <= width, (pane, name, cell)


def test_detail_snapshot_at_80x24(snap_compare: Any) -> None:
    # a provider's detail over the providers pane: nothing of the pane shows through at
    # the last columns (whole-cell scrollbars), the history scrolls inside the dialog
    app, _ = console_app(at_ms=110_000)
    assert snap_compare(app, press=["enter"], terminal_size=(80, 24))


def test_the_scenario_picker_at_80x24(snap_compare: Any) -> None:
    # `p` over the paused demo: each scenario's name, then what happens, wrapped in its
    # own column; the title and the keys stay on screen
    app, _ = console_app(at_ms=110_000)
    assert snap_compare(app, press=["p"], terminal_size=(80, 24))
