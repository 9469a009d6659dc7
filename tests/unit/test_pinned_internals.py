"""What paycore leans on of the frameworks beyond their documented API, held (issue 30, point 4;
issue 39, ADR 0026 step 4).

uvicorn: paycore serves HTTP/1.1 with its own protocol (`http/protocol.py`, `http/cycle.py`) on
httptools' public parser; nothing private of uvicorn's is subclassed, imported or called (the
test below reads paycore's sources for it). uvicorn's public `Config(http=<class>)` and `Server`
run that protocol, and what they hand it is not in uvicorn's documentation, so it is held here,
by behaviour, through a real server and socket: the keyword arguments `Server` builds a protocol
with, the `Config` attributes the protocol reads, the `ServerState` it shares
(`connections`, `tasks`, `default_headers`, `total_requests`), and `shutdown()` called on every
connection when the server stops. An upgrade that changes one fails here, naming it.

`db/driver.py` runs the money path's statements on the driver's own cursor (ADR 0007) with
SQLAlchemy's public API alone: its statements reach their observers through `db/observers.py`,
not SQLAlchemy's events, and a lost connection takes the pool's older ones along through public
pool events (`db/lost_connections.py`), not `Pool._invalidate`. The last test below keeps it so.

uvicorn is pinned exactly in pyproject.toml.
"""

from __future__ import annotations

import inspect
import re
import socket
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
import uvicorn
from uvicorn.server import ServerState

from paycore.db import driver, lost_connections, observers
from paycore.http import protocol
from paycore.http.server import listening_socket

SOURCES = Path(protocol.__file__).parents[2]  # src/: paycore and paycore_sandbox
PUBLIC_UVICORN = {"uvicorn", "uvicorn.config", "uvicorn.server"}


class Recorded(protocol.HttpProtocol):
    """paycore's protocol, noting what uvicorn's server hands it."""

    made: ClassVar[list[dict[str, Any]]] = []
    shutdowns: ClassVar[list[object]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        assert not args, "uvicorn passes keyword arguments"
        Recorded.made.append(kwargs)
        super().__init__(**kwargs)

    def shutdown(self) -> None:
        Recorded.shutdowns.append(self)
        super().shutdown()


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    del receive
    assert scope["asgi"]["version"] == "3.0" and scope["root_path"] == ""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_uvicorns_server_builds_and_stops_the_protocol_as_it_expects() -> None:
    listening = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(_hello, http=Recorded, lifespan="off", log_config=None, proxy_headers=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        with socket.create_connection(listening.getsockname(), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok") and (received := client.recv(4096)):
                answer += received
            [made] = Recorded.made
            state = made["server_state"]
            [connection] = state.connections
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
            server.should_exit = True
            thread.join(10)
    finally:
        listening.close()
    assert set(made) == {"config", "server_state", "app_state", "_loop"}
    inspect.signature(protocol.HttpProtocol).bind(**made)
    config = made["config"]
    assert config.loaded and config.loaded_app is _hello and config.root_path == ""
    assert isinstance(state, ServerState) and isinstance(made["app_state"], dict)
    assert isinstance(state.tasks, set) and state.total_requests == 1
    assert [name for name, _ in state.default_headers] == [b"date", b"server"]
    assert Recorded.shutdowns == [connection] and not state.connections


def test_the_protocol_subclasses_nothing_of_uvicorns() -> None:
    assert [c for c in protocol.HttpProtocol.__mro__ if c.__module__.startswith("uvicorn")] == []


def test_paycore_imports_only_uvicorns_public_modules_and_names() -> None:
    found = []
    for path in sorted(SOURCES.rglob("*.py")):
        source = path.read_text()
        for module, names in re.findall(r"^\s*from (uvicorn[\w.]*) import ([^\n]+)", source, re.MULTILINE):
            if module not in PUBLIC_UVICORN or any(name.strip().startswith("_") for name in names.split(",")):
                found.append(f"{path.name}: from {module} import {names}")
        imported = re.findall(r"^\s*import (uvicorn[\w.]*)", source, re.MULTILINE)
        found += [f"{path.name}: import {module}" for module in imported if module not in PUBLIC_UVICORN]
        found += [f"{path.name}: {m}" for m in re.findall(r"\buvicorn\.(?:\w+\.)*_\w+", source)]
    assert found == [], found


@pytest.mark.parametrize("module", [driver, observers, lost_connections], ids=lambda module: module.__name__)
def test_the_drivers_statements_read_no_private_internal_of_sqlalchemy(module: Any) -> None:
    """Nothing of SQLAlchemy's read by a leading underscore (`connection._has_events`,
    `pool._invalidate`, ...): what is not held above must not be leaned on."""
    source = inspect.getsource(module)
    found = set(re.findall(r"\b(?!self\.)\w+\._\w+", source))
    assert not found, found
