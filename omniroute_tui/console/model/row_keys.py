"""A table row's key: the names the engine knows the row's subject by, as a tuple where
it takes more than one. A key is never text to be split again: a model named `org/llm`
would cut a `provider/connection/model` string in the wrong place."""

from __future__ import annotations

__all__ = ["ConnectionKey", "LockoutKey", "RowKey", "key_text"]

#: a connection: (provider, connection)
ConnectionKey = tuple[str, str]
#: a model's lockout on a connection: (provider, connection, model)
LockoutKey = tuple[str, str, str]
#: a provider's name or a request's id (one name), a connection, a lockout, an audit entry
RowKey = str | tuple[str, ...]


def key_text(key: RowKey) -> str:
    """A key as the console writes it: `openai/prod-1/gpt-4o`."""
    return key if isinstance(key, str) else "/".join(key)
