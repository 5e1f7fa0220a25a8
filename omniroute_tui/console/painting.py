"""Layout and painting: the visible pane painted from the model, what is selected, and
the keys that move, filter, sort and open a row's detail."""

from __future__ import annotations

import textwrap
from typing import Any

from textual.app import App
from textual.widgets import Input, Static, TabbedContent

from ..config.durations import format_ms
from .model.backends import Backend
from .model.console_model import SORTS, ConsoleModel, clock_text
from .model.panes import Pane
from .screens.modals import DetailScreen, HelpScreen
from .widgets.herd_chart import HerdChartPlot
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog, FaultBanner, ScenarioTimeline, StatusBar, timeline_lines

__all__ = ["DASHBOARD_PICKS", "DASHBOARD_SIZE", "TARGETS", "PaneView"]

#: from this size up, the overview pane is a dashboard: every layer and the events at once
DASHBOARD_SIZE = (120, 36)
#: the dashboard's compact tables: which of each pane's columns they show
DASHBOARD_PICKS = {Pane.PROVIDERS: (0, 1, 2, 3, 5, 8, 10, 11), Pane.CONNECTIONS: (0, 1, 2, 3),
                   Pane.LOCKOUTS: (1, 2, 3, 5)}
#: the panes whose rows are operator targets
TARGETS = (Pane.PROVIDERS, Pane.CONNECTIONS, Pane.LOCKOUTS)


class PaneView(App[None]):
    """The console's panes: it paints from `model` and never changes engine state."""

    backend: Backend
    model: ConsoleModel
    read_only: bool
    _sort: dict[Pane, int]

    @property
    def active_pane(self) -> Pane:
        return Pane(self.query_one(TabbedContent).active or Pane.PROVIDERS)

    def refresh_view(self) -> None:
        """Paint the status bar and the visible pane from the model."""
        model, now = self.model, self.backend.now_ms()
        model.expire(now)
        with self.batch_update():
            self._paint_status(now)
            pane = self.active_pane
            matched: int | None = None
            if pane in SORTS:
                matched = self._paint_table(self.query_one(f"#{pane}-table", KeyedTable), now)
            elif pane == Pane.EVENTS:
                log = self.query_one("#events-log", EventLog)
                log.catch_up(model.events, model.event_serial)
                matched = log.matched
            elif pane == Pane.OVERVIEW:
                self._paint_overview(now)
            else:
                self._paint_timeline(now)
            self._paint_no_matches(matched)

    @property
    def dashboard_fits(self) -> bool:
        width, height = self.size
        return width >= DASHBOARD_SIZE[0] and height >= DASHBOARD_SIZE[1]

    def _paint_table(self, table: KeyedTable, now: int) -> int:
        model, kind = self.model, table.kind
        rows = {Pane.PROVIDERS: model.provider_rows, Pane.CONNECTIONS: model.connection_rows,
                Pane.LOCKOUTS: model.lockout_rows, Pane.REQUESTS: model.request_rows,
                Pane.AUDIT: model.audit_rows}[kind](now)
        order = model.order(kind, SORTS[kind][self._sort[kind]], now)
        return table.sync(rows, list(rows) if order is None else order)

    def _paint_overview(self, now: int) -> None:
        """The summary of every layer; from DASHBOARD_SIZE up, the tables and events too."""
        model = self.model
        self.query_one("#overview-summary", Static).update("\n".join(model.overview_lines(now)))
        if self.dashboard_fits:
            for kind in DASHBOARD_PICKS:
                self._paint_table(self.query_one(f"#dash-{kind}", KeyedTable), now)
            self.query_one("#dash-events", EventLog).catch_up(model.events, model.event_serial)

    def _paint_no_matches(self, matched: int | None) -> None:
        """A line that says so when the filter leaves nothing to show."""
        text = self.query_one("#filter", Input).value
        line = self.query_one("#no-matches", Static)
        empty = bool(text) and matched == 0
        line.set_class(empty, "-shown")
        if empty:
            line.update(f"no rows match {text!r} (/ then escape clears the filter)")

    def _paint_status(self, now: int) -> None:
        model, backend = self.model, self.backend
        rate, ok = model.rates(now)
        opened, cooling, locked = model.counts(now)
        age = "–" if model.last_event_at is None else format_ms(max(0, now - model.last_event_at))
        mode = backend.status()
        success = "–" if ok is None else f"{ok * 100:.0f}%"
        flags = " (read-only)" if self.read_only else ""
        failing = backend.store_failing_since()
        store = "" if failing is None else (
            f"STORE FAILING {format_ms(max(0, now - failing))} │ ")
        status = self.query_one(StatusBar)
        # the scenario's or config's name goes last: a narrow terminal cuts it, not the counts
        status.update(
            f"{store}{mode} │ {rate:.1f}/s ok {success} │ open {opened} cool {cooling} "
            f"lock {locked} │ age {age} │ {backend.title}{flags}")
        status.set_class(opened > 0 or failing is not None, "-alert")
        banner = self.query_one(FaultBanner)
        faults = model.active_faults
        banner.set_class(bool(faults), "-active")
        if faults:
            banner.update("⚠ FAULT ACTIVE: " + ", ".join(f"{n} on {t}" for n, t in faults.items()))

    def _paint_timeline(self, now: int) -> None:
        backend = self.backend
        timeline = self.query_one(ScenarioTimeline)
        scenario, replay = backend.scenario, backend.replay
        if scenario is None:
            timeline.update("No scenario: this console shows a router on real time.")
            return
        width = max(20, self.size.width - 40)
        faults = [(f.name, f.at_ms, f.until_ms, str(f.target)) for f in scenario.faults]
        share = min(1.0, now / max(1, scenario.duration_ms))
        if replay is None:
            state = "live, real time"
        elif replay.finished:
            state = "finished: R replays it"
        else:
            state = "paused" if replay.paused else f"playing ×{replay.speed:g}"
        header = (f"{scenario.name}: {clock_text(now)} of {clock_text(scenario.duration_ms)} "
                  f"({share:.0%}), {state}; {self.model.total_requests:,} requests")
        body = "\n".join(timeline_lines(faults, scenario.duration_ms, now, width))
        description = scenario.description.replace("\n", " ")
        if not self.dashboard_fits:  # a short screen keeps room for the chart
            room = 2 * max(20, self.size.width - 4)
            if len(description) > room:
                description = description[:room - 20].rsplit(" ", 1)[0] + " … (enter: all)"
        timeline.update(f"{header}\n\n{body}\n\n{description}")
        chart = self.query_one(HerdChartPlot)
        windows = [(f.name, f.at_ms, f.until_ms) for f in scenario.faults]
        until = min(now, scenario.duration_ms)
        chart.show(lambda points: self.model.herd_chart(
            until, points, compared=backend.comparison, faults=windows))

    def action_pane(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.active_pane == Pane.EVENTS:
            self.query_one("#events-log", EventLog).clear()
        self.refresh_view()
        self._focus_pane()

    def on_resize(self) -> None:
        self.refresh_view()  # the dashboard comes and goes with the terminal's size

    def _table(self) -> KeyedTable | None:
        """The table keys act on: the focused one, else the active pane's."""
        focused = self.focused
        if isinstance(focused, KeyedTable):
            return focused
        pane = self.active_pane
        return self.query_one(f"#{pane}-table", KeyedTable) if pane in SORTS else None

    def action_sort(self) -> None:
        table = self._table()
        if table is None:
            self.notify("sorting is for the providers, connections and lockouts tables",
                        severity="warning")
            return
        kind = table.kind
        self._sort[kind] = (self._sort[kind] + 1) % len(SORTS[kind])
        self.notify(f"{kind} sorted by {SORTS[kind][self._sort[kind]]}", timeout=3)
        self.refresh_view()

    def action_move(self, where: str) -> None:
        """j/k/g/G: rows in a table, lines in an events log."""
        table = self._table()
        if table is not None:
            {"down": table.action_cursor_down, "up": table.action_cursor_up,
             "top": table.action_scroll_top, "bottom": table.action_scroll_bottom}[where]()
            return
        focused = self.focused
        log = focused if isinstance(focused, EventLog) else (
            self.query_one("#events-log", EventLog) if self.active_pane == Pane.EVENTS else None)
        if log is not None:
            {"down": log.scroll_down, "up": log.scroll_up, "top": log.scroll_home,
             "bottom": log.scroll_end}[where](animate=False)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.disabled = False
        box.add_class("-shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._apply_filter(event.value)

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_focus:
            box.value = ""
            self._apply_filter("")
            event.stop()

    def _apply_filter(self, text: str) -> None:
        box = self.query_one("#filter", Input)
        if not text:
            box.remove_class("-shown")
            box.disabled = True
        for table in self.query(KeyedTable):
            table.filter_text = text
        for log in self.query(EventLog):
            log.filter_text = text
            log.clear()
        self._focus_pane()
        self.refresh_view()

    def _focus_pane(self) -> None:
        pane = self.active_pane
        if pane in SORTS:
            self.query_one(f"#{pane}-table", KeyedTable).focus()
        elif pane == Pane.OVERVIEW and self.dashboard_fits:
            self.query_one("#dash-providers", KeyedTable).focus()

    def jump(self, pane: str, key: str) -> None:
        self.action_pane(pane)
        self.refresh_view()
        table = self.query_one(f"#{pane}-table", KeyedTable)
        if not table.select_key(key):
            self.notify(f"{key} is not in the {pane} pane now", severity="warning")
        table.focus()

    def _selected(self) -> tuple[Pane, str | None]:
        """The kind of the selected row (providers, connections, lockouts) and its key."""
        table = self._table()
        if table is None:
            return self.active_pane, None
        return table.kind, table.selected_key

    def on_data_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        """Enter on a table row (the table consumes the key itself) opens its detail."""
        self.action_detail()

    def action_detail(self) -> None:
        scenario = self.backend.scenario
        if self.active_pane == Pane.SCENARIO and scenario is not None:
            faults = [(f.name, f"{f.target} from {clock_text(f.at_ms)}") for f in scenario.faults]
            lesson = textwrap.wrap(scenario.description.replace("\n", " "), 70)
            self.push_screen(DetailScreen(scenario.name, [
                ("duration", clock_text(scenario.duration_ms)), *faults], lesson))
            return
        kind, key = self._selected()
        if key is None or kind not in SORTS:
            return
        detail = self.model.detail(kind, key, self.backend.now_ms())
        if detail is not None:
            self.push_screen(DetailScreen(*detail))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
