"""The gateway's protocol subclasses uvicorn's private `HttpToolsProtocol`
(omniroute_tui/gateway/protocol.py). What the subclass overrides, calls and reads is
checked here against the installed uvicorn, so that an upgrade past the tested range
fails here, naming what changed, rather than as a gateway that misbehaves."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from omniroute_tui.gateway.protocol import _LimitedProtocol

#: the methods the subclass overrides or calls, with their parameters as in uvicorn 0.54
METHODS = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "pause_writing": ["self"],
    "resume_writing": ["self"],
    "data_received": ["self", "data"],
    "on_headers_complete": ["self"],
    "on_body": ["self", "body"],
    "on_message_complete": ["self"],
    "_unset_keepalive_if_required": ["self"],
    "send_400_response": ["self", "msg"],
    "shutdown": ["self"],
}
#: `data_received` is replaced, not extended (its parser errors are answered by the
#: subclass): uvicorn's own, as the subclass repeats it, has this digest
DATA_RECEIVED_SHA256 = "010a7ae59a5d3b1a5e7326ce246878568629d126a076d8af5ba10cab040fae43"


def where() -> str:
    return f"uvicorn {uvicorn.__version__}'s HttpToolsProtocol"


def read(owner: object, name: str) -> Any:
    """`owner.name`, or a failure naming the attribute uvicorn no longer sets."""
    what = "its cycle" if type(owner).__name__ == "RequestResponseCycle" else "an instance"
    assert hasattr(owner, name), f"{where()}: {what} has no attribute {name!r} any more"
    return getattr(owner, name)


def test_the_methods_the_subclass_uses_keep_their_parameters() -> None:
    for name, parameters in METHODS.items():
        method = getattr(HttpToolsProtocol, name, None)
        assert method is not None, f"{where()} has no method {name}() any more"
        found = list(inspect.signature(method).parameters)
        assert found == parameters, (f"{where()}.{name} takes ({', '.join(found)}), "
                                     f"not ({', '.join(parameters)}) as the subclass expects")


def test_every_override_of_the_subclass_is_in_the_checked_list() -> None:
    overridden = {name for name, value in vars(_LimitedProtocol).items()
                  if callable(value) and hasattr(HttpToolsProtocol, name)}
    assert overridden <= set(METHODS), (
        f"_LimitedProtocol overrides {sorted(overridden - set(METHODS))} of {where()}: "
        "add them to METHODS")


def test_data_received_is_still_the_one_the_subclass_replaces() -> None:
    source = inspect.getsource(HttpToolsProtocol.data_received)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert digest == DATA_RECEIVED_SHA256, (
        f"{where()}.data_received changed; _LimitedProtocol.data_received replaces it "
        "without calling it: carry the change over, then update DATA_RECEIVED_SHA256")


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 4000)}.get(
            name, default)

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_the_attributes_the_subclass_reads_are_set_as_it_expects() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    state = ServerState()
    protocol = HttpToolsProtocol(config, state, {}, asyncio.get_running_loop())
    assert read(protocol, "loop") is asyncio.get_running_loop(), f"{where()}.loop is not the loop"
    assert isinstance(read(protocol, "parser"), httptools.HttpRequestParser), (
        f"{where()}.parser is no longer an httptools.HttpRequestParser, whose errors the "
        "subclass catches")
    assert read(protocol, "cycle") is None, f"{where()}.cycle is not None before a request"
    transport = FakeTransport()
    protocol.connection_made(transport)
    assert read(protocol, "transport") is transport, f"{where()}.transport is not the transport"
    assert read(protocol, "connections") is state.connections and protocol in state.connections, (
        f"{where()}.connections is not the server's set of open connections")
    assert read(protocol, "client") == ("127.0.0.1", 50000), f"{where()}.client is not the peer"
    assert callable(getattr(read(protocol, "flow"), "resume_reading", None)), (
        f"{where()}.flow has no resume_reading(), which a refused client's linger calls")
    corked = FakeTransport()
    protocol.transport = corked  # as the subclass does: answers go through its wrapper
    protocol.data_received(b"POST /v1/x?q=1 HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n")
    assert read(protocol, "url") == b"/v1/x?q=1", f"{where()}.url is not the request's target"
    assert read(protocol, "headers") == [(b"host", b"a"), (b"content-length", b"2")], (
        f"{where()}.headers is not the request's (name, value) pairs, names lowered")
    cycle = read(protocol, "cycle")
    assert cycle is not None, f"{where()}.cycle is not set once a request's head is read"
    assert (read(cycle, "response_started"), read(cycle, "response_complete")) == (False, False), (
        f"{where()}'s cycle has no response_started / response_complete flags")
    protocol.data_received(b"ok")
    for _ in range(100):
        if cycle.response_complete:
            break
        await asyncio.sleep(0)
    assert cycle.response_started and cycle.response_complete, (
        f"{where()}'s cycle does not mark its answer started and complete")
    assert corked.written and corked.written[0].startswith(b"HTTP/1.1 200"), (
        f"{where()}'s cycle no longer writes through the protocol's transport as it is when "
        "the request's head is read: the subclass's corked transport would be bypassed")
    assert not transport.written
    protocol.connection_lost(None)
    assert protocol not in state.connections
