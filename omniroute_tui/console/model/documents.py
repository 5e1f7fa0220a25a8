"""What a gateway or a room says of the state, taken into a model: the state document
(on attaching, after a restore), the history and audit from before attaching, the
routes and a room's attempts so far. A document is not ours to trust: an entry of
another shape is left out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ...engine.events import Event
from ...engine.kinds import BreakerState
from .views import ConnectionView, Failure, LockoutView, ProviderView, load_counts

if TYPE_CHECKING:
    from .console_model import ConsoleModel

__all__ = ["MAX_ROUTES", "backfill", "load_state_document"]

MAX_ROUTES = 1000  # routes a state document may list (a config's own bound)


def backfill(model: ConsoleModel, events: Iterable[Event], audit: Iterable[Mapping[str, object]]
             ) -> None:
    """What a gateway remembers from before this console attached (or while it was
    away): its recent state changes, then the operator actions older than those.
    Events the console has seen already are skipped; load the state after this."""
    since = model.last_event_at
    for event in events:
        if since is None or event.t > since:
            model.on_event(event)
    known = set(model.audit)
    older = []
    for entry in audit:
        t, words = entry.get("t"), [entry.get(k) for k in
                                    ("actor", "action", "target", "result")]
        texts = [w for w in words if isinstance(w, str)]
        if isinstance(t, int) and len(texts) == 4:
            row = (t, texts[0], texts[1], texts[2], texts[3])
            if row not in known:
                older.append(row)
    if older:
        merged = sorted([*older, *model.audit], key=lambda r: r[0])
        model.audit.clear()
        model.audit.extend(merged)


def load_state_document(model: ConsoleModel, state: Mapping[str, object]) -> None:
    """Take over whole state in the management API's shape (`omniroute_tui.state_document`):
    a gateway's when attaching, the engine's own after a restore."""
    breakers = state.get("breakers", [])
    connections = state.get("connections", [])
    lockouts = state.get("lockouts", [])
    assert isinstance(breakers, list) and isinstance(connections, list)
    assert isinstance(lockouts, list)
    for b in breakers:
        view = model.providers.get(b["provider"])
        if view is None:
            view = model.providers[b["provider"]] = ProviderView(b["provider"], "?",
                                                               b["threshold"])
        view.state, view.failures, view.cycles = b["state"], b["failures"], b["cycles"]
        opened = b["state"] == BreakerState.OPEN and b["opened_at"] is not None
        view.open_until = b["opened_at"] + b["open_for_ms"] if opened else None
        forced = opened and b.get("forced_until") is not None
        # the state says who (any replica of a fleet), else the history, if any
        who = b.get("forced_by") or (view.forced_by if view.forced else "")
        view.forced = forced
        view.forced_by = (str(who) or "an operator") if forced else ""
    for c in connections:
        key = (c["provider"], c["connection"])
        cview = model.connections.get(key)
        if cview is None:
            cview = model.connections[key] = ConnectionView(
                c["provider"], c["connection"], c["key"] or "(none)", c["max_level"])
        cview.level, cview.cooling_until = c["level"], c["cooling_until"]
        cview.disabled = c["disabled"]
        cview.last_error = Failure(c["last_error"]) if c["last_error"] else None
    model.lockouts.clear()
    for lk in lockouts:
        key3 = (lk["provider"], lk["connection"], lk["model"])
        model.lockouts[key3] = LockoutView(*key3, lk["kind"] or "", lk["failures"],
                                          lk["until"])
    _load_routes(model, state.get("routes"))
    _load_attempts(model, state.get("attempts"))


def _load_routes(model: ConsoleModel, routes: object) -> None:
    """The routes of a state document (a gateway's, a room's): the whole set in
    force, each name with its strategy; a document without them (an older gateway)
    leaves the routes known as they are. At most MAX_ROUTES; an entry of another
    shape is left out."""
    if not isinstance(routes, list):
        return
    model.routes = {route["name"]: route["strategy"] for route in routes[:MAX_ROUTES]
                   if isinstance(route, dict) and isinstance(route.get("name"), str)
                   and isinstance(route.get("strategy"), str)}


def _load_attempts(model: ConsoleModel, attempts: object) -> None:
    """A room's attempts per second so far: they stand for what this model counted
    of those seconds (`load_counts`)."""
    load_counts(model.series, attempts, model.providers)
