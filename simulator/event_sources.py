"""`omniroute-sim record`: read a gateway's event log (its state database, a saved trace or
event stream, or the management API's stream live) and write the scenario it implies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from omniroute_tui.store.schema import APPLICATION_ID, SCHEMA_VERSION

from .scenario_from_events import Recording, scenario_from_events

__all__ = ["events_from_db", "events_from_file", "events_from_gateway", "write_scenario"]

#: a line longer than this is no event of ours: it is skipped, not parsed
MAX_LINE = 1 << 20


def _parse(line: str) -> dict[str, Any] | None:
    """One JSON Lines trace line or one `data:` line of an event stream, else None."""
    line = line.strip()
    if line.startswith("data:"):
        line = line[5:].strip()
    if not line.startswith("{") or len(line) > MAX_LINE:
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # nested past the interpreter's limit: no event
        return None
    return event if isinstance(event, dict) else None


def events_from_file(path: Path) -> Iterator[dict[str, Any]]:
    """Events of a trace (`omniroute-sim run --trace`, JSON Lines) or of a saved event
    stream (`curl -N .../api/resilience/events > events.sse`)."""
    with path.open("rb") as raw:
        for chunk in raw:
            event = _parse(chunk.decode("utf-8", "replace"))
            if event is not None:
                yield event


def events_from_db(path: Path) -> Iterator[dict[str, Any]]:
    """The events a gateway's state database keeps, in time order: its per-request log
    (arrivals, attempts, answers: the last hour by default) merged with its history of
    state changes (retry hints). Read-only: a running gateway may hold the file, and one
    of the earlier release (a single `events` log) is read as it is."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise ValueError(f"{path}: cannot open it ({exc})") from None
    try:
        if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise ValueError(f"{path}: not an omniroute state database")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ValueError(f"{path}: written by a newer release (schema version "
                             f"{version}; this one reads up to {SCHEMA_VERSION})")
        query = _ONE_LOG if version < 3 else _TWO_LOGS
        for (body,) in db.execute(query):  # row by row: an hour is ~100 MB of text
            event = _parse(body) if isinstance(body, str) else None
            if event is not None:
                yield event
    except sqlite3.Error as exc:
        raise ValueError(f"{path}: cannot read its events ({exc})") from None
    finally:
        db.close()


#: the earlier release's one log of every event, and this one's two, merged by time
_ONE_LOG = "SELECT body FROM events ORDER BY id"
_TWO_LOGS = ("SELECT body FROM (SELECT t, id, body, 0 AS log FROM requests UNION ALL "
             "SELECT t, id, body, 1 FROM history) ORDER BY t, log, id")


def events_from_gateway(url: str, token: str, length_ms: int,
                        progress: Callable[[int], None] | None = None,
                        ) -> list[dict[str, Any]]:
    """Follow a gateway's event stream for `length_ms` (or until the gateway ends it, or
    Ctrl-C) and return what arrived."""
    events: list[dict[str, Any]] = []
    stream_url = url.rstrip("/") + "/api/resilience/events"

    async def follow() -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client, \
                client.stream("GET", stream_url,
                              headers={"authorization": f"Bearer {token}"}) as answer:
            if answer.status_code != 200:
                raise ValueError(f"{stream_url} answered {answer.status_code}")
            async for line in answer.aiter_lines():
                event = _parse(line)
                if event is not None:
                    events.append(event)
                    if progress is not None:
                        progress(len(events))

    async def for_a_while() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(follow(), length_ms / 1000)

    try:
        asyncio.run(for_a_while())
    except KeyboardInterrupt:  # Ctrl-C ends the recording early: what came is kept
        pass
    except httpx.HTTPError as exc:
        if not events:
            raise ValueError(f"{stream_url}: {exc or type(exc).__name__}") from None
    return events


class _FlowLists(yaml.SafeDumper):
    """Lists of plain values on one line (`at: [0, 51, 97]`): a recording of an hour keeps
    one line a route, not one a request."""


def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(item, int | float | str) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_FlowLists.add_representer(list, _list)


def write_scenario(path: Path, events: Iterator[dict[str, Any]] | list[dict[str, Any]], *,
                   name: str, source: str) -> Recording:
    """Write the scenario the events imply to `path` (beside, then renamed)."""
    scenario, recording = scenario_from_events(events, name=name, source=source)
    text = ("# written by omniroute-sim record: run it with --config <your router config>\n"
            + yaml.dump(scenario, Dumper=_FlowLists, sort_keys=False, width=100))
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
    return recording
