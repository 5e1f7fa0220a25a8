"""Secrets that never show themselves in full."""

from __future__ import annotations

import hashlib
import hmac
import os

__all__ = ["Secret", "mask_secret"]


def mask_secret(value: str | None) -> str:
    """At most the last 4 characters: `sk-…1234`-style, `…` alone for short secrets."""
    if not value:
        return "(none)"
    if len(value) < 12:
        return "…"
    return "…" + value[-4:]


_FINGERPRINT_KEY = os.urandom(32)


class Secret:
    """A credential: `str()` and `repr()` are masked; `reveal()` is the only way in."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    @property
    def fingerprint(self) -> str:
        """Tells two keys apart within this process (a reload sees a new key by it), and
        says nothing of the key: keyed with a secret that lives and dies with the process."""
        return hmac.new(_FINGERPRINT_KEY, self._value.encode(), hashlib.sha256).hexdigest()[:16]

    @property
    def masked(self) -> str:
        return mask_secret(self._value)

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"Secret({self.masked!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
