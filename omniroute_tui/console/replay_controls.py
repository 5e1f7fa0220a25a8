"""Scenario controls: pause, speed, step, jump, the scorecard, replay from the start and
the scenario picker (a replay only). The app holds one and its replay keys call it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.problems import ConfigError
from .model.backends import SimulationBackend
from .model.console_model import ConsoleModel
from .model.lesson_progress import LessonBackend
from .screens.modals import DetailScreen
from .screens.picker import ScenarioPicker
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog

if TYPE_CHECKING:
    from .app import ConsoleApp

__all__ = ["ReplayControls"]


class ReplayControls:
    """What the replay keys do to `app`'s run; on real time they say there is nothing to
    act on."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        #: whether the run was paused when the picker paused it (escape gives it back)
        self._paused_for_picker = False

    def _replay(self, what: str) -> SimulationBackend | None:
        """The replay controls, or None with a word to the user on real time."""
        replay = self.app.backend.replay
        if replay is None and getattr(self.app.backend, "room", None) is not None:
            self.app.notify(f"this console follows a room: only the trainer can {what}",
                        severity="warning")
        elif replay is None:
            self.app.notify(f"this console runs on real time: nothing to {what}",
                        severity="warning")
        return replay

    def pause(self) -> None:
        """A replay pauses; on real time (live, attached) nothing can pause the data, so
        `space` freezes the display as `z` does; a room's viewer is told that only the
        trainer pauses the run (`z` freezes its display)."""
        replay = self.app.backend.replay
        if replay is None and getattr(self.app.backend, "room", None) is not None:
            self._replay("pause")
            return
        if replay is None:
            self.app.action_freeze()
            return
        replay.paused = not replay.paused
        self.app.refresh_view()

    def faster(self) -> None:
        if replay := self._replay("speed up"):
            replay.faster()
            self.app.refresh_view()

    def slower(self) -> None:
        if replay := self._replay("slow down"):
            replay.slower()
            self.app.refresh_view()

    def step(self) -> None:
        if replay := self._replay("step"):
            replay.step(1000)
            self.app.refresh_view()

    def jump(self) -> None:
        """To the next fault's start (a lesson: its next step), paused there; a room's
        viewers follow."""
        if replay := self._replay("jump"):
            self.app.notify(replay.jump(), timeout=6)
            self.app.refresh_view()

    def scorecard(self) -> None:
        """The finished run in numbers, against the compared policy (docs/console.md)."""
        if replay := self._replay("score"):
            card = replay.scorecard()
            if card is None:
                self.app.notify("the scorecard comes at the run's end: f and n go on, or let "
                            "it play", severity="warning")
                return
            self.app.push_screen(DetailScreen(*card))

    def restart(self) -> None:
        replay = self.app.backend.replay
        if replay is None:
            return
        model = ConsoleModel(self.app.backend.providers, replay.now_ms)
        model.routes = dict(self.app.model.routes)
        restarted = replay.restarted(subscribers=(model.on_event,))
        model.now = restarted.now_ms
        self._run_anew(restarted, model)

    def _run_anew(self, backend: SimulationBackend, model: ConsoleModel) -> None:
        """Show `backend`'s run in place of the one shown: its tables and logs empty."""
        self.app.backend, self.app.model = backend, model
        for table in self.app.query(KeyedTable):
            table.reset()
        for log in self.app.query(EventLog):
            log.clear()
        self.app.refresh_view()

    def pick_scenario(self) -> None:
        """The picker: another shipped scenario replayed from its start, in place of
        this one (a room's and a lesson's scenario is the one they started with)."""
        replay = self._replay("pick a scenario")
        if replay is None:
            return
        if self.app.room is not None or isinstance(replay, LessonBackend):
            self.app.notify("a room or a lesson replays the scenario it started with",
                        severity="warning")
            return
        # the run waits while the list is read: escape gives it back as it was
        self._paused_for_picker, replay.paused = replay.paused, True
        self.app.refresh_view()
        self.app.push_screen(ScenarioPicker(replay.title), self._picked)

    def _picked(self, name: str | None) -> None:
        replay = self.app.backend.replay
        if replay is None:
            return
        if name is None:  # kept: the run goes on as it was
            replay.paused = self._paused_for_picker
            self.app.refresh_view()
            return
        from simulator.scenario import load_scenario, resolve_scenario

        try:
            scenario = load_scenario(resolve_scenario(name))
        except (ConfigError, ValueError, OSError) as exc:
            replay.paused = self._paused_for_picker  # the run goes on as it was
            self.app.notify(f"{name} cannot be replayed: {exc}", severity="error", timeout=10)
            self.app.refresh_view()
            return
        model = ConsoleModel(scenario.providers, lambda: 0, routes=scenario.config.routes)
        backend = SimulationBackend(scenario, speed=replay.speed,
                                    subscribers=(model.on_event,))
        model.now = backend.now_ms
        self._run_anew(backend, model)
        self.app.notify(f"replaying {name} from its start", timeout=4)
