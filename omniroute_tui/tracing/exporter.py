"""Ended spans sent to an OTLP/HTTP endpoint in batches, from a thread of their own.

Configured as every OpenTelemetry exporter is, by the standard variables (`ExportSettings.
from_env`): the endpoint, headers, timeout, compression and CA certificate of
`OTEL_EXPORTER_OTLP_[TRACES_]*`, the batching of `OTEL_BSP_*`. A span that finds the queue
full is dropped and counted; a batch the endpoint refuses or cannot take is retried twice
(a 429, 502, 503, 504 or a transport error), then dropped and counted; each is logged, the
first with its cause. Nothing here blocks or fails a request.
"""

from __future__ import annotations

import gzip
import http.client
import itertools
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from .otlp_wire import encode_export
from .spans import Attributes

__all__ = ["ExportSettings", "SpanExporter"]

log = logging.getLogger("omniroute.tracing")

_RETRYABLE = frozenset({429, 502, 503, 504})
_BACKOFF_S = (0.5, 1.0)  # before the second and the third try


class SettingsError(ValueError):
    """A tracing variable that cannot be used (the gateway refuses to start: the
    message names it)."""


def _ms(environ: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(f"{name}: not a whole number: {text!r}") from None
    if value < minimum:
        raise SettingsError(f"{name}: at least {minimum}, not {value}")
    return value


def _either(environ: Mapping[str, str], name: str) -> str:
    """The traces-only variable, else the general one (`OTEL_EXPORTER_OTLP_TRACES_X`,
    `OTEL_EXPORTER_OTLP_X`)."""
    return (environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
            or environ.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


@dataclass(frozen=True)
class ExportSettings:
    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False
    certificate: str | None = None
    schedule_delay_s: float = 5.0
    max_queue: int = 2048
    max_batch: int = 512

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ExportSettings:
        """The settings the variables give; SettingsError naming a bad one."""
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if not endpoint:
            base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
            endpoint = base.rstrip("/") + "/v1/traces"
        try:
            parts = urlsplit(endpoint)
            parts.port  # noqa: B018 - raises for a port that is not a number
        except ValueError as exc:
            raise SettingsError(f"the OTLP endpoint {endpoint!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(f"the OTLP endpoint {endpoint!r} is not an http(s) URL "
                                "(OTLP over HTTP is what the gateway sends)")
        headers = {}
        for pair in _either(environ, "HEADERS").split(","):
            if not pair.strip():
                continue
            name, sep, value = pair.partition("=")
            if not sep or not name.strip():
                raise SettingsError("OTEL_EXPORTER_OTLP_HEADERS: expected name=value pairs "
                                    f"separated by commas, not {pair.strip()[:40]!r}")
            headers[unquote(name.strip()).lower()] = unquote(value.strip())
        compression = _either(environ, "COMPRESSION").lower() or "none"
        if compression not in ("gzip", "none"):
            raise SettingsError(f"OTEL_EXPORTER_OTLP_COMPRESSION: gzip or none, not "
                                f"{compression!r}")
        certificate = _either(environ, "CERTIFICATE") or None
        if certificate is not None and not os.path.isfile(certificate):
            raise SettingsError(f"OTEL_EXPORTER_OTLP_CERTIFICATE: no file {certificate!r}")
        timeout_name = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
                        if environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                        else "OTEL_EXPORTER_OTLP_TIMEOUT")
        max_batch = _ms(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, minimum=1)
        max_queue = _ms(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, minimum=1)
        return cls(endpoint, headers,
                   timeout_s=_ms(environ, timeout_name, 10_000, minimum=1) / 1000,
                   gzip=compression == "gzip",
                   certificate=certificate,
                   schedule_delay_s=_ms(environ, "OTEL_BSP_SCHEDULE_DELAY", 5_000) / 1000,
                   max_queue=max_queue, max_batch=min(max_batch, max_queue))


class SpanExporter:
    """Takes ended spans, encoded (`add`, from one thread at a time: the event loop's),
    and sends them in batches from its own."""

    def __init__(self, settings: ExportSettings, resource: Attributes,
                 scope: tuple[str, str], *, backoff_s: tuple[float, ...] = _BACKOFF_S) -> None:
        """`backoff_s`: the pauses before a failed batch's second and later tries."""
        self.settings = settings
        self._backoff_s = backoff_s
        self._resource = resource
        self._scope = scope
        #: the spans queued, encoded (bytes: nothing for the garbage collector to walk
        #: while they wait), oldest first: the adding thread extends it, the export thread
        #: takes a batch off its head in one slice (not a step a request); spans ever
        #: queued and ever taken off it (each counter written by one thread)
        self._queue: list[bytes] = []
        self._added = self._taken = 0
        self._max_queue = settings.max_queue
        self._max_batch = settings.max_batch
        #: set by the adding thread once a full batch is queued (not again while it is
        #: set: the event's own lock at every add while the thread wakes), by a flush
        #: and by the stop; cleared by the export thread as a round begins
        self._wake = threading.Event()
        #: each `flush` asks for a round that sends a part batch too: the ask last made
        #: (`next` on a count is one step, whatever thread flushes) and last seen by the
        #: export thread
        self._asks = itertools.count(1)
        self._flush_asked = self._flush_seen = 0
        self._idle = threading.Event()  # nothing queued or being sent
        self._idle.set()
        #: whether `_idle` may be set, as the adding thread saw it last: a plain flag,
        #: not the event's own (a call) at every add
        self._idle_set = True
        self._stopping = False
        self._url = urlsplit(settings.endpoint)
        self._connection: http.client.HTTPConnection | None = None
        #: spans sent, and dropped for a full queue (the adding thread's); spans not sent
        #: with a batch that failed (the export thread's) and not made (the adding's)
        self.exported = self.dropped = 0
        self._unsent = self._unmade = 0
        self._dropped_told = 0
        self._bugs: set[str] = set()  # what failed for a bug of ours, its traceback logged
        self._thread = threading.Thread(target=self._run, name="omniroute-otlp-export",
                                        daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued(self) -> int:
        """Spans waiting in the queue (read from any thread: a moment's figure)."""
        return len(self._queue)

    @property
    def failed(self) -> int:
        """Spans not sent for a failure: their batch's, or a bug in making them."""
        return self._unsent + self._unmade

    def add(self, make: Callable[[], Sequence[bytes]], spans: int = 1) -> None:
        """Queue the `spans` ended spans `make` encodes (each as `encode_span` writes
        it), made now unless the queue is full: then they are dropped (counted, logged
        once a batch). What `make` raises is a bug: its spans are counted as failed and
        logged, and nothing is raised to the request."""
        added = self._added
        if added - self._taken + spans > self._max_queue:
            self.dropped += spans
            return
        if self._stopping and not self._thread.is_alive():  # nothing would send them
            self._unmade += spans
            return
        try:
            made = make()
        except Exception:
            self._unmade += spans
            self._bug("making the spans of a request", spans)
            return
        self._queue += made  # before `_idle` is cleared: the export thread sets it
        self._added = added = added + len(made)  # after its last look at the queue
        if self._idle_set:
            self._idle_set = False
            self._idle.clear()
        if added - self._taken >= self._max_batch and not self._wake.is_set():
            self._wake.set()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send what is queued now; whether it was sent (or given up) within `timeout_s`.
        Blocks: call it off the event loop."""
        target, deadline = self._added, time.monotonic() + timeout_s
        while True:
            self._flush_asked = next(self._asks)  # the next round sends a part batch too
            self._wake.set()
            if not self._idle.wait(max(0.0, deadline - time.monotonic())):
                return False
            if self._taken >= target:
                return True
            if time.monotonic() >= deadline:
                return False
            # `_idle` was set as a span came: the thread has seen it and clears it at once
            time.sleep(0.001)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Send what is queued and stop (blocks, as `flush`); what is left once the
        thread has stopped (added as it stopped) is counted as not sent."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._disconnect()
        if not self._thread.is_alive():  # the thread's counters are this one's now
            # what the queue holds, not `_added - _taken`: an add between its queueing and
            # its count (the loop's, as this runs on another thread) would make that less
            # than the queue, or below zero if the thread had sent its spans
            left = len(self._queue)
            if left:
                self._taken += left
                self._queue.clear()
                self._unsent += left
                self._idle_set = True
                self._idle.set()
                log.warning("%d span(s) not sent: added as the exporter stopped", left)

    def _run(self) -> None:
        """The thread: a batch when one is full; at each schedule delay, at a flush and
        at the stop, what is queued, a part batch too (a part batch sent as soon as the
        last is, under steady traffic, would make every POST a few spans). It must not
        die: what a batch raises is logged and the loop goes on; if it dies all the same
        (something no `except Exception` catches), that is logged, and every span from
        then on is counted dropped once the queue is full."""
        try:
            self._rounds()
        finally:
            if not self._stopping:
                log.error("the trace export thread stopped: no more spans are sent "
                          "(omniroute_trace_spans_total{result=\"dropped\"} counts them "
                          "once %d are queued)", self.settings.max_queue)

    def _rounds(self) -> None:
        while True:
            woken = self._wake.wait(self.settings.schedule_delay_s)
            self._wake.clear()
            ask = self._flush_asked  # read once: a flush's ask coming now is the next round's
            asked, self._flush_seen = ask != self._flush_seen, ask
            try:
                self._send_queued(not woken or self._stopping or asked)
            except Exception:  # a bug: logged with its traceback, the next batch tried
                log.exception("sending traces failed")
            if self.dropped > self._dropped_told:
                log.warning("%d span(s) dropped: the queue of %d was full (%d since start; "
                            "OTEL_BSP_MAX_QUEUE_SIZE)", self.dropped - self._dropped_told,
                            self.settings.max_queue, self.dropped)
                self._dropped_told = self.dropped
            if self._stopping and not self._queue:  # spans added at exit: sent too
                return

    def _send_queued(self, part: bool) -> None:
        """The full batches queued, and with `part` what is left (else it waits)."""
        queue, size = self._queue, self._max_batch
        while len(queue) >= size or (part and queue):
            batch = queue[:size]
            del queue[:len(batch)]  # what was added since went to its end
            self._taken += len(batch)
            try:
                self._send(batch)
            except Exception:  # a bug: this batch is counted, the next one sent
                self._unsent += len(batch)
                self._bug("writing a batch of spans", len(batch))
        if queue and not part:  # a part batch waits for more, the delay or a flush
            return
        self._idle_set = True
        self._idle.set()
        if queue:  # added while the event was being set: a round, woken now, sees them
            self._idle_set = False
            self._idle.clear()
            self._wake.set()

    def _bug(self, what: str, spans: int) -> None:
        """`spans` not sent for a bug of ours (counted by the caller): the first
        traceback of each `what` logged, the later ones a line each."""
        if what in self._bugs:
            log.warning("%s failed again: %d span(s) not sent (%d not sent since start)",
                        what, spans, self.failed)
        else:
            self._bugs.add(what)
            log.exception("%s failed: %d span(s) not sent (a bug; "
                          "omniroute_trace_spans_total{result=\"failed\"} counts them)",
                          what, spans)

    def _send(self, batch: list[bytes]) -> None:
        body = encode_export(batch, self._resource, self._scope)
        headers = {**self.settings.headers, "content-type": "application/x-protobuf"}
        if self.settings.gzip:
            body = gzip.compress(body, compresslevel=1)
            headers["content-encoding"] = "gzip"
        problem = ""
        for attempt in range(len(self._backoff_s) + 1):
            if attempt:
                time.sleep(self._backoff_s[attempt - 1])
            try:
                status = self._post(body, headers)
            except (OSError, http.client.HTTPException) as exc:
                self._disconnect()  # a new connection for the next try
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if 200 <= status < 300:
                self.exported += len(batch)
                return
            problem = f"HTTP {status}"
            if status not in _RETRYABLE:
                break
        self._unsent += len(batch)
        log.warning("%d span(s) not sent to %s: %s (%d not sent since start)", len(batch),
                    self.settings.endpoint, problem, self.failed)

    def _post(self, body: bytes, headers: dict[str, str]) -> int:
        """One export on the kept-alive connection (the standard library's client: a third
        of httpx's CPU for a batch, and no log line of its own per export)."""
        connection = self._connection
        if connection is None:
            url, timeout = self._url, self.settings.timeout_s
            if url.scheme == "https":
                context = ssl.create_default_context(cafile=self.settings.certificate)
                connection = http.client.HTTPSConnection(
                    url.hostname or "", url.port, timeout=timeout, context=context)
            else:
                connection = http.client.HTTPConnection(url.hostname or "", url.port,
                                                        timeout=timeout)
            self._connection = connection
        path = self._url.path or "/"
        if self._url.query:
            path += "?" + self._url.query
        connection.request("POST", path, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read(1 << 20)  # a receiver's answer is small; more is not read
        if answer.will_close or not answer.isclosed():
            self._disconnect()
        return answer.status

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
