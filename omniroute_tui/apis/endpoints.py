"""The endpoints clients send to, and what each one is (docs/design.md §13)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ClientApi", "Endpoint"]


class ClientApi(StrEnum):
    """The API a client speaks: the shape of its bodies, streams and errors."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class Endpoint(StrEnum):
    """A proxied endpoint; its value is the word the access line and the docs use."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"

    @property
    def path(self) -> str:
        return _PATHS[self]

    @property
    def api(self) -> ClientApi:
        return (ClientApi.ANTHROPIC if self in (Endpoint.MESSAGES, Endpoint.COUNT_TOKENS)
                else ClientApi.OPENAI)

    @property
    def streams(self) -> bool:
        """Whether the endpoint answers `stream: true` with SSE."""
        return self in (Endpoint.CHAT, Endpoint.COMPLETIONS, Endpoint.RESPONSES,
                        Endpoint.MESSAGES)

    @property
    def embeds(self) -> bool:
        """Served by a provider's `embedding_models`, not by its `models`."""
        return self is Endpoint.EMBEDDINGS

    @property
    def noun(self) -> str:
        """What one answer is called in the access log's line."""
        return _NOUNS[self]


_PATHS = {
    Endpoint.CHAT: "/v1/chat/completions",
    Endpoint.COMPLETIONS: "/v1/completions",
    Endpoint.EMBEDDINGS: "/v1/embeddings",
    Endpoint.RESPONSES: "/v1/responses",
    Endpoint.MESSAGES: "/v1/messages",
    Endpoint.COUNT_TOKENS: "/v1/messages/count_tokens",
}
_NOUNS = {
    Endpoint.CHAT: "chat completion",
    Endpoint.COMPLETIONS: "completion",
    Endpoint.EMBEDDINGS: "embeddings",
    Endpoint.RESPONSES: "response",
    Endpoint.MESSAGES: "message",
    Endpoint.COUNT_TOKENS: "token count",
}
