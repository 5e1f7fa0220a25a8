"""Drivers of the routing core that perform real I/O."""

from .async_driver import AsyncDriver, Completion
from .upstream import UpstreamClient, UpstreamReply, transport_failure_of

__all__ = ["AsyncDriver", "Completion", "UpstreamClient", "UpstreamReply", "transport_failure_of"]
