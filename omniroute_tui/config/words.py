"""Counts as words, for every program's messages."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: int, word: str) -> str:
    """`1 model`, `2 models`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
