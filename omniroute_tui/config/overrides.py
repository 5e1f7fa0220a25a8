"""Resilience overrides (`resilience:` at global and provider level) applied to settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ..engine.kinds import FailureKind
from ..engine.settings import BreakerKindOverride, ResilienceSettings
from .problems import Path
from .readers import read_bool, read_duration, read_int, read_mapping, read_number, reject_unknown
from .yaml_source import Source

__all__ = ["OverridePatch", "parse_overrides", "read_first_token", "validate_settings"]

# section -> yaml key -> (dataclass field, reader kind)
_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "breaker": {
        "failure_threshold": ("failure_threshold", "count"),
        "degraded_threshold": ("degraded_threshold", "count"),
        "reset_timeout": ("reset_timeout_ms", "duration+"),
        "failure_window": ("failure_window_ms", "duration+"),
        "half_open_probes": ("half_open_probes", "count"),
        "escalate_after": ("escalate_after", "int"),
        "max_multiplier": ("max_multiplier", "count"),
        "min_reset": ("min_reset_ms", "duration"),
    },
    "cooldown": {
        "base": ("base_ms", "duration+"),
        "max_level": ("max_level", "int"),
        "max": ("max_ms", "duration+"),
        "quota": ("quota_ms", "duration+"),
    },
    "lockout": {
        "base": ("base_ms", "duration+"),
        "max": ("max_ms", "duration+"),
        "max_steps": ("max_steps", "int"),
        "window": ("window_ms", "duration+"),
    },
    "dedup": {
        "connection_window": ("connection_window_ms", "duration"),
        "network_window": ("network_window_ms", "duration"),
    },
    "retry_budget": {"ratio": ("ratio", "ratio"), "burst": ("burst", "int")},
    "admission": {"max_wait": ("max_wait_ms", "duration"), "margin": ("margin_ms", "duration")},
    "request": {"max_attempts": ("max_attempts", "count"), "timeout": ("timeout_ms", "duration+"),
                "stream_idle": ("stream_idle_ms", "duration+"),
                "first_token": ("first_token_ms", "duration/off")},
}
_KIND_FIELDS = ("counts", "immediate_open", "reset_timeout")


def _read(src: Source, kind: str, value: Any, path: Path) -> Any:
    if kind == "count":
        return read_int(src, value, path, minimum=1)
    if kind == "int":
        return read_int(src, value, path, minimum=0)
    if kind == "ratio":
        return read_number(src, value, path, minimum=0.0, maximum=1.0)
    if kind == "duration/off":
        return read_first_token(src, value, path)
    return read_duration(src, value, path, positive=kind == "duration+")


def read_first_token(src: Source, value: Any, path: Path) -> int | None:
    """`request.first_token` (a route's, a target's): a duration, or `off` (or 0; YAML
    reads a bare `off` as false)."""
    if value == "off" or value is False:
        return 0
    return read_duration(src, value, path)


def _kinds(src: Source, value: Any, path: Path) -> dict[FailureKind, BreakerKindOverride]:
    mapping = read_mapping(src, value, path)
    result: dict[FailureKind, BreakerKindOverride] = {}
    for name, spec in (mapping or {}).items():
        where = path + (str(name),)
        try:
            kind = FailureKind(name)
        except ValueError:
            known = ", ".join(k.value for k in FailureKind)
            src.problem(where, f"unknown failure kind; expected one of: {known}")
            continue
        body = read_mapping(src, spec, where)
        if body is None:
            continue
        reject_unknown(src, body, where, _KIND_FIELDS)
        counts = read_bool(src, body["counts"], where + ("counts",)) if "counts" in body else None
        immediate = (read_bool(src, body["immediate_open"], where + ("immediate_open",))
                     if "immediate_open" in body else None)
        reset = (read_duration(src, body["reset_timeout"], where + ("reset_timeout",),
                               positive=True) if "reset_timeout" in body else None)
        result[kind] = BreakerKindOverride(counts, immediate, reset)
    return result


@dataclass(frozen=True)
class OverridePatch:
    """Parsed `resilience:` overrides, to lay over the defaults of any auth kind."""

    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    kinds: Mapping[FailureKind, BreakerKindOverride] = field(default_factory=dict)
    jitter: float | None = None

    def apply(self, base: ResilienceSettings) -> ResilienceSettings:
        settings = base
        for section, changes in self.sections.items():
            settings = replace(settings, **{section: replace(getattr(settings, section),
                                                             **changes)})
        if self.kinds:
            merged = {**settings.breaker.kinds, **self.kinds}
            settings = replace(
                settings, breaker=replace(settings.breaker, kinds=MappingProxyType(merged))
            )
        if self.jitter is not None:
            settings = replace(settings, jitter=self.jitter)
        return settings


def parse_overrides(src: Source, value: Any, path: Path) -> OverridePatch:
    """Read a `resilience:` mapping; problems go to `src`."""
    mapping = read_mapping(src, value, path)
    if mapping is None:
        return OverridePatch()
    reject_unknown(src, mapping, path, [*_FIELDS, "jitter"])
    sections: dict[str, dict[str, Any]] = {}
    kinds: dict[FailureKind, BreakerKindOverride] = {}
    for section, fields in _FIELDS.items():
        if section not in mapping:
            continue
        where = path + (section,)
        body = read_mapping(src, mapping[section], where)
        if body is None:
            continue
        reject_unknown(src, body, where, [*fields, "kinds"] if section == "breaker" else fields)
        changes = sections.setdefault(section, {})
        for key, (attr, kind) in fields.items():
            if key in body:
                parsed = _read(src, kind, body[key], where + (key,))
                if parsed is not None:
                    changes[attr] = parsed
        if section == "breaker" and "kinds" in body:
            kinds = _kinds(src, body["kinds"], where + ("kinds",))
    jitter = None
    if "jitter" in mapping:
        jitter = read_number(src, mapping["jitter"], path + ("jitter",), maximum=1.0)
    return OverridePatch(sections, kinds, jitter)


def validate_settings(src: Source, settings: ResilienceSettings, path: Path) -> None:
    """Checks across fields that no single field can make."""
    breaker = settings.breaker
    if breaker.degraded_threshold > breaker.failure_threshold:
        src.problem(path + ("breaker", "degraded_threshold"),
                    f"{breaker.degraded_threshold} is above failure_threshold "
                    f"{breaker.failure_threshold}")
    if settings.cooldown.base_ms > settings.cooldown.max_ms:
        src.problem(path + ("cooldown", "base"), "is longer than cooldown.max")
    if settings.lockout.base_ms > settings.lockout.max_ms:
        src.problem(path + ("lockout", "base"), "is longer than lockout.max")
