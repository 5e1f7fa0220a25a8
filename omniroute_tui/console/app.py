"""The operations console: panes over the engine's state, operator actions, scenario
controls. The engine never touches widgets: its events feed `ConsoleModel`, and a
paint clock (5 a second, start to start) applies keyed diffs.

`ConsoleApp` is the layout and the lifecycle (backend, gateway, ticks); what it does is
split by concern: painting and the pane keys (`painting.py`), operator actions
(`operating.py`) and scenario controls (`replay_controls.py`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual.actions import ActionParseResult
from textual.app import App, ComposeResult, ScreenStackError
from textual.binding import BindingType
from textual.containers import Vertical
from textual.dom import DOMNode
from textual.widgets import Footer, Input, TabbedContent, TabPane

from ..config.operators import OperatorTokens
from ..config.router_config import MetricsAccess
from ..config.status import ConfigStatus
from ..state_document import state_document
from ..store import StoreError, StoreProblem
from .actions import bindings, command_words
from .collector import PacedCollections
from .commands import ConsoleCommands
from .model.backends import Backend
from .model.console_model import COLUMNS, SORTS, ConsoleModel
from .model.panes import PANES, Pane
from .operating import DESTRUCTIVE, OperatorControls
from .painting import DASHBOARD_PICKS, DASHBOARD_SIZE, PaneView
from .replay_controls import ReplayControls
from .screens.modals import ConfirmScreen, DetailScreen, HelpScreen
from .widgets.command_line import CommandLine
from .widgets.herd_chart import HerdChartPlot
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog, FaultBanner, PlainStatic, ScenarioTimeline, StatusBar

if TYPE_CHECKING:
    from .room import RoomServer

__all__ = ["FRAME_S", "ConsoleApp", "next_beat"]

log = logging.getLogger("omniroute.console")

#: the paint clock: six paints a second, start to start, so that the time between two
#: screen updates stays under a quarter of a second with a paint's own time and the
#: machine's jitter on top
FRAME_S = 1 / 6
MIN_WAIT_S = 0.02  # after a paint as long as a frame: the input still gets its turn


def next_beat(beat: float, now: float) -> float:
    """When the paint clock beats next, after the beat at `beat` (monotonic seconds) and
    its paint done at `now`: a frame after that beat, not after the tick's own start, so a
    tick that came late (a busy machine) does not push the ones after it; a paint that
    ran past the next beat waits MIN_WAIT_S (the input gets its turn) and the beat starts
    again from there."""
    return max(beat + FRAME_S, now + MIN_WAIT_S)


class ConsoleApp(PaneView):
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
        metrics: MetricsAccess = MetricsAccess.TOKEN,
        config_status: ConfigStatus | None = None,
        room: RoomServer | None = None,
        served_by_header: bool = True,
        operators: OperatorTokens | None = None,
    ) -> None:
        super().__init__()
        self.room = room  # `--serve-room`: this console's replay, served to viewers
        #: the replay whose scorecard was shown by itself at its end
        self._scored: object = None
        self.listen = listen
        self.token = token
        self.metrics = metrics  # who may scrape the served gateway's /metrics
        self.config_status = config_status  # the config file it serves, for /metrics
        self.served_by_header = served_by_header  # the config's gateway.served_by_header
        self.operators = operators  # the config's gateway.operators, for `--listen`
        self.gateway_server: Any = None
        self.servers_down: list[str] = []
        self.backend = backend
        self.model = model
        self.operator = operator
        self.read_only = read_only
        self._asked_read_only = read_only  # --read-only, or a room: whatever the token
        #: why it is read-only when the gateway says so of the token (the status bar's)
        self.read_only_why = ""
        self.autoplay = autoplay
        self._last_tick = time.monotonic()
        self._next_tick = self._last_tick  # when the paint clock beats next
        self._sort = dict.fromkeys(SORTS, 0)  # per table, the index into SORTS[pane]
        self._pane_filters: dict[Pane, str] = {}
        self._wide = False
        self._frozen_at: float | None = None
        self._history: list[Pane] = []
        self._collections = PacedCollections()
        self.clock: Callable[[], float] = time.monotonic  # the dialogs' guard time
        #: started with no scenario named: the picker opens over the demo
        self.pick_at_start = False
        #: what the replay keys do (pause, speed, step, jump, score, restart, pick)
        self.replay_controls = ReplayControls(self)
        #: what the operator keys do (reset, force-open, clear, enable or disable)
        self.operator_controls = OperatorControls(self)

    # -- the operator keys: asked first, refused read-only (`operator_controls`) ------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: the operator actions are out of the footer (their keys still
        reach `run_action`, which says why they are refused)."""
        if self.read_only and action in DESTRUCTIVE:
            return False
        return super().check_action(action, parameters)

    async def run_action(
        self, action: str | ActionParseResult, default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Destructive actions are refused in read-only mode and confirmed otherwise."""
        if isinstance(action, str) and action in DESTRUCTIVE:
            if self.read_only:
                self.operator_controls.refuse()
                return True
            question = self.operator_controls.question(action)
            if question is None:
                return True

            def confirmed(answer: bool | None) -> None:
                if answer:
                    self.call_later(super(ConsoleApp, self).run_action, action)

            self.push_screen(ConfirmScreen(question, clock=self.clock), confirmed)
            return True
        return await super().run_action(action, default_namespace, namespaces)

    def action_reset_breaker(self) -> None:
        self.operator_controls.reset_breaker()

    def action_force_open(self) -> None:
        self.operator_controls.force_open()

    def action_clear(self) -> None:
        self.operator_controls.clear()

    def action_clear_provider_lockouts(self) -> None:
        self.operator_controls.clear_provider_lockouts()

    def action_toggle_enabled(self) -> None:
        self.operator_controls.toggle_enabled()

    # -- the replay keys: `replay_controls` ---------------------------------------------------

    def action_pause(self) -> None:
        self.replay_controls.pause()

    def action_faster(self) -> None:
        self.replay_controls.faster()

    def action_slower(self) -> None:
        self.replay_controls.slower()

    def action_step(self) -> None:
        self.replay_controls.step()

    def action_jump(self) -> None:
        self.replay_controls.jump()

    def action_scorecard(self) -> None:
        self.replay_controls.scorecard()

    def action_restart(self) -> None:
        self.replay_controls.restart()

    def action_pick_scenario(self) -> None:
        self.replay_controls.pick_scenario()

    def token_role(self, name: str, role: str) -> None:
        """Attached to a gateway: the token used is `name`'s, of `role`. A `read` token
        makes the console read-only, and it says so; an `operate` one (after a reload
        rotated it) gives the actions back unless read-only was asked."""
        reading = role != "operate"
        self.read_only_why = f"{name}: {role} token" if reading else ""
        if self.read_only != (reading or self._asked_read_only):
            self.read_only = reading or self._asked_read_only
            self.refresh_bindings()
        if reading:
            self.notify(f"read-only: the token of {name!r} may only read (role {role}); "
                        "operator actions are disabled", title="read-only", timeout=10)

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield FaultBanner(id="banner")
        tabs = {spec.pane: spec.label for spec in PANES}
        with TabbedContent(initial=Pane.PROVIDERS, id="panes"):
            with TabPane(tabs[Pane.OVERVIEW], id=Pane.OVERVIEW):
                yield PlainStatic(id="overview-summary")
                with Vertical(id="dashboard"):
                    for kind in (Pane.PROVIDERS, Pane.CONNECTIONS, Pane.LOCKOUTS):
                        table = KeyedTable(kind, COLUMNS[kind], pick=DASHBOARD_PICKS[kind],
                                           id=f"dash-{kind}")
                        table.border_title = kind.capitalize()
                        yield table
                    log = EventLog(id="dash-events")
                    log.border_title = "Events"
                    yield log
            with TabPane(tabs[Pane.PROVIDERS], id=Pane.PROVIDERS):
                yield KeyedTable(Pane.PROVIDERS, COLUMNS[Pane.PROVIDERS], id="providers-table")
            with TabPane(tabs[Pane.CONNECTIONS], id=Pane.CONNECTIONS):
                yield KeyedTable(Pane.CONNECTIONS, COLUMNS[Pane.CONNECTIONS],
                                 id="connections-table")
            with TabPane(tabs[Pane.LOCKOUTS], id=Pane.LOCKOUTS):
                yield KeyedTable(Pane.LOCKOUTS, COLUMNS[Pane.LOCKOUTS], id="lockouts-table")
            with TabPane(tabs[Pane.EVENTS], id=Pane.EVENTS):
                log = EventLog(id="events-log")
                log.border_title = "Events"
                yield log
            with TabPane(tabs[Pane.SCENARIO], id=Pane.SCENARIO):
                yield ScenarioTimeline(id="timeline")
                yield HerdChartPlot(id="herd")
            with TabPane(tabs[Pane.REQUESTS], id=Pane.REQUESTS):
                yield KeyedTable(Pane.REQUESTS, COLUMNS[Pane.REQUESTS], id="requests-table")
            with TabPane(tabs[Pane.AUDIT], id=Pane.AUDIT):
                yield KeyedTable(Pane.AUDIT, COLUMNS[Pane.AUDIT], id="audit-table")
        yield PlainStatic(id="no-matches")
        yield Input(placeholder="filter rows (enter to apply, escape to clear)", id="filter",
                    disabled=True)
        yield CommandLine(command_words(), id="command", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self.open_first_pane()
        self.refresh_view()
        self._focus_pane()
        self.run_worker(self._start_backend(), group="backend", exit_on_error=False)
        if self.pick_at_start:
            self.replay_controls.pick_scenario()
        if self.autoplay:
            self._collections.start()  # the paint clock runs the full collections
            self._last_tick = time.monotonic()
            self._next_tick = self._last_tick + FRAME_S
            self.set_timer(FRAME_S, self._tick)

    def open_first_pane(self) -> None:
        """The pane shown at start: the dashboard where it fits."""
        if self.dashboard_fits:
            self.query_one(TabbedContent).active = Pane.OVERVIEW

    async def _start_backend(self, recover: bool = False) -> None:
        """Bring up what the backend needs (servers, the state database) off the UI path.
        The worker does not end the app on an exception (a bad database is asked about),
        so one that is a bug is said here, or it would end the worker silently."""
        try:
            await self._bring_up(recover)
        except Exception as exc:
            log.error("starting the console failed: %s: %s", type(exc).__name__, exc,
                      exc_info=exc)
            self.notify(f"could not start: {type(exc).__name__}: {exc} (a bug: --log-file "
                        "has its traceback)", severity="error", timeout=30)

    async def _bring_up(self, recover: bool) -> None:
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
            self.model.load_state_document(state_document(served.router.engine,
                                                  self.backend.providers))
        if self.listen is not None:
            await self._serve_gateway(*self.listen)
        if self.room is not None:
            await self._serve_room(self.room)
        self.refresh_view()

    async def _serve_room(self, room: RoomServer) -> None:
        room.on_end = lambda failure: self._stopped_serving(
            "ROOM", failure, "viewers no longer follow this run")
        try:
            await room.start()
        except OSError as exc:
            self.room = None
            self.notify(f"could not serve the room: {exc}", severity="error", timeout=30)
            return
        guard = "token required" if room.token else "read-only, open to anyone who can reach it"
        self.notify(f"room on {room.url} ({guard})", timeout=10)

    def room_viewers(self) -> int | None:
        return None if self.room is None else self.room.viewers

    def refresh_view(self) -> None:
        super().refresh_view()
        replay = self.backend.replay
        if (replay is not None and replay.finished and self._scored is not replay
                and not self.behind_a_dialog):
            self._scored = replay  # once a run: `S` shows it again
            self.replay_controls.scorecard()
        if self.room is not None and self.backend.replay is not None:
            # pause, speed and restarts reach viewers, and the attempts their charts draw
            self.room.follow(self.backend.replay, self.model.series)

    async def _serve_gateway(self, host: str, port: int) -> None:
        """Serve the gateway from this console's own router (`--listen`)."""
        from ..gateway import Gateway, GatewayServer

        served = self.backend.served()
        if served is None:
            self.notify("this console has no router on real time to serve", severity="error")
            return
        gateway = Gateway(served.router, self.backend.providers, token=self.token,
                          store=served.store, metrics=self.metrics,
                          config_status=self.config_status,
                          served_by_header=self.served_by_header, operators=self.operators)
        server = GatewayServer(gateway, host, port, on_end=lambda failure: self._stopped_serving(
            "GATEWAY", failure, "its clients get no answers"))
        try:
            await server.start()
        except (OSError, SystemExit) as exc:
            self.notify(f"could not serve the gateway on {host}:{port}: {exc}",
                        severity="error", timeout=30)
            return
        self.gateway_server = server
        self.notify(f"gateway on {server.url}", timeout=5)

    def _stopped_serving(self, name: str, failure: str, consequence: str) -> None:
        """A server this console ran stopped on its own (its log line says why): the
        status bar says `ROOM DOWN` until the console ends, and a notice says what is lost;
        restarting the console serves it again."""
        self.servers_down.append(name)
        self.notify(f"{failure}: {consequence}; restart the console to serve it again",
                    title=f"{name.lower()} down", severity="error", timeout=30)
        self.refresh_view()

    def _store_problem(self, exc: StoreError) -> None:
        """A bad state database: say what is wrong and offer the way out, never a crash."""
        if exc.problem is not StoreProblem.CORRUPT:
            self.push_screen(ConfirmScreen(f"{exc}\n\nQuit now?", clock=self.clock),
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
            "beside it (yes), or quit (no)?", clock=self.clock), answered)

    async def on_unmount(self) -> None:
        self._collections.stop()
        if self.room is not None:
            await self.room.stop()
        if self.gateway_server is not None:
            await self.gateway_server.stop()
        await self.backend.stop()  # flushes the state database

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
        if self._collections.due:  # after the screen update, while the next is away
            self.call_after_refresh(
                lambda: self._collections.collect(self._next_tick - time.monotonic()))
        after = time.monotonic()
        self._next_tick = next_beat(self._next_tick, after)
        self.set_timer(self._next_tick - after, self._tick)
