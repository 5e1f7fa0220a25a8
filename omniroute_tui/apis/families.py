"""Provider families and which endpoint each serves, natively or translated
(docs/design.md §13, §14).

A family is the API an upstream speaks: its URLs, its auth, its bodies and errors. A
client's endpoint is served by a family natively (the body goes as it came, with the
target's model), through a translation (chat completions to Anthropic's messages and
back), or not at all: the router then skips the target with `not_served`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .endpoints import Endpoint

__all__ = ["ApiFamily", "Serving", "Translation", "serving"]


class ApiFamily(StrEnum):
    """A provider's `api:`."""

    OPENAI = "openai"  # OpenAI and every OpenAI-compatible server (the default)
    AZURE = "azure"  # Azure OpenAI: a deployment per model, `api-key`, `api-version`
    ANTHROPIC = "anthropic"  # Anthropic's Messages API
    GEMINI = "gemini"  # Google's Gemini API, through its OpenAI-compatible endpoint


class Translation(StrEnum):
    """A request carried across families: client API to upstream API."""

    CHAT_TO_MESSAGES = "chat_to_messages"  # an OpenAI chat request to Anthropic
    MESSAGES_TO_CHAT = "messages_to_chat"  # an Anthropic messages request to OpenAI chat


@dataclass(frozen=True, slots=True)
class Serving:
    """How a family serves an endpoint: the upstream endpoint the attempt is sent to, and
    the translation on the way (None: native)."""

    upstream: Endpoint
    translation: Translation | None = None


_NATIVE_OPENAI = {e: Serving(e) for e in (Endpoint.CHAT, Endpoint.COMPLETIONS,
                                          Endpoint.EMBEDDINGS, Endpoint.RESPONSES)}
_TO_CHAT = Serving(Endpoint.CHAT, Translation.MESSAGES_TO_CHAT)
_SERVING: dict[ApiFamily, dict[Endpoint, Serving]] = {
    ApiFamily.OPENAI: {**_NATIVE_OPENAI, Endpoint.MESSAGES: _TO_CHAT},
    # Azure's Responses API lives under another API version scheme (preview, `/openai/v1`):
    # not served, said by `not_served` rather than a 404 from the deployment path
    ApiFamily.AZURE: {Endpoint.CHAT: Serving(Endpoint.CHAT),
                      Endpoint.COMPLETIONS: Serving(Endpoint.COMPLETIONS),
                      Endpoint.EMBEDDINGS: Serving(Endpoint.EMBEDDINGS),
                      Endpoint.MESSAGES: _TO_CHAT},
    ApiFamily.ANTHROPIC: {Endpoint.MESSAGES: Serving(Endpoint.MESSAGES),
                          Endpoint.COUNT_TOKENS: Serving(Endpoint.COUNT_TOKENS),
                          Endpoint.CHAT: Serving(Endpoint.MESSAGES,
                                                 Translation.CHAT_TO_MESSAGES)},
    # Gemini's OpenAI-compatible endpoint has chat completions and embeddings only
    ApiFamily.GEMINI: {Endpoint.CHAT: Serving(Endpoint.CHAT),
                       Endpoint.EMBEDDINGS: Serving(Endpoint.EMBEDDINGS),
                       Endpoint.MESSAGES: _TO_CHAT},
}


def serving(family: ApiFamily, endpoint: Endpoint) -> Serving | None:
    """How `family` serves `endpoint`; None: it does not."""
    return _SERVING[family].get(endpoint)
