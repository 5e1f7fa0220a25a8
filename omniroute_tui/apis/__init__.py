"""The APIs the gateway speaks: the endpoints clients send to, the provider families
upstreams speak, and which family serves which endpoint, natively or translated
(docs/design.md §13)."""

from .endpoints import ClientApi, Endpoint
from .families import ApiFamily, Serving, Translation, serving

__all__ = ["ApiFamily", "ClientApi", "Endpoint", "Serving", "Translation", "serving"]
