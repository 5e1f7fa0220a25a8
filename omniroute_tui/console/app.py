"""The operations console: panes over the engine's state, operator actions, scenario
controls. The engine never touches widgets: its events feed `ConsoleModel`, and a
one-shot timer re-armed after each paint (at most 4 a second) applies keyed diffs."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from textual.actions import ActionParseResult
from textual.app import App, ComposeResult, ScreenStackError
from textual.binding import BindingType
from textual.containers import Vertical
from textual.dom import DOMNode
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from ..config.durations import format_ms
from ..engine.engine import UnknownTarget
from ..state_view import state_view
from ..store import StoreError, StoreProblem
from .actions import ACTIONS, bindings
from .commands import ConsoleCommands
from .model.backends import Backend
from .model.view_state import COLUMNS, SORTS, ConsoleModel, clock_text
from .screens.modals import ConfirmScreen, DetailScreen, HelpScreen
from .widgets.herd_chart import HerdChartPlot
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog, FaultBanner, ScenarioTimeline, StatusBar, timeline_lines

__all__ = ["ConsoleApp"]

FRAME_S = 0.25  # at most four paints a second
FORCE_OPEN_MS = 5 * 60_000
PANES = ("overview", "providers", "connections", "lockouts", "events", "scenario",
         "requests", "audit")
#: from this size up, the overview pane is a dashboard: every layer and the events at once
DASHBOARD_SIZE = (120, 36)
#: the dashboard's compact tables: which of each pane's columns they show
DASHBOARD_PICKS = {"providers": (0, 1, 2, 3, 5, 8, 10, 11), "connections": (0, 1, 2, 3),
                   "lockouts": (1, 2, 3, 5)}
#: the panes whose rows are operator targets (providers, connections, lockouts)
_TARGETS = ("providers", "connections", "lockouts")
_DESTRUCTIVE = {a.name for a in ACTIONS if a.destructive}


class ConsoleApp(App[None]):
    TITLE = "OmniRoute Console"
    CSS_PATH = Path(__file__).parent / "styles" / "console.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings()  # type: ignore[assignment]
    COMMANDS = App.COMMANDS | {ConsoleCommands}
    # the screen gets -wide and -tall from DASHBOARD_SIZE up: the CSS shows the dashboard
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (DASHBOARD_SIZE[0], "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (DASHBOARD_SIZE[1], "-tall")]

    def __init__(
        self,
        backend: Backend,
        model: ConsoleModel,
        *,
        operator: str,
        read_only: bool = False,
        autoplay: bool = True,
        listen: tuple[str, int] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__()
        self.listen = listen
        self.token = token
        self.gateway_server: Any = None
        self.backend = backend
        self.model = model
        self.operator = operator
        self.read_only = read_only
        self.autoplay = autoplay
        self._last_tick = time.monotonic()
        self._sort = dict.fromkeys(SORTS, 0)  # per table, the index into SORTS[pane]

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield FaultBanner(id="banner")
        with TabbedContent(initial="providers", id="panes"):
            with TabPane("0 Overview", id="overview"):
                yield Static("", id="overview-summary")
                with Vertical(id="dashboard"):
                    for kind in ("providers", "connections", "lockouts"):
                        table = KeyedTable(kind, COLUMNS[kind], pick=DASHBOARD_PICKS[kind],
                                           id=f"dash-{kind}")
                        table.border_title = kind.capitalize()
                        yield table
                    log = EventLog(id="dash-events")
                    log.border_title = "Events"
                    yield log
            with TabPane("1 Providers", id="providers"):
                yield KeyedTable("providers", COLUMNS["providers"], id="providers-table")
            with TabPane("2 Conns", id="connections"):
                yield KeyedTable("connections", COLUMNS["connections"],
                                 id="connections-table")
            with TabPane("3 Locks", id="lockouts"):
                yield KeyedTable("lockouts", COLUMNS["lockouts"], id="lockouts-table")
            with TabPane("4 Events", id="events"):
                yield EventLog(id="events-log")
            with TabPane("5 Faults", id="scenario"):
                yield ScenarioTimeline(id="timeline")
                yield HerdChartPlot(id="herd")
            with TabPane("6 Reqs", id="requests"):
                yield KeyedTable("requests", COLUMNS["requests"], id="requests-table")
            with TabPane("7 Audit", id="audit"):
                yield KeyedTable("audit", COLUMNS["audit"], id="audit-table")
        yield Static("", id="no-matches")
        yield Input(placeholder="filter rows (enter to apply, escape to clear)", id="filter",
                    disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        if self.dashboard_fits:
            self.query_one(TabbedContent).active = "overview"
        self.refresh_view()
        self._focus_pane()
        self.run_worker(self._start_backend(), group="backend", exit_on_error=False)
        if self.autoplay:
            self._last_tick = time.monotonic()
            self.set_timer(FRAME_S, self._tick)

    async def _start_backend(self, recover: bool = False) -> None:
        """Bring up what the backend needs (servers, the state database) off the UI path."""
        try:
            await self.backend.start(recover=recover)
        except StoreError as exc:
            self._store_problem(exc)
            return
        except OSError as exc:
            self.notify(f"could not start: {exc}", severity="error", timeout=30)
            return
        served = self.backend.served()
        if served is not None and served.store is not None:
            # a restore is silent (no events): take the restored state over as a whole
            self.model.load_state_view(state_view(served.router.engine,
                                                  self.backend.providers))
        if self.listen is not None:
            await self._serve_gateway(*self.listen)
        self.refresh_view()

    async def _serve_gateway(self, host: str, port: int) -> None:
        """Serve the gateway from this console's own router (`--listen`)."""
        from ..gateway import Gateway, GatewayServer

        served = self.backend.served()
        if served is None:
            self.notify("this console has no router on real time to serve", severity="error")
            return
        gateway = Gateway(served.router, self.backend.providers, token=self.token,
                          store=served.store)
        server = GatewayServer(gateway, host, port)
        try:
            await server.start()
        except (OSError, SystemExit) as exc:
            self.notify(f"could not serve the gateway on {host}:{port}: {exc}",
                        severity="error", timeout=30)
            return
        self.gateway_server = server
        self.notify(f"gateway on {server.url}", timeout=5)

    def _store_problem(self, exc: StoreError) -> None:
        """A bad state database: say what is wrong and offer the way out, never a crash."""
        if exc.problem is not StoreProblem.CORRUPT:
            self.push_screen(ConfirmScreen(f"{exc}\n\nQuit now?"),
                             lambda _: self.exit(message=str(exc)))
            return

        def answered(start_empty: bool | None) -> None:
            if not start_empty:
                self.exit(message=str(exc))
                return
            self.run_worker(self._start_backend(recover=True), group="backend",
                            exit_on_error=False)

        self.push_screen(ConfirmScreen(
            f"{exc.path}: {exc.detail}.\n\nStart with an empty store and keep the bad file "
            "beside it (yes), or quit (no)?"), answered)

    async def on_unmount(self) -> None:
        if self.gateway_server is not None:
            await self.gateway_server.stop()
        await self.backend.stop()  # flushes the state database

    # -- the refresh loop -----------------------------------------------------------------

    def _tick(self) -> None:
        try:
            screen = self.screen
        except ScreenStackError:  # shutting down: a last tick after the screens are gone
            return
        now = time.monotonic()
        elapsed, self._last_tick = now - self._last_tick, now
        self.backend.tick(min(elapsed, 1.0))
        if not isinstance(screen, ConfirmScreen | HelpScreen | DetailScreen):
            self.refresh_view()
        self.set_timer(FRAME_S, self._tick)  # re-armed: a slow paint stretches the interval

    @property
    def active_pane(self) -> str:
        return self.query_one(TabbedContent).active or "providers"

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
            elif pane == "events":
                log = self.query_one("#events-log", EventLog)
                log.catch_up(model.events, model.event_serial)
                matched = log.matched
            elif pane == "overview":
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
        rows = {"providers": model.provider_rows, "connections": model.connection_rows,
                "lockouts": model.lockout_rows, "requests": model.request_rows,
                "audit": model.audit_rows}[kind](now)
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
        chart.draw(self.model.herd_chart(min(now, scenario.duration_ms),
                                         max(10, chart.size.width - 12),
                                         compared=backend.comparison, faults=windows))

    # -- panes, filter, detail --------------------------------------------------------------

    def action_pane(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.active_pane == "events":
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
            self.query_one("#events-log", EventLog) if self.active_pane == "events" else None)
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
        elif pane == "overview" and self.dashboard_fits:
            self.query_one("#dash-providers", KeyedTable).focus()

    def jump(self, pane: str, key: str) -> None:
        self.action_pane(pane)
        self.refresh_view()
        table = self.query_one(f"#{pane}-table", KeyedTable)
        if not table.select_key(key):
            self.notify(f"{key} is not in the {pane} pane now", severity="warning")
        table.focus()

    def _selected(self) -> tuple[str, str | None]:
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
        if self.active_pane == "scenario" and scenario is not None:
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

    # -- scenario controls --------------------------------------------------------------

    def _replay(self, what: str) -> Any:
        """The replay controls, or None with a word to the user on real time."""
        replay = self.backend.replay
        if replay is None:
            self.notify(f"this console runs on real time: nothing to {what}",
                        severity="warning")
        return replay

    def action_pause(self) -> None:
        if replay := self._replay("pause"):
            replay.paused = not replay.paused
            self.refresh_view()

    def action_faster(self) -> None:
        if replay := self._replay("speed up"):
            replay.faster()
            self.refresh_view()

    def action_slower(self) -> None:
        if replay := self._replay("slow down"):
            replay.slower()
            self.refresh_view()

    def action_step(self) -> None:
        if replay := self._replay("step"):
            replay.step(1000)
            self.refresh_view()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    # -- operator actions ---------------------------------------------------------------

    async def run_action(
        self, action: str | ActionParseResult, default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Destructive actions are refused in read-only mode and confirmed otherwise."""
        if isinstance(action, str) and action in _DESTRUCTIVE:
            if self.read_only:
                self.notify("read-only console: operator actions are disabled",
                            title="refused", severity="warning")
                return True
            question = self._question(action)
            if question is None:
                return True

            def confirmed(answer: bool | None) -> None:
                if answer:
                    self.call_later(super(ConsoleApp, self).run_action, action)

            self.push_screen(ConfirmScreen(question), confirmed)
            return True
        return await super().run_action(action, default_namespace, namespaces)

    def _question(self, action: str) -> str | None:
        pane, key = self._selected()
        provider = self._selected_provider()
        if action == "restart":
            return "Replay the scenario from the start?"
        if provider is None:
            self.notify("select a provider, connection or lockout first", severity="warning")
            return None
        if action == "reset_breaker":
            return f"Reset the breaker of {provider} to CLOSED?"
        if action == "force_open":
            return f"Force the breaker of {provider} OPEN for {format_ms(FORCE_OPEN_MS)}?"
        if action == "clear_provider_lockouts":
            return f"Clear every model lockout of {provider}?"
        if action == "clear":
            if pane == "connections":
                return f"Clear the cooldown of {key}?"
            if pane == "lockouts":
                return f"Clear the lockout of {key}?"
            self.notify("select a connection or a lockout to clear", severity="warning")
            return None
        if action == "toggle_enabled":
            if pane != "connections" or key is None:
                self.notify("select a connection to enable or disable", severity="warning")
                return None
            conn = self.model.connections[tuple(key.split("/", 1))]  # type: ignore[index]
            return f"{'Enable' if conn.disabled else 'Disable'} {key}?"
        return None

    def _operate(self, what: str, target: str, do: Callable[[], Awaitable[None]]) -> None:
        """Carry out an operator action in a worker (on an attached console it is an HTTP
        call); a failure names the action, its target and the reason."""
        self.run_worker(self._carry_out(what, target, do), group="operator")

    async def _carry_out(self, what: str, target: str,
                         do: Callable[[], Awaitable[None]]) -> None:
        try:
            await do()
        except (UnknownTarget, ValueError, OSError) as exc:
            self.notify(f"{what} {target} failed: {exc}", title="action failed",
                        severity="error", timeout=10)
            return
        self.refresh_view()

    def _selected_provider(self) -> str | None:
        """The provider of the selected row, whichever pane it is in."""
        kind, key = self._selected()
        return key.split("/", 1)[0] if key and kind in _TARGETS else None

    def action_reset_breaker(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("reset of the breaker of", provider,
                          lambda: op.reset_breaker(provider, actor=self.operator))

    def action_force_open(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("force-open of", provider,
                          lambda: op.force_open(provider, FORCE_OPEN_MS, actor=self.operator))

    def action_clear(self) -> None:
        pane, key = self._selected()
        if key is None:
            return
        op = self.backend.operator
        if pane == "connections":
            provider, conn = key.split("/", 1)
            self._operate("clearing the cooldown of", key,
                          lambda: op.clear_cooldown(provider, conn, actor=self.operator))
        elif pane == "lockouts":
            provider, conn, model = key.split("/", 2)
            self._operate("clearing the lockout of", key,
                          lambda: op.clear_lockouts(provider, conn, model,
                                                    actor=self.operator))

    def action_clear_provider_lockouts(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("clearing the lockouts of", provider,
                          lambda: op.clear_lockouts(provider, actor=self.operator))

    def action_toggle_enabled(self) -> None:
        pane, key = self._selected()
        if pane != "connections" or key is None:
            return
        provider, conn = key.split("/", 1)
        disabled = self.model.connections[(provider, conn)].disabled
        op = self.backend.operator
        self._operate("enabling" if disabled else "disabling", key,
                      lambda: op.set_enabled(provider, conn, disabled, actor=self.operator))

    def action_restart(self) -> None:
        replay = self.backend.replay
        if replay is None:
            return
        model = ConsoleModel(self.backend.providers, replay.now_ms)
        restarted = replay.restarted(subscribers=(model.on_event,))
        model.now = restarted.now_ms
        self.backend, self.model = restarted, model
        for table in self.query(KeyedTable):
            table.reset()
        for log in self.query(EventLog):
            log.clear()
        self.refresh_view()
