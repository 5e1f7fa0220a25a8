"""Small typed readers over a Source: each returns the value or records a problem."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .durations import MAX_DURATION_MS, parse_duration_ms
from .hidden import hidden_reason
from .problems import Path
from .yaml_source import Source

__all__ = [
    "read_bool",
    "read_duration",
    "read_int",
    "read_mapping",
    "read_name",
    "read_number",
    "read_str",
    "reject_unknown",
]


def read_mapping(src: Source, value: Any, path: Path) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    src.problem(path, f"expected a mapping, got {_kind(value)}")
    return None


def reject_unknown(src: Source, mapping: dict[str, Any], path: Path, known: Iterable[str]) -> None:
    allowed = set(known)
    for key in mapping:
        if key not in allowed:
            hint = ", ".join(sorted(allowed))
            src.problem(path + (str(key),), f"unknown field; expected one of: {hint}")


def read_str(src: Source, value: Any, path: Path) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    src.problem(path, f"expected a non-empty string, got {_kind(value)}")
    return None


def read_name(src: Source, value: Any, path: Path, what: str = "the name") -> str | None:
    """A non-empty string every character of which shows (docs/design.md §1)."""
    text = read_str(src, value, path)
    if text is None:
        return None
    reason = hidden_reason(text, what)
    if reason is not None:
        src.problem(path, reason)
        return None
    return text


def read_bool(src: Source, value: Any, path: Path) -> bool | None:
    if isinstance(value, bool):
        return value
    src.problem(path, f"expected true or false, got {_kind(value)}")
    return None


def read_int(src: Source, value: Any, path: Path, *, minimum: int = 0) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    src.problem(path, f"expected a whole number >= {minimum}, got {_kind(value)}")
    return None


def read_number(
    src: Source, value: Any, path: Path, *, minimum: float = 0.0, maximum: float | None = None
) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if number >= minimum and (maximum is None or number <= maximum):
            return number
    bounds = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    src.problem(path, f"expected a number {bounds}, got {_kind(value)}")
    return None


def read_duration(src: Source, value: Any, path: Path, *, positive: bool = False,
                  longest_ms: int = MAX_DURATION_MS) -> int | None:
    try:
        ms = parse_duration_ms(value, longest_ms=longest_ms)
    except ValueError as exc:
        src.problem(path, str(exc))
        return None
    if positive and ms <= 0:
        src.problem(path, "must be longer than 0")
        return None
    return ms


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:37]!r}..."
    if isinstance(value, int | float):
        return repr(value)
    return {"dict": "a mapping", "list": "a list"}.get(type(value).__name__, type(value).__name__)
