"""Attaching the console to a running gateway: state and events over the management API,
operator actions as HTTP calls, reconnection with backoff when the gateway goes away.

Attached to a room (`--serve-room`), the console follows the trainer's replay: the state
and the stream carry its `replay` part (virtual time, speed, paused), and the console's
clock is the replay's, run on between frames at the trainer's speed."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from ...clock import SystemClock
from ...config.durations import format_ms
from ...engine.events import Event, event_from_dict
from .backends import RealTimeBackend
from .views import AttemptSeries, load_counts

__all__ = ["AttachBackend", "AttachError", "GatewayDown", "RemoteOperator", "fetch_state"]

log = logging.getLogger("omniroute.attach")

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
#: a room's faults a viewer takes at most (a scenario has far fewer)
MAX_ROOM_FAULTS = 1000
HEALTH_EVERY_S = 5.0  # how often an attached console reads the gateway's /health


class AttachError(Exception):
    """The gateway cannot be attached to; the message says why."""


def _auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"authorization": f"Bearer {token}"}


class GatewayDown(AttachError):
    """Nothing answers at the gateway's address (yet): the console waits for it."""


def fetch_state(url: str, token: str | None, timeout_s: float = 5.0) -> dict[str, Any]:
    """The gateway's state, synchronously: the console needs it before it can draw.
    Without a token, only a room that asks for none answers."""
    try:
        reply = httpx.get(f"{url.rstrip('/')}/api/resilience/state",
                          headers=_auth(token), timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise GatewayDown(f"cannot reach {url}: {exc}") from None
    if reply.status_code == 401:
        if token is None:
            raise AttachError(f"{url} wants a token: --token-file FILE or $OMNIROUTE_TOKEN")
        raise AttachError(f"{url} refused the token (401)")
    if reply.status_code == 404:
        raise AttachError(f"{url} serves no management API (was it started with a token?)")
    if reply.status_code != 200:
        raise AttachError(f"{url} answered {reply.status_code}")
    data: dict[str, Any] = reply.json()
    return data


class RemoteOperator:
    """The operator actions, carried out by the gateway over its management API."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    actor: str = "console") -> None:
        """The gateway audits the name of the token; the console's user (`--operator`)
        goes with it as the reason (`alice (dave's console)`)."""
        try:
            why = f"{actor}'s console".encode()
            reply = await self._client.request(method, path, json=body,
                                               headers={b"x-omniroute-reason": why})
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise OSError(f"the gateway at {self._client.base_url} did not answer "
                          f"({reason})") from None
        if reply.status_code >= 400:
            try:
                message = reply.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = reply.text[:200]
            raise ValueError(f"the gateway refused: {message}")

    async def reset_breaker(self, provider: str, *, actor: str) -> None:
        await self._call("POST", f"/api/resilience/breakers/{provider}/reset", actor=actor)

    async def force_open(self, provider: str, duration_ms: int, *, actor: str) -> None:
        await self._call("POST", f"/api/resilience/breakers/{provider}/force-open",
                          {"for": duration_ms}, actor=actor)

    async def clear_cooldown(self, provider: str, connection: str, *, actor: str) -> None:
        await self._call("POST", f"/api/resilience/connections/{provider}/{connection}/clear",
                          actor=actor)

    async def set_enabled(self, provider: str, connection: str, enabled: bool, *,
                          actor: str) -> None:
        action = "enable" if enabled else "disable"
        await self._call("POST",
                          f"/api/resilience/connections/{provider}/{connection}/{action}",
                          actor=actor)

    async def clear_lockouts(self, provider: str | None = None, connection: str | None = None,
                             model: str | None = None, *, actor: str) -> None:
        body: dict[str, str | bool] = {
            k: v for k, v in (("provider", provider), ("connection", connection),
                              ("model", model)) if v is not None} or {"all": True}
        await self._call("DELETE", "/api/resilience/lockouts", body, actor=actor)


class AttachBackend(RealTimeBackend):
    """The console's backend when attached to a gateway."""

    mode = "attached"

    def __init__(self, url: str, token: str | None, *,
                 on_event: Callable[[Event, str | None], None],
                 on_state: Callable[[dict[str, Any]], None],
                 on_history: Callable[[list[Event], list[dict[str, Any]]], None] | None = None,
                 on_note: Callable[[int, str], None] | None = None,
                 on_run: Callable[[int, str], None] | None = None,
                 ) -> None:
        """`on_note(t, text)` gets the link's own news for the events log: a lost
        connection and how long it was gone; `on_run(t, text)` a room's new run (the
        trainer replayed from the start), before its state and history come."""
        self.url = url.rstrip("/")
        self.title = self.url
        self.providers: dict[str, Any] = {}
        self._client = httpx.AsyncClient(base_url=self.url, timeout=10, headers=_auth(token))
        self.operator = RemoteOperator(self._client)
        self._on_event = on_event
        self._on_state = on_state
        self._on_history = on_history
        self._on_note = on_note
        self._on_run = on_run
        self._moved = False  # the room moved to a new run: its stream ends for that
        self.ever_connected = False
        self._lost_at: int | None = None
        self._clock = SystemClock()
        self._task: asyncio.Task[None] | None = None
        self._health_task: asyncio.Task[None] | None = None
        self.connected = False
        self.retry_in_s: float | None = None
        self._failing_since: int | None = None  # the gateway's store or fleet store
        #: the token's name and role as the gateway said last (None: not said, a room)
        self.caller: tuple[str, str] | None = None
        self.on_caller: Callable[[str, str], None] | None = None
        #: a room's replay as it said last (None for a gateway), and when (monotonic s)
        self.room: dict[str, Any] | None = None
        self._room_at = 0.0
        #: a room's scenario faults (name, from ms, to ms) and its trainer's compared
        #: policy's attempts, for the herd chart
        self.room_faults: list[tuple[str, int, int]] = []
        self.comparison: AttemptSeries | None = None
        self._named: set[str] = set()  # the providers the state named
        self._bugs: set[str] = set()  # the places whose bug was logged with its traceback

    async def request_record(self, request_id: str) -> dict[str, Any] | None:
        """What the gateway (any replica of its fleet) keeps of a request, by its id
        (`GET /api/requests/{id}`); None: nothing; AttachError: it could not say."""
        try:
            reply = await self._client.get(f"/api/requests/{quote(request_id, safe='')}")
        except httpx.HTTPError as exc:
            raise AttachError(f"the gateway did not answer ({exc or type(exc).__name__})"
                              ) from None
        if reply.status_code == 404:
            return None
        try:
            body = reply.json()
        except ValueError:
            body = None
        if reply.status_code != 200 or not isinstance(body, dict):
            message = (body.get("error", {}).get("message") if isinstance(body, dict)
                       and isinstance(body.get("error"), dict) else None)
            raise AttachError(str(message or f"the gateway answered {reply.status_code}"))
        return body

    def _bug(self, where: str, exc: Exception) -> str:
        """An exception of ours, not the gateway's: logged (with its traceback the first
        time in `where`), and the loop goes on. Returns it as a reason."""
        reason = f"{type(exc).__name__}: {exc}"[:300]
        log.error("%s failed on %s: %s; going on", where, self.url, reason,
                  exc_info=exc if where not in self._bugs else None)
        self._bugs.add(where)
        return reason

    def follow_room(self, replay: object) -> None:
        """Take a room's `replay` part (from its state or its stream); anything else is
        ignored: a gateway sends none. Another run than the one followed (the trainer
        replayed from the start) is said in the events log, whichever brought it."""
        if (isinstance(replay, dict) and isinstance(replay.get("now"), int)
                and isinstance(replay.get("speed"), int | float)):
            before = self.room
            self.room, self._room_at = replay, time.monotonic()
            self._compare(replay.get("compared"))
            self.title = f"room {self.url} {replay.get('scenario', '')}".rstrip()
            if before is not None and replay.get("run") != before.get("run"):
                self._moved = True
                if self._on_run is not None:
                    run = replay.get("run")
                    which = f" (run {run + 1})" if type(run) is int else ""
                    self._on_run(replay["now"], "room: the trainer replayed "
                                 f"{replay.get('scenario', 'the scenario')} from the start"
                                 f"{which}; what follows is the new run")

    def now_ms(self) -> int:
        room = self.room
        if room is None:
            return self._clock.now_ms()
        if room.get("paused") or room.get("finished") or not self.connected:
            return int(room["now"])
        ran = (time.monotonic() - self._room_at) * float(room["speed"]) * 1000
        return int(room["now"]) + round(min(ran, 5000 * float(room["speed"])))

    def status(self) -> str:
        if self.connected and self.room is not None:
            from .text import clock_text

            lesson = self.room.get("lesson")
            step = (f" · step {lesson['step']} of {lesson['steps']}"
                    if isinstance(lesson, dict) and lesson.get("step") else "")
            if self.room.get("finished"):
                return f"room sim {clock_text(self.now_ms())} finished{step}"
            state = "paused" if self.room.get("paused") else f"×{self.room['speed']:g}"
            return f"room sim {clock_text(self.now_ms())} {state}{step}"
        if self.connected:
            return "attached"
        if not self.ever_connected:  # --attach before the gateway is up: it waits
            retry = f", retry in {self.retry_in_s:g}s" if self.retry_in_s else ""
            return f"WAITING for the gateway{retry}"
        return f"DISCONNECTED, retry in {self.retry_in_s:g}s" if self.retry_in_s else "connecting"

    def _note(self, text: str) -> None:
        if self._on_note is not None:
            self._on_note(self.now_ms(), text)

    def _linked(self) -> None:
        """The stream is up: say how long it was down, if it was."""
        self.connected, self.retry_in_s = True, None
        self.ever_connected = True
        if self._lost_at is not None:
            gone = format_ms(max(0, self.now_ms() - self._lost_at))
            self._note(f"link: attached again to {self.url} after {gone} away (what "
                       "happened meanwhile is backfilled above)")
            self._lost_at = None

    def _unlinked(self, reason: str, *, moved: bool = False) -> None:
        """The stream is down: said in the log, unless the room ended it to move its
        viewers to a new run (`moved`: said already)."""
        if self.connected and not moved:
            self._lost_at = self.now_ms()
            self._note(f"link: DISCONNECTED from {self.url} ({reason}); reconnecting")
        self.connected = False

    def store_failing_since(self) -> int | None:
        """Since when the gateway's state database or its fleet's Redis has been failing,
        as its /health said last."""
        return self._failing_since

    async def start(self, *, recover: bool = False) -> None:
        self._task = asyncio.create_task(self._follow(), name="omniroute-attach")
        self._health_task = asyncio.create_task(self._watch_health(),
                                                name="omniroute-attach-health")

    async def stop(self) -> None:
        for task in (self._task, self._health_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._client.aclose()

    async def _watch_health(self) -> None:
        while True:
            try:
                health = (await self._client.get("/health")).json()
                since = [part.get("failing_since") for part in
                         (health.get("store"), health.get("fleet")) if isinstance(part, dict)]
                known = [s for s in since if isinstance(s, int)]
                self._failing_since = min(known) if known else None
            except (httpx.HTTPError, ValueError, AttributeError):
                pass  # the event stream's reconnection says the gateway is gone
            except Exception as exc:  # a bug of ours: said, and it reads again later
                self._bug("reading /health", exc)
            await asyncio.sleep(HEALTH_EVERY_S)

    async def _backfill(self) -> None:
        """What the gateway remembers: recent state changes and the audit log (a gateway
        from before the history call answers 404: nothing to backfill then)."""
        assert self._on_history is not None
        history = await self._client.get("/api/resilience/history")
        audit = await self._client.get("/api/resilience/audit")
        events: list[Event] = []
        if history.status_code == 200:
            for item in history.json().get("events", []):
                try:
                    events.append(event_from_dict(item))
                except (ValueError, TypeError):
                    continue  # a type from a newer gateway: skip it
        entries = audit.json().get("entries", []) if audit.status_code == 200 else []
        self._on_history(events, [e for e in entries if isinstance(e, dict)])

    async def _read_state(self) -> None:
        """The state again, after a `reload` event: the routes in force (and what the
        reload added) are in the state, not in the event. A gateway that does not answer
        is a broken link: the reconnection reads it anyway."""
        reply = await self._client.get("/api/resilience/state")
        reply.raise_for_status()
        self._take_state(reply.json())

    def _take_state(self, document: dict[str, Any]) -> None:
        """A state document: the model's, who the gateway says the token is, and a room's
        faults and compared policy."""
        self.read_caller(document)
        self._on_state(document)
        faults = document.get("faults")
        if isinstance(faults, list):
            self.room_faults = [
                (f[0][:100], f[1], f[2]) for f in faults[:MAX_ROOM_FAULTS]
                if isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
                and all(type(n) is int and 0 <= n < 2**53 for n in f[1:])]
        breakers = document.get("breakers")
        if isinstance(breakers, list):  # the providers the state names
            self._named = {b["provider"] for b in breakers
                           if isinstance(b, dict) and isinstance(b.get("provider"), str)}
        self.comparison = None
        self._compare(document.get("compared"))

    def _compare(self, compared: object) -> None:
        """A room's compared policy's attempts (the state's whole, or a frame's latest)."""
        if not isinstance(compared, dict) or not isinstance(compared.get("policy"), str):
            return
        policy = compared["policy"][:40]
        if self.comparison is None or self.comparison.policy != policy:
            self.comparison = AttemptSeries(policy=policy)
        load_counts(self.comparison, compared.get("attempts"), self._named)

    def read_caller(self, document: dict[str, Any]) -> None:
        """`caller` of a gateway's state: the token's name and role (`read` or `operate`);
        `on_caller(name, role)` is told when it changes (a reload rotates tokens)."""
        caller = document.get("caller")
        if not isinstance(caller, dict):
            return
        name, role = str(caller.get("name", ""))[:64], str(caller.get("role", ""))
        if (name, role) != self.caller:
            self.caller = (name, role)
            if self.on_caller is not None:
                self.on_caller(name, role)

    async def _follow(self) -> None:
        """Read the event stream; on any break, wait (backing off) and reconnect: an
        exception of ours too (logged with its traceback, on `omniroute.attach`)."""
        failures = 0
        while True:
            try:
                state = await self._client.get("/api/resilience/state")
                state.raise_for_status()
                document = state.json()
                self.follow_room(document.get("replay"))  # a new run: before its history
                self._moved = False
                if self._on_history is not None:
                    await self._backfill()
                self._take_state(document)
                async with self._client.stream("GET", "/api/resilience/events",
                                               timeout=httpx.Timeout(10, read=60)) as stream:
                    stream.raise_for_status()
                    self._linked()
                    failures = 0
                    kind = ""
                    async for line in stream.aiter_lines():
                        if line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: "):
                            try:
                                data = json.loads(line[6:])
                                if kind == "replay":
                                    self.follow_room(data)
                                else:
                                    replica = data.get("replica")
                                    self._on_event(event_from_dict(data),
                                                   replica if isinstance(replica, str)
                                                   else None)
                            except ValueError:
                                continue  # a frame from a newer gateway: skip it
                            if kind == "reload":
                                await self._read_state()
                reason = "the stream ended"
            except (httpx.HTTPError, ValueError) as exc:
                reason = str(exc) or type(exc).__name__
            except Exception as exc:  # a bug of ours: a link that ended silently would
                # say `attached` for ever; it is said and attached again (the state and
                # the history are read again, so nothing the gateway kept is lost)
                reason = self._bug("following the event stream", exc)
            moved, self._moved = self._moved, False
            self._unlinked(reason, moved=moved)
            if moved:  # the room's new run is up already: read it at once
                continue
            self.retry_in_s = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
            failures += 1
            await asyncio.sleep(self.retry_in_s)
