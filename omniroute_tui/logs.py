"""Log lines for operators: `text` for a terminal, `json` for a log pipeline.

Both formats write one line per record: a time in RFC 3339 UTC to the millisecond, the
level, the logger and the message, then the fields of the request or event the line is
about (`request_id`, `route`, `provider`, ...), passed with `extra=`. Only the fields
named in `FIELDS` are written, so a value put on a record for another reason (a key, a
message's content) never reaches the log by accident (docs/design.md §13).
uvicorn's own lines go through the same handler.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import IO, Any

__all__ = ["FIELDS", "LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "TextFormatter",
           "add_log_arguments", "configure_logging"]

#: the fields a line may carry beside ts, level, logger and msg, in the order written
FIELDS = ("request_id", "route", "provider", "connection", "model", "status", "attempts",
          "latency_ms", "skips", "stream", "reason", "relayed_bytes", "relayed_chunks",
          "resume", "resumed_by", "replica", "tenant", "client")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: loggers of libraries whose lines we write: no handlers of their own, through ours
_LIBRARY_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def _timestamp(created: float) -> str:
    """`2026-12-01T11:24:09.123Z`: RFC 3339, UTC, milliseconds."""
    seconds, ms = divmod(int(created * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found = record.__dict__
    return {name: found[name] for name in FIELDS if found.get(name) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; an exception is its traceback as the `exc` string."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": _timestamp(record.created),
                                "level": record.levelname.lower(), "logger": record.name,
                                "msg": record.getMessage()}
        line.update(_fields(record))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # json.dumps escapes newlines and control characters: the line stays one line
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`TS LEVEL logger: message key=value ...`, a value quoted when it has a space,
    a quote, an `=` or a control character in it."""

    def format(self, record: logging.LogRecord) -> str:
        text = (f"{_timestamp(record.created)} {record.levelname} {record.name}: "
                f"{record.getMessage()}")
        fields = _fields(record)
        if fields:
            text += "".join(f" {name}={_text_value(value)}" for name, value in fields.items())
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            text += "\n" + record.exc_text
        return text


def _text_value(value: object) -> str:
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' "='):
        return text
    return json.dumps(text, ensure_ascii=False)


def configure_logging(log_format: str = "text", level: str = "info",
                      stream: IO[str] | None = None) -> logging.Handler:
    """Write every logger's lines (ours and uvicorn's) to `stream` (stderr by default) in
    `log_format` from `level` up; returns the handler, which replaces any before it."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r}: one of {', '.join(LOG_LEVELS)}")
    handler.setLevel(numeric)  # uvicorn's loggers set their own level: the handler's holds
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in _LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
    return handler


def add_log_arguments(parser: argparse.ArgumentParser, *, where: str = "stderr",
                      defaults: bool = True) -> None:
    """`--log-format` and `--log-level`, the same on every command that serves; without
    `defaults` they are None when not given (the caller says what they need)."""
    parser.add_argument("--log-format", choices=LOG_FORMATS,
                        default="text" if defaults else None,
                        help=f"log lines to {where}: text (default) or json, one object a "
                             "line")
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.lower,
                        default="info" if defaults else None,
                        help="the lowest level written (default: info, which writes a line "
                             "per proxied request)")
