"""Translation between OpenAI's chat completions and Anthropic's messages, both ways, so
that a route may fall back across provider families (docs/design.md §14). Sans-IO: dicts
in, dicts out; no clock, no randomness (ids come from the upstream's)."""

from __future__ import annotations

__all__ = ["Untranslatable", "chat_to_messages", "messages_to_chat"]


class Untranslatable(ValueError):
    """A request field the other API cannot carry: `param` names it. Decided before any
    upstream call; the target is skipped, or the client told with a 400."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


from . import chat_to_messages, messages_to_chat  # noqa: E402  (they use Untranslatable)
