"""The two private internals paycore leans on, pinned (issue 30, point 4).

Each is kept for a measured gain, and each is pinned here so that the first upgrade that
changes it fails this test loudly, naming what changed, instead of breaking paycore silently:

- `http/protocol.py` subclasses uvicorn's httptools protocol (`HttpToolsProtocol`) to add the
  HTTP limits of ADR 0013. httptools is uvicorn's fast parser: the credits benchmark
  (docs/benchmarks.md, `credits_http_bench.py`) runs on it, and the limits are a counter and a timer per
  request on top (ADR 0013, point 6). The subclass overrides or calls the methods below and
  reads `parser`, `cycle`, `flow`, `connections`, `tasks`, `server_state`, `url`, `headers`,
  and replaces `transport` after `connection_made` (`http/coalesced.py`: a response's head and
  body in one write), which `on_headers_complete` hands to each `RequestResponseCycle`.
- `db/driver.py` runs the money path's statements on the driver's own cursor (ADR 0007: a
  PostgreSQL transfer's client CPU 1.9 ms against 3.5 ms through SQLAlchemy Core). To keep
  SQLAlchemy's `before_cursor_execute` listeners seeing those statements (statement logs, the
  statement counts of tests/integration/payments/test_statement_counts.py), it does what
  `Connection._cursor_execute` does: `if self._has_events or self.engine._has_events: for fn in
  self.dispatch.before_cursor_execute: fn(...)`; and on a lost connection it does what
  `Connection._handle_dbapi_exception` does: `engine.pool._invalidate(...)`, so the pool drops
  every connection older than the lost one (issue 29: the database went away).

Both libraries are pinned exactly in pyproject.toml. On an upgrade that fails here: read the
named function's new source against the paycore module that leans on it, fix that module if
needed (its behaviour tests run through real sockets and real databases), then record the new
fingerprint below.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
from sqlalchemy.engine import base
from sqlalchemy.pool import base as pool_base
from uvicorn.protocols.http import httptools_impl

from paycore.db import driver
from paycore.http import protocol

# sha256 (first 16 hex digits) of each function's source: uvicorn 0.54.0, SQLAlchemy 2.1.9.
PINS = {
    "uvicorn HttpToolsProtocol.__init__": "4f08999410347141",
    "uvicorn HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "uvicorn HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "uvicorn HttpToolsProtocol.data_received": "010a7ae59a5d3b1a",
    "uvicorn HttpToolsProtocol.on_message_begin": "96d377fdc7c2baef",
    "uvicorn HttpToolsProtocol.on_headers_complete": "1ea8589acfad92d8",
    "uvicorn HttpToolsProtocol.on_message_complete": "1fbad42dc31fc01f",
    "uvicorn HttpToolsProtocol.send_400_response": "ae5a4a3782b646fd",
    "uvicorn HttpToolsProtocol._unset_keepalive_if_required": "00a6a4e47214e68e",
    "uvicorn HttpToolsProtocol._should_upgrade": "8fcad1ab8e096739",
    "uvicorn HttpToolsProtocol.handle_websocket_upgrade": "179c4f769386ab89",
    "uvicorn HttpToolsProtocol._unsupported_upgrade_warning": "55bbd2762b189d9a",
    "uvicorn RequestResponseCycle.__init__": "4d2f220910c33c12",
    "sqlalchemy Connection.__init__": "fb256c1d17ffdf51",
    "sqlalchemy Connection._cursor_execute": "216e9d0b45124c9d",
    "sqlalchemy Connection._handle_dbapi_exception": "9ff661c716209c2e",
    "sqlalchemy Pool._invalidate": "6c8efc5b0f3ceee5",
}
OWNERS: dict[str, Any] = {
    "uvicorn HttpToolsProtocol": httptools_impl.HttpToolsProtocol,
    "uvicorn RequestResponseCycle": httptools_impl.RequestResponseCycle,
    "sqlalchemy Connection": base.Connection,
    "sqlalchemy Pool": pool_base.Pool,
}


def fingerprint(name: str) -> str:
    owner, function = name.rsplit(".", 1)
    source = inspect.getsource(getattr(OWNERS[owner], function))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINS))
def test_each_internal_paycore_leans_on_is_the_one_it_was_written_against(name: str) -> None:
    found = fingerprint(name)
    user = "paycore/http/protocol.py" if name.startswith("uvicorn") else "paycore/db/driver.py"
    assert found == PINS[name], (
        f"{name} changed in this version (fingerprint {found}, pinned {PINS[name]}): "
        f"re-read it against {user}, then update PINS in this file"
    )


def test_the_pins_cover_every_method_the_protocol_overrides_of_uvicorn() -> None:
    overridden = {
        name
        for name, value in vars(protocol.LimitedHttpToolsProtocol).items()
        if callable(value) and hasattr(httptools_impl.HttpToolsProtocol, name)
    }
    pinned = {name.rsplit(".", 1)[1] for name in PINS if name.startswith("uvicorn HttpToolsProtocol")}
    assert overridden <= pinned, overridden - pinned


def test_the_driver_still_reads_the_internals_the_pins_are_for() -> None:
    """If driver.py stops using them, the SQLAlchemy pins and this test go too."""
    source = inspect.getsource(driver)
    assert "connection._has_events or connection.engine._has_events" in source
    assert "connection.dispatch.before_cursor_execute" in source
    assert "connection.engine.pool._invalidate(" in source
