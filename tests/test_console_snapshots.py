"""Snapshots of every pane at 100x30 and 80x24, on the demo at a fixed virtual time."""

from __future__ import annotations

from typing import Any

import pytest

from .console_helpers import console_app

PANES = {"providers": "1", "connections": "2", "lockouts": "3", "events": "4",
         "scenario": "5"}


@pytest.mark.parametrize("size", [(100, 30), (80, 24)], ids=["100x30", "80x24"])
@pytest.mark.parametrize("pane", list(PANES))
def test_pane_snapshot(pane: str, size: tuple[int, int], snap_compare: Any) -> None:
    # 110 s into the demo: the storm is over, the blip has passed, the quota is gone
    app, _ = console_app(at_ms=110_000)
    assert snap_compare(app, press=[PANES[pane]], terminal_size=size)
