"""The private internals paycore leans on, pinned (issue 30, point 4).

Each is kept for a measured gain, and each is pinned here so that the first upgrade that
changes it fails this test loudly, naming what changed, instead of breaking paycore silently:

- `http/protocol.py` subclasses uvicorn's httptools protocol (`HttpToolsProtocol`) to add the
  HTTP limits of ADR 0013. httptools is uvicorn's fast parser: the credits benchmark
  (docs/benchmarks.md, `credits_http_bench.py`) runs on it, and the limits are a counter and a timer per
  request on top (ADR 0013, point 6). The subclass overrides or calls the methods below and
  reads `parser`, `cycle`, `flow`, `connections`, `tasks`, `server_state`, `url`, `headers`,
  and replaces `transport` after `connection_made` (`http/coalesced.py`: a response's head and
  body in one write), which `on_headers_complete` hands to each `RequestResponseCycle`.

`db/driver.py` runs the money path's statements on the driver's own cursor (ADR 0007) with
SQLAlchemy's public API alone: its statements reach their observers through `db/observers.py`,
not SQLAlchemy's events, and a lost connection takes the pool's older ones along through public
pool events (`db/lost_connections.py`), not `Pool._invalidate`. The last test below keeps it so.

uvicorn is pinned exactly in pyproject.toml. On an upgrade that fails here: read the named
function's new source against the paycore module that leans on it, fix that module if needed
(its behaviour tests run through real sockets), then record the new fingerprint below.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl

from paycore.db import driver, lost_connections, observers
from paycore.http import protocol

# sha256 (first 16 hex digits) of each function's source: uvicorn 0.54.0.
PINS = {
    "uvicorn HttpToolsProtocol.__init__": "4f08999410347141",
    "uvicorn HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "uvicorn HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "uvicorn HttpToolsProtocol.data_received": "010a7ae59a5d3b1a",
    "uvicorn HttpToolsProtocol.on_message_begin": "96d377fdc7c2baef",
    "uvicorn HttpToolsProtocol.on_headers_complete": "1ea8589acfad92d8",
    "uvicorn HttpToolsProtocol.on_message_complete": "1fbad42dc31fc01f",
    "uvicorn HttpToolsProtocol._unset_keepalive_if_required": "00a6a4e47214e68e",
    "uvicorn RequestResponseCycle.__init__": "4d2f220910c33c12",
}
OWNERS: dict[str, Any] = {
    "uvicorn HttpToolsProtocol": httptools_impl.HttpToolsProtocol,
    "uvicorn RequestResponseCycle": httptools_impl.RequestResponseCycle,
}


def fingerprint(name: str) -> str:
    owner, function = name.rsplit(".", 1)
    source = inspect.getsource(getattr(OWNERS[owner], function))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINS))
def test_each_internal_paycore_leans_on_is_the_one_it_was_written_against(name: str) -> None:
    found = fingerprint(name)
    assert found == PINS[name], (
        f"{name} changed in this version (fingerprint {found}, pinned {PINS[name]}): "
        "re-read it against paycore/http/protocol.py, then update PINS in this file"
    )


def test_the_pins_cover_every_method_the_protocol_overrides_of_uvicorn() -> None:
    overridden = {
        name
        for name, value in vars(protocol.LimitedHttpToolsProtocol).items()
        if callable(value) and hasattr(httptools_impl.HttpToolsProtocol, name)
    }
    pinned = {name.rsplit(".", 1)[1] for name in PINS if name.startswith("uvicorn HttpToolsProtocol")}
    assert overridden <= pinned, overridden - pinned


@pytest.mark.parametrize("module", [driver, observers, lost_connections], ids=lambda module: module.__name__)
def test_the_drivers_statements_read_no_private_internal_of_sqlalchemy(module: Any) -> None:
    """Nothing of SQLAlchemy's read by a leading underscore (`connection._has_events`,
    `pool._invalidate`, ...): what is not pinned above must not be leaned on."""
    source = inspect.getsource(module)
    found = set(re.findall(r"\b(?!self\.)\w+\._\w+", source))
    assert not found, found
