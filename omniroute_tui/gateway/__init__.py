"""The OpenAI-compatible gateway and the management API."""

from .app import Gateway
from .server import GatewayServer, parse_listen

__all__ = ["Gateway", "GatewayServer", "parse_listen"]
