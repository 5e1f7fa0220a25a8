"""The counts of a router config, read off its YAML events before anything is built.

A file under the size cap may still declare a million connections in flow style; building
its node tree only to refuse it took seconds and hundreds of MB (6 MB: 7.5 s, 437 MB). The
parser's event stream is walked once instead, keeping nothing but a path and a counter per
open collection, and the walk stops at the first count past its cap (`MAX_COUNTS`) or past
`MAX_EVENTS` values in all: a refusal costs what the file's first offending part costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from .limits import MAX_COUNTS
from .problems import ConfigError, Problem, format_field

__all__ = ["MAX_EVENTS", "check_counts"]

#: values (scalars and collections) a config may hold in all: the largest the caps allow
#: (100 providers of 1,000 models, 1,000 routes of 100 targets, 10,000 connections) is
#: about 300,000; a walk of that many events costs 0.3 s
MAX_EVENTS = 400_000
_FAST_PARSER: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)

#: the collections whose length is capped, by their path (`*`: any name), and their cap
_CAPPED: dict[tuple[str, ...], str] = {
    ("providers",): "providers",
    ("providers", "*", "connections"): "connections per provider",
    ("providers", "*", "models"): "models per provider",
    ("providers", "*", "embedding_models"): "models per provider",
    ("providers", "*", "deployments"): "models per provider",
    ("routes",): "routes",
    ("routes", "*", "targets"): "targets per route",
}


@dataclass
class _Open:
    """A collection being read: its path, whether it is a mapping, its entries so far,
    and (in a mapping) the key whose value comes next."""

    path: tuple[str | int, ...]
    mapping: bool
    line: int | None
    entries: int = 0
    key: str | None = None
    key_line: int | None = None
    cap: str | None = field(default=None)


def check_counts(text: str, name: str) -> None:
    """Raise ConfigError at the first count of `text` past its cap; a text the parser
    refuses is left to the full load, which says why with its line."""
    loader = _FAST_PARSER if _FAST_PARSER is not None and "\t" not in text else yaml.SafeLoader
    stack: list[_Open] = []
    connections = events = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            events += 1
            if events > MAX_EVENTS:
                mark = event.start_mark
                raise ConfigError([Problem(name, mark.line + 1 if mark is not None else None,
                                           "(file)", f"more than {MAX_EVENTS:,} values: far "
                                           "past what a config may declare")])
            if isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            parent = stack[-1] if stack else None
            path: tuple[str | int, ...] = ()
            mark = event.start_mark
            line = mark.line + 1 if mark is not None else None
            if parent is not None:
                if parent.mapping and parent.key is None:  # this node is a key
                    parent.key, parent.key_line = str(getattr(event, "value", "?")), line
                    _count(parent, name, event)
                    if isinstance(event, yaml.CollectionStartEvent):
                        stack.append(_Open(parent.path + ("?",), True, None))
                    continue
                if parent.mapping:  # a value: named, as the full load names it, by its key
                    path, parent.key, line = parent.path + (parent.key or "",), None, \
                        parent.key_line
                else:
                    path = parent.path + (parent.entries,)
                    _count(parent, name, event)
                    if parent.cap == "connections per provider":
                        connections += 1
                        if connections > MAX_COUNTS["connections in all"]:
                            _over(name, stack[1], "connections in all")
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append(_Open(path, isinstance(event, yaml.MappingStartEvent), line,
                                   cap=_cap_of(path)))
    except yaml.YAMLError:
        return


def _cap_of(path: tuple[str | int, ...]) -> str | None:
    for pattern, what in _CAPPED.items():
        if len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path,
                                                                        strict=True)):
            return what
    return None


def _count(open_: _Open, name: str, event: yaml.Event) -> None:
    open_.entries += 1
    cap = open_.cap
    if cap is not None and open_.entries > MAX_COUNTS[cap]:
        _over(name, open_, cap)


def _over(name: str, open_: _Open, cap: str) -> None:
    """Refuse at the collection that went past `cap`: its field, and the line it starts
    on, as the full load names it."""
    limit = MAX_COUNTS[cap]
    raise ConfigError([Problem(name, open_.line, format_field(open_.path),
                               f"more than {limit:,} {cap.split()[0]}: at most {limit:,} "
                               f"{cap}")])
