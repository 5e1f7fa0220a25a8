"""Scenario controls: pause, speed, step and replay from the start (a replay only)."""

from __future__ import annotations

from ..config.problems import ConfigError
from .model.backends import SimulationBackend
from .model.console_model import ConsoleModel
from .model.lesson_progress import LessonBackend
from .painting import PaneView
from .screens.modals import DetailScreen
from .screens.picker import ScenarioPicker
from .widgets.keyed_table import KeyedTable
from .widgets.panels import EventLog

__all__ = ["ReplayControls"]


class ReplayControls(PaneView):
    """Keys that act on a replay; on real time they say there is nothing to act on."""

    #: whether the run was paused when the picker paused it (escape gives it back)
    _paused_for_picker = False

    def _replay(self, what: str) -> SimulationBackend | None:
        """The replay controls, or None with a word to the user on real time."""
        replay = self.backend.replay
        if replay is None and getattr(self.backend, "room", None) is not None:
            self.notify(f"this console follows a room: only the trainer can {what}",
                        severity="warning")
        elif replay is None:
            self.notify(f"this console runs on real time: nothing to {what}",
                        severity="warning")
        return replay

    def action_pause(self) -> None:
        """A replay pauses; on real time (live, attached) nothing can pause the data, so
        `space` freezes the display as `z` does; a room's viewer is told that only the
        trainer pauses the run (`z` freezes its display)."""
        replay = self.backend.replay
        if replay is None and getattr(self.backend, "room", None) is not None:
            self._replay("pause")
            return
        if replay is None:
            self.action_freeze()
            return
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

    def action_jump(self) -> None:
        """To the next fault's start (a lesson: its next step), paused there; a room's
        viewers follow."""
        if replay := self._replay("jump"):
            self.notify(replay.jump(), timeout=6)
            self.refresh_view()

    def action_scorecard(self) -> None:
        """The finished run in numbers, against the compared policy (docs/console.md)."""
        if replay := self._replay("score"):
            card = replay.scorecard()
            if card is None:
                self.notify("the scorecard comes at the run's end: f and n go on, or let "
                            "it play", severity="warning")
                return
            self.push_screen(DetailScreen(*card))

    def action_restart(self) -> None:
        replay = self.backend.replay
        if replay is None:
            return
        model = ConsoleModel(self.backend.providers, replay.now_ms)
        model.routes = dict(self.model.routes)
        restarted = replay.restarted(subscribers=(model.on_event,))
        model.now = restarted.now_ms
        self._run_anew(restarted, model)

    def _run_anew(self, backend: SimulationBackend, model: ConsoleModel) -> None:
        """Show `backend`'s run in place of the one shown: its tables and logs empty."""
        self.backend, self.model = backend, model
        for table in self.query(KeyedTable):
            table.reset()
        for log in self.query(EventLog):
            log.clear()
        self.refresh_view()

    def action_pick_scenario(self) -> None:
        """The picker: another shipped scenario replayed from its start, in place of
        this one (a room's and a lesson's scenario is the one they started with)."""
        replay = self._replay("pick a scenario")
        if replay is None:
            return
        if getattr(self, "room", None) is not None or isinstance(replay, LessonBackend):
            self.notify("a room or a lesson replays the scenario it started with",
                        severity="warning")
            return
        # the run waits while the list is read: escape gives it back as it was
        self._paused_for_picker, replay.paused = replay.paused, True
        self.refresh_view()
        self.push_screen(ScenarioPicker(replay.title), self._picked)

    def _picked(self, name: str | None) -> None:
        replay = self.backend.replay
        if replay is None:
            return
        if name is None:  # kept: the run goes on as it was
            replay.paused = self._paused_for_picker
            self.refresh_view()
            return
        from simulator.scenario import load_scenario, resolve_scenario

        try:
            scenario = load_scenario(resolve_scenario(name))
        except (ConfigError, ValueError, OSError) as exc:
            replay.paused = self._paused_for_picker  # the run goes on as it was
            self.notify(f"{name} cannot be replayed: {exc}", severity="error", timeout=10)
            self.refresh_view()
            return
        model = ConsoleModel(scenario.providers, lambda: 0, routes=scenario.config.routes)
        backend = SimulationBackend(scenario, speed=replay.speed,
                                    subscribers=(model.on_event,))
        model.now = backend.now_ms
        self._run_anew(backend, model)
        self.notify(f"replaying {name} from its start", timeout=4)
