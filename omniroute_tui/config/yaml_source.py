"""YAML loading that remembers where every value came from (for file:line errors)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path as FsPath
from typing import Any

import yaml

from .problems import ConfigError, Path, Problem, format_field

__all__ = ["Source", "load_source"]

_MAX_BYTES = 8 * 1024 * 1024


class Source:
    """A parsed YAML document plus the line of every node, and a problem collector."""

    def __init__(self, name: str, data: Any, lines: dict[Path, int], version: str = "") -> None:
        self.name = name
        self.data = data
        #: the text's sha256 (its UTF-8 bytes: the file's), first 12 hex digits
        self.version = version
        self._lines = lines
        self.problems: list[Problem] = []

    def line(self, path: Path) -> int | None:
        """The line of `path`, or of its nearest parent that has one."""
        while True:
            if path in self._lines:
                return self._lines[path]
            if not path:
                return None
            path = path[:-1]

    def problem(self, path: Path, reason: str) -> None:
        self.problems.append(Problem(self.name, self.line(path), format_field(path), reason))

    def raise_if_problems(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


_MAX_NODES = 500_000


class _Converter:
    """Turns composed nodes into plain values, recording each node's line.

    Aliases are expanded; the node budget stops "billion laughs" documents.
    """

    def __init__(self) -> None:
        self.lines: dict[Path, int] = {}
        self._scalars = yaml.SafeLoader("")
        self._budget = _MAX_NODES
        #: (path of the mapping, key, first line, repeated line): YAML says keys are
        #: unique, and "the last one wins" silently drops what a user wrote
        self.duplicates: list[tuple[Path, Any, int, int]] = []

    def convert(self, node: yaml.Node, path: Path) -> Any:
        self._budget -= 1
        if self._budget < 0:
            raise ValueError("the document expands to too many values (alias bomb?)")
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            first_line: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key = self.convert(key_node, path + ("<key>",))
                if not isinstance(key, str | int | float | bool) and key is not None:
                    key = str(key)
                line = key_node.start_mark.line + 1
                if key in first_line:
                    self.duplicates.append((path, key, first_line[key], line))
                    continue
                first_line[key] = line
                child = path + (str(key),)
                result[key] = self.convert(value_node, child)
                self.lines[child] = line
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, path + (i,)) for i, item in enumerate(node.value)]
        try:
            return self._scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            # an integer of more than 4,300 digits, a timestamp out of range: said where
            raise _ScalarError(path, node.start_mark.line + 1, str(exc)) from None


class _ScalarError(Exception):
    """A scalar YAML cannot turn into a value, with the path and line it was on."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(reason)
        self.path, self.line, self.reason = path, line, reason


def _file_error(name: str, reason: str) -> ConfigError:
    return ConfigError([Problem(name, None, "(file)", reason)])


def _read_text(name: str) -> str:
    try:
        raw = FsPath(name).read_bytes()
    except FileNotFoundError:
        raise _file_error(name, "no such file") from None
    except IsADirectoryError:
        raise _file_error(name, "is a directory, not a file") from None
    except OSError as exc:
        raise _file_error(name, f"cannot read: {exc.strerror}") from None
    if len(raw) > _MAX_BYTES:
        raise _file_error(name, "larger than 8 MiB: not a config file")
    if b"\x00" in raw:
        raise _file_error(name, "binary data, not YAML text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(name, f"not UTF-8 text (byte {exc.start})") from None


#: libyaml's parser, where PyYAML was built with it: 25 times faster on a file of 200,000
#: connections (1.3 s against 34 s of CPU)
_FAST_LOADER: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)


def _compose(text: str) -> yaml.Node | None:
    """The document's node tree, the same from either parser: a text libyaml refuses is
    read again by the pure-Python one, so that a refusal gives the same reason and line
    wherever PyYAML was built, and so is one with a tab (libyaml takes a tab after `key:`
    or `,` as a space, where the pure parser refuses it)."""
    if _FAST_LOADER is not None and "\t" not in text:
        try:
            return yaml.compose(text, Loader=_FAST_LOADER)
        except (yaml.YAMLError, ValueError, RecursionError):
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def load_source(path: str | FsPath, *, text: str | None = None,
                precheck: Callable[[str, str], None] | None = None) -> Source:
    """Read and parse a YAML file; every failure is a ConfigError naming the file.
    `precheck(text, name)` may refuse the text before it is parsed into nodes."""
    name = str(path)
    if text is None:
        text = _read_text(name)
    if precheck is not None:
        precheck(text, name)
    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = f"YAML syntax: {exc.problem or exc.context}"
        raise ConfigError([Problem(name, line, "(syntax)", reason)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(name, None, "(syntax)", f"YAML: {exc}")]) from None
    except RecursionError:
        raise ConfigError([Problem(name, None, "(syntax)", "nested too deeply")]) from None
    if node is None:
        raise ConfigError([Problem(name, 1, "(top level)", "the file is empty")])
    converter = _Converter()
    try:
        data = converter.convert(node, ())
    except _ScalarError as exc:
        field = format_field(exc.path[:-1] if exc.path[-1:] == ("<key>",) else exc.path)
        raise ConfigError([Problem(name, exc.line, field,
                                   f"not a value: {exc.reason.split(';')[0]}"[:200])]) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise ConfigError([Problem(name, None, "(syntax)", f"YAML: {exc}")]) from None
    if converter.duplicates:
        raise ConfigError([
            Problem(name, again, format_field(where + (str(key),)),
                    f"{key!r} is given twice, on lines {first} and {again}: keep one")
            for where, key, first, again in converter.duplicates])
    if not isinstance(data, dict):
        raise ConfigError([Problem(name, 1, "(top level)",
                                   f"expected a mapping of settings, got {type(data).__name__}")])
    return Source(name, data, converter.lines, text_version(text))


def text_version(text: str) -> str:
    """A config's version: the sha256 of its bytes, first 12 hex digits."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
