"""A console's browser tab opened by hand (a websocket on a raw socket: no browser) and the
processes around it: shared by the `--web` tests and bench/room_viewers.py, so it imports
nothing but the standard library."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def process_group(*argv: str, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """`python *argv` in a session of its own, its output dropped; at the end its whole
    group (a `--web` server and the tab consoles it spawned) gets SIGTERM, SIGKILL after
    10 s."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def connect_tab(port: int, *, timeout_s: float = 20, receive_buffer: int | None = None
                ) -> socket.socket:
    """A socket that has asked the page on `port` for a 120x40 console on `/ws` (the
    websocket upgrade sent, nothing read yet)."""
    tab = socket.socket()
    if receive_buffer is not None:
        tab.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    tab.settimeout(timeout_s)
    tab.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    tab.sendall(f"GET /ws?width=120&height=40 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    return tab


def read_first_screen(tab: socket.socket, size: int = 20_000) -> None:
    """Read the upgrade's answer and `size` bytes of frames after it, answering each ping
    with a pong as a browser does: a console slow to start (a loaded machine) must not
    make the server take the tab for a silent one before it has painted."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = tab.recv(65536)
        assert chunk, "the server closed the tab"
        received += chunk
    head, _, frames = received.partition(b"\r\n\r\n")
    assert b"101 Switching Protocols" in head, head
    read = 0
    while read < size:
        while True:  # one whole frame in `frames`, or read on
            length, start = _frame_length(frames)
            if length is not None and len(frames) >= start + length:
                break
            chunk = tab.recv(65536)
            assert chunk, "the server closed the tab"
            frames += chunk
        opcode, payload = frames[0] & 0x0F, frames[start:start + length]
        frames = frames[start + length:]
        read += start + length
        if opcode == 0x9:  # ping: a masked pong with the same payload
            mask = os.urandom(4)
            masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            tab.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
        assert opcode != 0x8, "the server closed the tab"


def _frame_length(frames: bytes) -> tuple[int | None, int]:
    """A server frame's payload length and where its payload starts (None: not enough
    bytes yet to say)."""
    if len(frames) < 2:
        return None, 0
    length = frames[1] & 0x7F
    if length == 126:
        return (int.from_bytes(frames[2:4], "big"), 4) if len(frames) >= 4 else (None, 0)
    if length == 127:
        return (int.from_bytes(frames[2:10], "big"), 10) if len(frames) >= 10 else (None, 0)
    return length, 2


def child_processes(parent: int) -> list[tuple[int, str]]:
    """The processes whose parent is `parent` (a page's tab consoles), with their command
    lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == parent:
            found.append((int(entry.name), cmdline))
    return found
