"""A request id typed or pasted in the requests pane's filter: its "why" opens, from the
console's own recent requests, or, attached to a gateway, from the gateway's records
(`GET /api/requests/{id}`: any replica, the last hour)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..gateway.request_ids import is_request_id
from .model.attach import AttachBackend, AttachError
from .model.panes import Pane
from .model.request_why import recorded_why
from .screens.modals import DetailScreen
from .widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from .painting import PaneView

__all__ = ["RequestLookup"]


class RequestLookup:
    """Opens a request's why on `app`, by its id or the one request a text matches."""

    def __init__(self, app: PaneView) -> None:
        self.app = app

    def open(self, text: str) -> None:
        """A request id (a client quotes the `x-request-id` of its answer) in the requests
        pane's filter opens that request's "why" at once: the id itself, or the one
        request the text matches."""
        table = self.app.query_one("#requests-table", KeyedTable)
        if text in self.app.model.requests:
            key: str | None = text
        else:
            matches = [k for k in self.app.model.requests if text.lower() in k.lower()]
            key = matches[0] if len(matches) == 1 else None
        if key is None:
            # an id no row shows (a route's or a provider's name is a filter): asked of
            # the gateway's records
            if (isinstance(self.app.backend, AttachBackend) and is_request_id(text)
                    and not self._shown(text)):
                self.app.run_worker(self._fetch(self.app.backend, text), group="why",
                                    exclusive=True, exit_on_error=False)
            return
        table.select_key(key)
        detail = self.app.model.detail(Pane.REQUESTS, key, self.app.backend.now_ms())
        if detail is not None:
            self.app.push_screen(DetailScreen(*detail))

    def _shown(self, text: str) -> bool:
        """Whether any cell of the requests pane holds `text` (what its filter keeps)."""
        wanted = text.lower()
        return any(wanted in cell.lower()
                   for row in self.app.model.request_rows(self.app.backend.now_ms()).values()
                   for cell in row)

    async def _fetch(self, backend: AttachBackend, request_id: str) -> None:
        """A request this console did not see (before it attached, or served by another
        replica): its why from the gateway's records."""
        try:
            found = await backend.request_record(request_id)
        except AttachError as exc:
            self.app.notify(f"request {request_id}: {exc}", severity="warning")
            return
        try:
            detail = None if found is None else recorded_why(request_id, found)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # not ours to trust
            self.app.notify(f"request {request_id}: the gateway's record cannot be shown "
                            f"({type(exc).__name__})", severity="warning")
            return
        if detail is None:
            self.app.notify(f"no request {request_id} is kept by the gateway",
                            severity="warning")
            return
        self.app.push_screen(DetailScreen(*detail))
