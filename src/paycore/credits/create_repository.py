"""The SQL of a credit on the data plane (ADR 0026): the one call on PostgreSQL, the fixed list
of statements on SQLite. Each sends a `Plan` (`plan.py`) as it is; no rules here but the
balance limits' checks, which are the ledger's (`paycore.ledger.limits`, applied as
`paycore.ledger.postings._apply` applies them).

Both write a success only. Whatever would refuse (a limit, an account that is not what the
plan says) leaves nothing written and says so (`Refused`, or False for a key that exists), and
the caller runs the reference path, which decides, records and answers, as it always has.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from paycore.credits.plan import Plan, PlannedAccount
from paycore.db import driver
from paycore.ledger.limits import TOTAL_MINOR_MAX, Totals, bound_before_adding, breaks_no_overdraft, grows_past


class Refused(Exception):
    """The write would be refused (or could not be made as planned): roll back, and let the
    reference path decide."""


# ------------------------------------------------------------------ PostgreSQL: one call
# Migration 0026; in autocommit, the call commits itself (ADR 0011). Sent from the event loop
# (`create.py`, on a connection of the loop's own: `db/loop_calls.py`).
CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_credits_create(?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?::text[], ?::text[], ?::boolean[],"
        " ?::text[], ?, ?)"
    )
)


def created(rows: list[tuple[Any, ...]]) -> bool:
    """What the call's rows say (`CALL`, sent with `call_params`): True once it committed the
    credit, False (nothing written) if the key exists. A refusal comes out as DBAPIError with
    SQLSTATE PC001-PC003 (migration 0026)."""
    assert len(rows) == 1, rows
    return bool(rows[0][0])


def call_params(plan: Plan) -> tuple[Any, ...]:
    credit = plan.credit
    templates = [account.template for account in plan.accounts]
    return (
        credit.tenant_id,
        credit.idempotency_key,
        plan.request_fingerprint,
        credit.created_at_us,
        credit.id,
        credit.transfer_id,
        credit.currency,
        credit.amount_minor,
        plan.lines_json,
        [account.id for account in plan.accounts],
        [template.code for template in templates],
        [template.normal_balance for template in templates],
        [template.no_overdraft for template in templates],
        [entry.id for entry in plan.entries],
        plan.answer_status,
        plan.answer_body,
    )


# ------------------------------------------------------------------ SQLite: the fixed list
# In one transaction on the writer (ADR 0008's group commit): the claim with its answer, each
# account's totals (by code: the unique (code, tenant_id) index), the transfer, its entries,
# the credit: 6 statements (and BEGIN IMMEDIATE). Where this process has not seen the tenant's
# accounts, a read of them first, and their creation where missing (once per tenant).
_CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body, created_at_us,'
    ' expires_at_us) VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
_ACCOUNT_COLUMNS = (
    "tenant_id, id, code, currency, normal_balance, no_overdraft, system, metadata, debits_posted_minor,"
    " credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count, created_at_us"
)
_ENSURE = {
    count: driver.statement(
        f"INSERT INTO ledger_accounts ({_ACCOUNT_COLUMNS}) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?, ?, 1, '{}', 0, 0, 0, 0, 0, ?)"] * count)
        + " ON CONFLICT (code, tenant_id) DO NOTHING"
    )
    for count in (1, 2)
}
_FIND = {
    count: driver.statement(
        f"SELECT code FROM ledger_accounts WHERE code IN ({', '.join('?' * count)}) AND tenant_id = ?"
    )
    for count in (1, 2)
}
_APPLY = driver.statement(
    "UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + ?,"
    " credits_posted_minor = credits_posted_minor + ?, entries_count = entries_count + 1"
    " WHERE code = ? AND tenant_id = ? AND debits_posted_minor <= ? AND credits_posted_minor <= ?"
    " RETURNING id, currency, normal_balance, system, debits_posted_minor, credits_posted_minor,"
    " debits_pending_minor, credits_pending_minor, entries_count"
)
_TRANSFER = driver.statement(
    "INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,"
    " reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)"
    " VALUES (?, ?, 'transfer', NULL, NULL, NULL, ?, 'credit', ?, ?, '{}', NULL, ?)"
)
_ENTRIES = driver.statement(
    "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,"
    " account_sequence, created_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_CREDIT = driver.statement(
    "INSERT INTO credits (tenant_id, id, idempotency_key, currency, amount_minor, lines, transfer_id, created_at_us)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def write_statements(connection: Connection, plan: Plan) -> dict[str, str] | None:
    """Write the credit with the fixed list, inside the caller's transaction: the accounts'
    ids by code once written; None (nothing written) if the key exists. Raises `Refused`
    having written what the caller's rollback undoes."""
    credit = plan.credit
    claimed = driver.fetch(
        connection,
        _CLAIM,
        (
            credit.tenant_id,
            credit.idempotency_key,
            plan.request_fingerprint,
            plan.answer_status,
            plan.answer_body,
            credit.created_at_us,
        ),
    )
    if not claimed:
        return None
    _ensure(connection, plan)
    account_ids = {account.template.code: _apply(connection, plan, account) for account in plan.accounts}
    driver.execute(
        connection,
        _TRANSFER,
        (credit.tenant_id, credit.transfer_id, credit.idempotency_key, credit.id, credit.id, credit.created_at_us),
    )
    driver.execute(connection, _ENTRIES, _entry_params(plan, account_ids))
    driver.execute(
        connection,
        _CREDIT,
        (
            credit.tenant_id,
            credit.id,
            credit.idempotency_key,
            credit.currency,
            credit.amount_minor,
            plan.lines_json,
            credit.transfer_id,
            credit.created_at_us,
        ),
    )
    return {code: account_id for code, (account_id, _) in account_ids.items()}


def _ensure(connection: Connection, plan: Plan) -> None:
    """Create the accounts this process has not seen, where they do not exist: read first, so
    that an account that exists is never inserted (an INSERT into `ledger_accounts` is planned
    with its foreign keys' search of the account's entries: tests/integration/plans/)."""
    unseen = plan.accounts_to_ensure
    if not unseen:
        return
    codes = [account.template.code for account in unseen]
    found = {row[0] for row in driver.fetch(connection, _FIND[len(codes)], (*codes, plan.credit.tenant_id))}
    missing = [account for account in unseen if account.template.code not in found]
    if not missing:
        return
    params: list[Any] = []
    for account in missing:
        template = account.template
        params += [
            plan.credit.tenant_id,
            account.id,
            template.code,
            template.currency,
            template.normal_balance,
            template.no_overdraft,
            plan.credit.created_at_us,
        ]
    driver.execute(connection, _ENSURE[len(missing)], params)


def _apply(connection: Connection, plan: Plan, account: PlannedAccount) -> tuple[str, int]:
    """The account's totals moved by its entry, checked as `postings._apply` checks them:
    (its id, the entry's sequence number)."""
    template, amount_minor = account.template, plan.credit.amount_minor
    delta = Totals(amount_minor, 0, 0, 0) if template.normal_balance == "debit" else Totals(0, amount_minor, 0, 0)
    rows = driver.fetch(
        connection,
        _APPLY,
        (
            delta.debits_posted_minor,
            delta.credits_posted_minor,
            template.code,
            plan.credit.tenant_id,
            bound_before_adding(delta.debits_posted_minor, TOTAL_MINOR_MAX),
            bound_before_adding(delta.credits_posted_minor, TOTAL_MINOR_MAX),
        ),
    )
    if not rows:
        raise Refused(f"{template.code}: missing, or past the range of a total")
    account_id, currency, normal_balance, system, *figures, entries_count = rows[0]
    if (currency, normal_balance, bool(system)) != (template.currency, template.normal_balance, True):
        raise Refused(f"{template.code} is not the credits account the plan expects")
    if account.known and account_id != account.id:
        raise Refused(f"{template.code}: the cached id is another database's")
    after = Totals(*figures)
    before = Totals(
        after.debits_posted_minor - delta.debits_posted_minor,
        after.credits_posted_minor - delta.credits_posted_minor,
        after.debits_pending_minor,
        after.credits_pending_minor,
    )
    if grows_past(before, after, normal_balance) is not None:
        raise Refused(f"{template.code} would pass the balance limit")
    if template.no_overdraft and breaks_no_overdraft(after, normal_balance):
        raise Refused(f"{template.code} would be overdrawn")
    return str(account_id), int(entries_count)


def _entry_params(plan: Plan, account_ids: dict[str, tuple[str, int]]) -> list[Any]:
    credit = plan.credit
    params: list[Any] = []
    for entry in plan.entries:
        account_id, sequence = account_ids[entry.account_code]
        params += [
            credit.tenant_id,
            entry.id,
            credit.transfer_id,
            account_id,
            entry.direction,
            entry.amount_minor,
            credit.currency,
            sequence,
            credit.created_at_us,
        ]
    return params
