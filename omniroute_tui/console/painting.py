"""Layout and painting: the visible pane painted from the model, what is selected, and
the keys that move, filter, sort and open a row's detail."""

from __future__ import annotations

import textwrap
import time

from textual.actions import SkipAction
from textual.app import App
from textual.widgets import Input, Static, TabbedContent

from ..config.durations import format_ms
from ..config.hidden import visible
from .actions import command_words
from .model.backends import Backend
from .model.console_model import COLUMNS, RECENT_REQUESTS, SORTS, ConsoleModel
from .model.panes import PANES, Pane
from .model.row_keys import RowKey, key_text
from .model.scenario_pane import live_text, replay_text
from .model.text import age_text, clock_text
from .request_lookup import RequestLookup
from .screens.modals import DetailScreen, GlossaryScreen, HelpScreen
from .widgets.herd_chart import HerdChartPlot
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog, FaultBanner, ScenarioTimeline, StatusBar

__all__ = ["DASHBOARD_PICKS", "DASHBOARD_SIZE", "TARGETS", "PaneView"]

#: from this size up, the overview pane is a dashboard: every layer and the events at once
DASHBOARD_SIZE = (120, 36)
#: the dashboard's compact tables: which of each pane's columns they show
DASHBOARD_PICKS = {Pane.PROVIDERS: (0, 1, 2, 3, 5, 6, 9), Pane.CONNECTIONS: (0, 1, 2, 3),
                   Pane.LOCKOUTS: (0, 1, 2, 3, 5)}
#: the providers' columns that fit 80 columns: name, breaker, failures, retry, last error
#: (the rest: `w`, or the row's detail)
NARROW_PROVIDERS = (0, 1, 2, 3, 5)


def _least_width(pick: tuple[int, ...]) -> int:
    """The screen columns the providers' columns `pick` take at their least, a cell's
    padding either side: a column of a set width as `KeyedTable` sizes it (room for the
    sort mark), one that grows with its contents as wide as its name."""
    columns = COLUMNS[Pane.PROVIDERS]
    return sum((len(name) if width is None else max(width, len(name) + len(KeyedTable.SORTED)))
               + 2 for name, width in (columns[i] for i in pick))


#: from this width up, the attempts' sparkline and the last minute's share of them too
#: (where a route's strategy spreads its load): 98 columns, and 2 for a longer name
MIDDLE_PROVIDERS = (*NARROW_PROVIDERS, 6, 7)
MIDDLE_WIDTH = _least_width(MIDDLE_PROVIDERS) + 2
#: from this width up, every column (174 at their least, and 6 for longer names and
#: counts); below it, NARROW_PROVIDERS or MIDDLE_PROVIDERS unless `w` asks for all
WIDE_PROVIDERS = _least_width(tuple(range(len(COLUMNS[Pane.PROVIDERS])))) + 6
#: the column each sort orders by, for the header's mark (the first sort of each table is
#: its rows' own order: no mark)
SORTED_COLUMNS = {"failures": "fail/thr", "state": "breaker", "cooldown left": "cooldown",
                  "backoff level": "backoff", "time left": "remaining",
                  "slowest": "latency", "most attempts": "attempts"}
_TITLES = {spec.pane: spec.table_title for spec in PANES}
#: the panes whose rows are operator targets
TARGETS = (Pane.PROVIDERS, Pane.CONNECTIONS, Pane.LOCKOUTS)


class PaneView(App[None]):
    """The console's panes: it paints from `model` and never changes engine state."""

    backend: Backend
    model: ConsoleModel
    read_only: bool
    read_only_why: str
    _sort: dict[Pane, int]
    _pane_filters: dict[Pane, str]  # each pane's own filter
    _wide: bool  # `w`: every column of the providers pane
    _frozen_at: float | None  # `z`: since when (monotonic) the display is frozen
    _history: list[Pane]  # the panes shown before, for escape
    servers_down: list[str]  # what this console served and stopped on its own (`ROOM`)

    def room_viewers(self) -> int | None:
        """How many viewers follow the room this console serves (None: it serves none)."""
        return None

    @property
    def behind_a_dialog(self) -> bool:
        """A dialog (a confirmation, help, a detail, the palette) is over the panes."""
        return len(self.screen_stack) > 1

    @property
    def active_pane(self) -> Pane:
        return Pane(self.query_one(TabbedContent).active or Pane.PROVIDERS)

    def refresh_view(self) -> None:
        """Paint the status bar and the visible pane from the model."""
        model, now = self.model, self.backend.now_ms()
        model.expire(now)
        with self.batch_update():
            self._paint_status(now)
            if self._frozen_at is not None:
                return  # frozen: the model keeps up, the panes wait for `z`
            pane = self.active_pane
            matched: int | None = None
            if pane in SORTS:
                matched = self._paint_table(self.query_one(f"#{pane}-table", KeyedTable), now)
            elif pane == Pane.EVENTS:
                log = self.query_one("#events-log", EventLog)
                log.catch_up(model, now)
                log.set_title(self._title(Pane.EVENTS, log.matched, log.seen, now,
                                         log.filter_text))
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
        if kind == Pane.PROVIDERS:
            table.use_columns(self._providers_pick(table))
        rows = model.rows(kind, now)
        sort = SORTS[kind][self._sort[kind]]
        table.mark_sorted(SORTED_COLUMNS.get(sort))
        order = model.order(kind, sort, now)
        matched = table.sync(rows, list(rows) if order is None else order)
        table.set_title(self._title(kind, matched, table.total, now, table.filter_text))
        return matched

    def _providers_pick(self, table: KeyedTable) -> tuple[int, ...] | None:
        """The providers' columns a table shows: on the dashboard its own pick; else every
        one when the terminal is wide enough or `w` asked, the most useful otherwise."""
        if table.id == "dash-providers":
            return DASHBOARD_PICKS[Pane.PROVIDERS] if self.dashboard_fits else NARROW_PROVIDERS
        width = self.size.width
        if self._wide or width >= WIDE_PROVIDERS:
            return None
        return MIDDLE_PROVIDERS if width >= MIDDLE_WIDTH else NARROW_PROVIDERS

    def _title(self, kind: Pane, matched: int, total: int | None, now: int, needle: str
               ) -> str:
        """A pane's title: its name, how many rows (`Conns [6] 2 cooling`), and the
        filter when one is set (`/alpha 2 of 6`)."""
        total = matched if total is None else total
        title = f"{_TITLES[kind]} [{total}]"
        opened, cooling, _ = self.model.counts(now) if kind in (
            Pane.PROVIDERS, Pane.CONNECTIONS) else (0, 0, 0)
        if kind == Pane.PROVIDERS and opened:
            title += f" {opened} open"
        elif kind == Pane.CONNECTIONS and cooling:
            title += f" {cooling} cooling"
        elif kind == Pane.EVENTS and self.model.events:
            title += f" newest {age_text(now, self.model.events[-1][0])} ago"
        if needle:
            title += f" /{visible(needle)}" + (
                f" {matched} of {total}" if total != matched or kind == Pane.EVENTS else "")
        return title

    def _paint_overview(self, now: int) -> None:
        """The summary of every layer; from DASHBOARD_SIZE up, the tables and events too."""
        model = self.model
        self.query_one("#overview-summary", Static).update("\n".join(model.overview_lines(now)))
        # the providers always (a compact table at 80x24); the rest from DASHBOARD_SIZE up
        self._paint_table(self.query_one("#dash-providers", KeyedTable), now)
        if self.dashboard_fits:
            for kind in (Pane.CONNECTIONS, Pane.LOCKOUTS):
                self._paint_table(self.query_one(f"#dash-{kind}", KeyedTable), now)
            log = self.query_one("#dash-events", EventLog)
            log.catch_up(model, now)
            log.set_title(self._title(Pane.EVENTS, log.matched, log.seen, now,
                                         log.filter_text))

    def _paint_no_matches(self, matched: int | None) -> None:
        """A line (above the filter box, never under it) that says so when this pane's
        filter leaves nothing to show."""
        text = self._pane_filters.get(self.active_pane, "")
        line = self.query_one("#no-matches", Static)
        empty = bool(text) and matched == 0
        line.set_class(empty, "-shown")
        if not empty:
            return
        if self.active_pane == Pane.REQUESTS:
            line.update(f"no request matches {text!r} among the last {RECENT_REQUESTS} "
                        "(older ones are gone; escape clears the filter)")
        else:
            line.update(f"no rows match {text!r} (escape clears the filter)")

    def _paint_status(self, now: int) -> None:
        model, backend = self.model, self.backend
        rate, ok = model.rates(now)
        opened, cooling, locked = model.counts(now)
        age = "–" if model.last_event_at is None else format_ms(max(0, now - model.last_event_at))
        mode = backend.status()
        viewers = self.room_viewers()
        if viewers is not None:  # the trainer sees who follows
            mode += f" │ room: {viewers} viewer{'' if viewers == 1 else 's'}"
        success = "–" if ok is None else f"{ok * 100:.0f}%"
        # badges first: a narrow terminal cuts the end of the line, never them
        why = f" ({self.read_only_why})" if self.read_only_why else ""
        badges = f"READ-ONLY{why} │ " if self.read_only else ""
        if self._frozen_at is not None:
            frozen = format_ms(int((time.monotonic() - self._frozen_at) * 1000))
            badges += f"FROZEN {frozen} (z) │ "
        badges += "".join(f"{name} DOWN │ " for name in self.servers_down)
        failing = backend.store_failing_since()
        store = "" if failing is None else (
            f"STORE FAILING {format_ms(max(0, now - failing))} │ ")
        status = self.query_one(StatusBar)
        # the scenario's or config's name goes last: a narrow terminal cuts it, not the counts
        status.update(
            f"{badges}{store}{mode} │ {rate:.1f}/s ok {success} │ open {opened} "
            f"cool {cooling} lock {locked} │ age {age} │ {backend.title}")
        status.set_class(opened > 0 or failing is not None or bool(self.servers_down),
                         "-alert")
        banner = self.query_one(FaultBanner)
        faults = model.active_faults
        banner.set_class(bool(faults), "-active")
        if faults:
            banner.update("⚠ FAULT ACTIVE: " + ", ".join(f"{n} on {t}" for n, t in faults.items()))

    def _paint_timeline(self, now: int) -> None:
        backend = self.backend
        timeline = self.query_one(ScenarioTimeline)
        scenario, replay = backend.scenario, backend.replay
        if scenario is None:  # real time: the herd as it happens, the last 10 minutes
            # a room's viewer: the trainer's run on its own clock, from its start
            in_room = getattr(backend, "room", None) is not None
            timeline.update(live_text(backend.title, now, self.model.total_requests,
                                      in_room=in_room))
            second = now - now % 1000  # the chart is drawn by whole seconds
            # a room sends its scenario's faults and the trainer's compared policy
            compared = backend.comparison if in_room else None
            faults = getattr(backend, "room_faults", ()) if in_room else ()
            self.query_one(HerdChartPlot).show(
                lambda points: self.model.live_chart(second, points, run_clock=in_room,
                                                     compared=compared, faults=faults),
                xlabel="scenario seconds" if in_room else "seconds before now")
            return
        if replay is None:
            state = "live, real time"
        elif replay.finished:
            state = "finished: R replays it"
        else:
            state = "paused" if replay.paused else f"playing ×{replay.speed:g}"
        timeline.update(replay_text(scenario, now, state, self.model.total_requests,
                                    self.size.width, short=not self.dashboard_fits))
        chart = self.query_one(HerdChartPlot)
        windows = [(f.name, f.at_ms, f.until_ms) for f in scenario.faults]
        # by whole seconds: a second's attempts are drawn once they are all in (a second
        # drawn as it went showed a dip at the end), and the chart changes once a second
        until = min(now - now % 1000, scenario.duration_ms)
        chart.show(lambda points: self.model.herd_chart(
            until, points, compared=backend.comparison, faults=windows))

    def action_pane(self, pane: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active != pane:
            self._history = [*self._history[-19:], self.active_pane]
        tabs.active = pane

    def action_go_back(self) -> None:
        """Escape: the filter box closes (its text cleared), else this pane's filter is
        cleared, else the pane shown before comes back."""
        if self.query_one("#command", Input).has_focus:
            self._close_command()
            return
        box = self.query_one("#filter", Input)
        if box.has_focus or self._pane_filters.get(self.active_pane):
            box.value = ""
            self._apply_filter("")
            return
        if self._history:
            self.query_one(TabbedContent).active = self._history.pop()

    def action_wide(self) -> None:
        self._wide = not self._wide
        self.notify("every provider column (the name stays put: scroll right with →)"
                    if self._wide else "the providers' most useful columns", timeout=3)
        self.refresh_view()

    def action_times(self) -> None:
        """`t`: the events' lines start with clock times instead of ages, or back."""
        logs = list(self.query(EventLog).results(EventLog))
        show_clock = not logs[0].show_clock
        for log in logs:
            log.use_clock(show_clock)
        self.notify("events: clock times (t: ages)" if show_clock else
                    "events: how long ago (t: clock times)", timeout=3)

    def action_freeze(self) -> None:
        """`z`: hold the panes as they are to read them; the model keeps consuming events
        and the next paint after `z` again catches up."""
        self._frozen_at = None if self._frozen_at is not None else time.monotonic()
        self.refresh_view()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.active_pane == Pane.EVENTS:
            self.query_one("#events-log", EventLog).clear()
        # the filter box shows this pane's filter, or nothing (it showed the last pane's)
        text = self._pane_filters.get(self.active_pane, "")
        box = self.query_one("#filter", Input)
        box.value = text
        box.set_class(bool(text), "-shown")
        box.disabled = not text
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
        """`/` is taken before the focused widget sees it (see `ConsoleAction.opens_box`):
        in a text box or a dialog it is passed on as the key it is."""
        if self.behind_a_dialog or isinstance(self.focused, Input):
            raise SkipAction()
        box = self.query_one("#filter", Input)
        box.value = self._pane_filters.get(self.active_pane, "")
        box.placeholder = ("a request id (x-request-id) or any text: enter opens the request"
                           if self.active_pane == Pane.REQUESTS else
                           "filter this pane's rows (enter applies, escape clears)")
        box.disabled = False
        box.add_class("-shown")
        # now, not after the keys already queued: they are the filter's text
        self.screen.set_focus(box)

    def action_command(self) -> None:
        """`:`: the command line, taken before any key after it (as `/`)."""
        if self.behind_a_dialog or isinstance(self.focused, Input):
            raise SkipAction()
        box = self.query_one("#command", Input)
        box.value = ""
        box.disabled = False
        box.add_class("-shown")
        self.screen.set_focus(box)

    def _close_command(self) -> None:
        box = self.query_one("#command", Input)
        box.value = ""
        box.remove_class("-shown")
        box.disabled = True
        self._focus_pane()

    async def _run_command(self, text: str) -> None:
        """A pane's name shows it; an action's name runs it (a destructive one asks
        first, as its key does); anything else is said to be unknown."""
        word = text.strip().lower()
        if word in {str(p) for p in Pane}:
            self.action_pane(word)  # first: the focus then goes into the pane shown
        self._close_command()
        if not word or word in {str(p) for p in Pane}:
            return
        if word in command_words():
            await self.run_action(word)
        else:
            self.notify(f"no pane or action called {word!r} (tab completes)",
                        severity="warning")

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "command":
            await self._run_command(event.value)
            return
        self._apply_filter(event.value)
        if self.active_pane == Pane.REQUESTS and event.value:
            RequestLookup(self).open(event.value.strip())

    def _apply_filter(self, text: str) -> None:
        """Set the active pane's filter (the other panes keep theirs) and give the keys
        back to the pane."""
        box = self.query_one("#filter", Input)
        if not text:
            box.remove_class("-shown")
            box.disabled = True
        pane = self.active_pane
        self._pane_filters[pane] = text
        for widget in self._filtered(pane):
            widget.filter_text = text
            if isinstance(widget, EventLog):
                widget.clear()
        self._focus_pane()
        self.refresh_view()

    def _filtered(self, pane: Pane) -> list[KeyedTable | EventLog]:
        """What a pane's filter applies to: its table or log (the overview: the
        dashboard's)."""
        if pane == Pane.OVERVIEW:
            return [*self.query("#dashboard KeyedTable").results(KeyedTable),
                    self.query_one("#dash-events", EventLog)]
        if pane == Pane.EVENTS:
            return [self.query_one("#events-log", EventLog)]
        if pane in SORTS:
            return [self.query_one(f"#{pane}-table", KeyedTable)]
        return []

    def _focus_pane(self) -> None:
        """Focus what the keys of the active pane act on. The focus always moves into the
        pane shown (or nowhere): a focused widget left in a hidden pane takes its tab back
        (the dashboard's table would pull `4` and `5` back to the overview)."""
        pane = self.active_pane
        if pane in SORTS:
            self.query_one(f"#{pane}-table", KeyedTable).focus()
        elif pane == Pane.EVENTS:
            self.query_one("#events-log", EventLog).focus()
        elif pane == Pane.OVERVIEW:
            self.query_one("#dash-providers", KeyedTable).focus()
        else:
            self.set_focus(None)

    def jump(self, pane: str, key: RowKey) -> None:
        self.action_pane(pane)
        self.refresh_view()
        table = self.query_one(f"#{pane}-table", KeyedTable)
        if not table.select_key(key):
            self.notify(f"{key_text(key)} is not in the {pane} pane now", severity="warning")
        table.focus()

    def selected(self) -> tuple[Pane, RowKey | None]:
        """The kind of the selected row (providers, connections, lockouts) and its key."""
        table = self._table()
        if table is None:
            return self.active_pane, None
        return table.kind, table.selected_key

    def on_data_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        """Enter on a table row (the table consumes the key itself) opens its detail; not
        when the key came with the one that opened a dialog (it is meant for the dialog)."""
        if not self.behind_a_dialog:
            self.action_detail()

    def action_detail(self) -> None:
        scenario = self.backend.scenario
        if self.active_pane == Pane.SCENARIO and scenario is not None:
            faults = [(f.name, f"{f.target} from {clock_text(f.at_ms)}") for f in scenario.faults]
            lesson = textwrap.wrap(scenario.description.replace("\n", " "), 70)
            self.push_screen(DetailScreen(scenario.name, [
                ("duration", clock_text(scenario.duration_ms)), *faults], lesson))
            return
        kind, key = self.selected()
        if key is None or kind not in SORTS:
            return
        detail = self.model.detail(kind, key, self.backend.now_ms())
        if detail is not None:
            self.push_screen(DetailScreen(*detail))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.active_pane, read_only=self.read_only))

    def action_glossary(self) -> None:
        self.push_screen(GlossaryScreen())
