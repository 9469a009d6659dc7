"""The SQL of authorizations (charges with capture manual): their captures and cancels, each a
row of `sandbox_charge_actions` keyed by its request id, and the guarded updates that close an
authorization once. On the driver, as the charge's own statements (repository.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db import driver
from paycore.db.sql import insert_or_ignore
from paycore_sandbox.models import charge_actions, charges
from paycore_sandbox.repository import first_row

_CHARGE_COLUMNS: Final = ", ".join(column.name for column in charges.columns)
_ACTION_COLUMNS: Final = ", ".join(column.name for column in charge_actions.columns)
_FIND_ACTION = driver.statement(f"SELECT {_ACTION_COLUMNS} FROM {charge_actions.name} WHERE request_id = ?")
# Each closes an authorization that is still open and not past its expiry: of a capture, a
# cancel and an expiry racing, the first to take the row's lock wins and the others change nothing.
_CAPTURE = driver.statement(
    f"UPDATE {charges.name} SET status = 'captured', captured_minor = ?, released_minor = ?,"
    " captured_at_us = ?, updated_at_us = ?"
    " WHERE request_id = ? AND status = 'requires_capture' AND authorization_expires_at_us > ?"
)
_CANCEL = driver.statement(
    f"UPDATE {charges.name} SET status = 'canceled', released_minor = amount_minor, updated_at_us = ?"
    " WHERE request_id = ? AND status = 'requires_capture' AND authorization_expires_at_us > ?"
)
_EXPIRE = driver.statement(
    f"UPDATE {charges.name} SET status = 'expired', released_minor = amount_minor, updated_at_us = ?"
    " WHERE request_id = ? AND status = 'requires_capture' AND authorization_expires_at_us <= ?"
)
_DUE_TO_EXPIRE = (
    f"SELECT {_CHARGE_COLUMNS} FROM {charges.name}"
    " WHERE status = 'requires_capture' AND authorization_expires_at_us <= ?"
    " ORDER BY authorization_expires_at_us, request_id LIMIT ?"
)
_DUE_TO_EXPIRE_STATEMENT = driver.Statement(
    sqlite=driver.statement(_DUE_TO_EXPIRE).sqlite,
    postgresql=driver.statement(_DUE_TO_EXPIRE + " FOR UPDATE SKIP LOCKED").postgresql,
)


def find_action(connection: Connection, request_id: str) -> dict[str, Any] | None:
    return first_row(charge_actions, driver.fetch(connection, _FIND_ACTION, (request_id,)))


def insert_action(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when inserted; False when an action with this request id exists (committed)."""
    return insert_or_ignore(connection, charge_actions, values, ["request_id"])


def capture(connection: Connection, request_id: str, captured_minor: int, released_minor: int, now_us: int) -> bool:
    params = (captured_minor, released_minor, now_us, now_us, request_id, now_us)
    return driver.execute(connection, _CAPTURE, params) == 1


def cancel(connection: Connection, request_id: str, now_us: int) -> bool:
    return driver.execute(connection, _CANCEL, (now_us, request_id, now_us)) == 1


def expire(connection: Connection, request_id: str, now_us: int) -> bool:
    """False if the authorization was closed meanwhile (captured, canceled, expired by another)."""
    return driver.execute(connection, _EXPIRE, (now_us, request_id, now_us)) == 1


def due_to_expire(connection: Connection, now_us: int, limit: int) -> Sequence[dict[str, Any]]:
    rows = driver.fetch(connection, _DUE_TO_EXPIRE_STATEMENT, (now_us, limit))
    found = [first_row(charges, [row]) for row in rows]
    return [row for row in found if row is not None]
