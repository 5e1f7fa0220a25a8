"""Where an attempt goes and how it says who it is, per provider family
(docs/design.md §13): the URL built from the provider's `base_url`, and its auth headers."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from ..apis import ApiFamily, Endpoint
from ..config.api_family import ApiSettings
from ..config.secrets import Secret

__all__ = ["FORWARDED_ANTHROPIC_HEADERS", "upstream_headers", "upstream_url"]

#: an OpenAI-shaped upstream's path of each endpoint, after its `base_url` (`.../v1`)
_OPENAI_PATHS = {
    Endpoint.CHAT: "/chat/completions", Endpoint.COMPLETIONS: "/completions",
    Endpoint.EMBEDDINGS: "/embeddings", Endpoint.RESPONSES: "/responses",
}
#: a client's headers passed on to a native Anthropic upstream: the API version it was
#: written against, and the beta features it asks for
FORWARDED_ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
_MAX_FORWARDED = 512  # a longer value is not one of Anthropic's: not passed on


def upstream_url(base_url: str, api: ApiSettings, upstream: Endpoint, model: str) -> str:
    """The URL of `upstream` for `model`: `base_url` as the provider's own SDK takes it."""
    base = base_url.rstrip("/")
    family = api.family
    if family is ApiFamily.ANTHROPIC:
        return base + upstream.path  # the host; `/v1/messages` is the API's
    if family is ApiFamily.AZURE:
        deployment = quote(api.deployment(model), safe="")
        return (f"{base}/openai/deployments/{deployment}{_OPENAI_PATHS[upstream]}"
                f"?api-version={api.api_version}")
    return base + _OPENAI_PATHS[upstream]


def upstream_headers(api: ApiSettings, api_key: Secret | None,
                     client_headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers of an attempt: its body's type, the key as the family takes it, and
    for Anthropic its API version (the client's, when an Anthropic client sent one)."""
    headers = {"content-type": "application/json"}
    family = api.family
    if family is ApiFamily.ANTHROPIC:
        headers["anthropic-version"] = api.anthropic_version
        for name in FORWARDED_ANTHROPIC_HEADERS:
            value = (client_headers or {}).get(name)
            if value and len(value) <= _MAX_FORWARDED and value.isascii() \
                    and value.isprintable():
                headers[name] = value
        if api_key is not None:
            headers["x-api-key"] = api_key.reveal()
    elif api_key is not None:
        if family is ApiFamily.AZURE:
            headers["api-key"] = api_key.reveal()
        else:
            headers["authorization"] = f"Bearer {api_key.reveal()}"
    return headers
