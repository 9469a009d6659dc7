"""Books against states: the ledger checked against what each flow's status says it did
(docs/invariants.md, "Books against states").

A balanced ledger can still be wrong: a payout `scheduled` whose hold was voided lets the same
money be paid out twice, a `settled` payout whose post was reversed gave the money back, a
refund `succeeded` with its hold voided left the merchant the money. The books' own checks
(`checks.py`, `paycore ledger verify`) see nothing there, because every transfer balances. These
checks ask each flow object whether its transfer is in the state its status implies, and each
system account whether it holds what the flows' states add up to:

- `payment_books_state`, `refund_books_state`, `payout_books_state`, `credit_books_state`: the
  object's transfer (`transfer_id`: the hold, or a credit's or an imported payment's posted
  transfer) is owned by the object and is, by status, `pending` (an open hold), `posted` (its
  post, or the plain transfer, not reversed), `voided` (voided or expired), or `reversed`; and
  it holds, and posted, the object's amount. `EXPECTED` is the table, per status.
- `system_account_unowned`: a transfer no flow owns has an entry on a system account (the
  database refuses that since migration 0024; this finds what was written before, or behind
  the triggers).
- `system_account_balance` (one aggregate, not windowed): `payouts.in_transit` holds exactly
  the sent payouts posted and the scheduled to in-doubt ones pending; `credits.balance` and
  `credits.issued` the credits granted; `processor.clearing` the payments in flight pending
  (debit) and the refunds in flight (credit), and, posted, the succeeded payments less the
  succeeded refunds less the processor's fees booked less what disputes withdrew and did not
  reinstate (SPEC §6.2).
- `dispute_books_state`: a dispute's transfers are its own and moved what its status says: a
  chargeback's withdrawal (amount and fee, once), a won one's reinstatement (the amount), none
  for an inquiry.

Each query returns only problems, as the other checks do (`checks.Check`). The statuses are the
stored words of each domain's transition table (`states.py`); a test holds `EXPECTED` to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from paycore.invariants.types import Check, window_of

ALL: Final = "1 = 1"  # the window of `ledger verify`: every subject

# Per flow table, each status and the states its transfer may be in.
EXPECTED: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "payments": {
        "processing": ("pending",),
        "in_doubt": ("pending",),
        "requires_capture": ("pending",),  # an open authorization (SPEC §6.1)
        "succeeded": ("posted",),
        "failed": ("voided",),
        "canceled": ("voided",),  # an authorization canceled or expired
    },
    "refunds": {
        "requires_approval": ("pending",),
        "pending": ("pending",),
        "processing": ("pending",),
        "in_doubt": ("pending",),
        "succeeded": ("posted",),
        "failed": ("voided",),
        "canceled": ("voided",),
    },
    "payouts": {
        "scheduled": ("pending",),
        "queued": ("pending",),
        "processing": ("pending",),
        "in_doubt": ("pending",),
        "sent": ("posted",),
        "succeeded": ("posted",),  # the stored word of `settled`
        "returned": ("posted",),  # a return is an adjustment of its own, the post stands
        "failed": ("voided", "reversed"),  # refused before the bank took it, or rejected after
        "canceled": ("voided",),
    },
    "credits": {"": ("posted",)},  # a credit has no status: it is granted once
}
_SUBJECT_TYPE: Final = {"payments": "payment", "refunds": "refund", "payouts": "payout", "credits": "credit"}
# What an object's post moved (of its hold, on alias `o`): its amount, but a manual payment's
# capture posts what was captured and releases the rest (SPEC §6.1; as
# `payments.schemas.captured_minor` reads it).
_CAPTURED: Final = "COALESCE(o.amount_captured_minor, o.capture_requested_minor, o.amount_minor)"
_MOVED: Final = {"payments": _CAPTURED}

# The state of the object's transfer `t`, with `r` its resolution and `x` the reversal of what
# moved the money (the post of a hold, else the transfer itself).
_BOOKS = """
    CASE
        WHEN t.id IS NULL THEN 'missing'
        WHEN t.owner_id IS NULL OR t.owner_id <> o.id THEN 'not_owned'
        WHEN t.kind = 'pending' AND r.id IS NULL THEN 'pending'
        WHEN t.kind = 'pending' AND r.kind <> 'post' THEN 'voided'
        WHEN t.kind NOT IN ('pending', 'transfer') THEN t.kind
        WHEN x.id IS NULL THEN 'posted'
        ELSE 'reversed'
    END"""


def _debits(transfer: str) -> str:
    return (
        "(SELECT SUM(e.amount_minor) FROM ledger_entries e"
        f" WHERE e.tenant_id = {transfer}.tenant_id AND e.transfer_id = {transfer}.id AND e.direction = 'debit')"
    )


def flow_state_sql(table: str, where: str) -> str:
    """The objects of `table` (within `where`, on alias `o`) whose transfer is not in a state
    their status allows, or moved another amount: (tenant_id, id, status, transfer_id, books,
    held, moved, amount)."""
    expected = EXPECTED[table]
    status = "o.status" if table != "credits" else "''"
    allowed = " OR ".join(
        f"(status = '{name}' AND books IN ({', '.join(repr(state) for state in states)}))"
        for name, states in expected.items()
    )
    return f"""
    SELECT tenant_id, id, status, transfer_id, books, held, moved, amount FROM (
        SELECT o.tenant_id, o.id, {status} AS status, o.transfer_id, o.amount_minor AS amount,
            {_MOVED.get(table, "o.amount_minor")} AS moved_amount,
            {_BOOKS} AS books,
            {_debits("t")} AS held,
            CASE WHEN t.kind = 'pending' AND r.kind = 'post' THEN {_debits("r")} ELSE {_debits("t")} END AS moved
        FROM {table} o
        LEFT JOIN ledger_transfers t ON t.tenant_id = o.tenant_id AND t.id = o.transfer_id
        LEFT JOIN ledger_transfers r ON r.tenant_id = t.tenant_id AND r.pending_id = t.id
        LEFT JOIN ledger_transfers x ON x.tenant_id = t.tenant_id
            AND x.reverses_id = CASE WHEN t.kind = 'pending' THEN r.id ELSE t.id END
        WHERE {where} AND o.transfer_id IS NOT NULL
    ) found
    WHERE NOT ({allowed})
       OR held IS NULL OR held <> amount
       OR (books IN ('posted', 'reversed') AND (moved IS NULL OR moved <> moved_amount))
    """


def _describe_flow(row: Sequence[Any]) -> str:
    _, _, status, transfer_id, books, held, moved, amount = row
    said = f"status {status}" if status else "granted"
    return f"{said}, amount {amount}: its transfer {transfer_id} is {books}, held {held}, moved {moved}"


def unowned_sql(where: str) -> str:
    """Transfers (within `where`, alias `t`) that no flow owns with an entry on a system
    account: (tenant_id, transfer_id, an account code)."""
    return f"""
    SELECT t.tenant_id, t.id, MIN(a.code) AS code
    FROM ledger_transfers t
    JOIN ledger_entries e ON e.tenant_id = t.tenant_id AND e.transfer_id = t.id
    JOIN ledger_accounts a ON a.tenant_id = e.tenant_id AND a.id = e.account_id
    WHERE {where} AND t.owner_id IS NULL AND a.system
    GROUP BY t.tenant_id, t.id
    """


def _sum_of(table: str, statuses: Sequence[str], extra: str = "", amount: str = "o.amount_minor") -> str:
    """What the tenant's objects of `table` in `statuses` amount to in the account's currency."""
    listed = ", ".join(repr(status) for status in statuses)
    return (
        f"(SELECT COALESCE(SUM({amount}), 0) FROM {table} o WHERE o.tenant_id = a.tenant_id"
        f" AND o.currency = a.currency AND o.status IN ({listed}){extra})"
    )


_HELD = ("scheduled", "queued", "processing", "in_doubt")
_IN_FLIGHT_REFUNDS = ("requires_approval", "pending", "processing", "in_doubt")
_CREDITS = (
    "(SELECT COALESCE(SUM(o.amount_minor), 0) FROM credits o"
    " WHERE o.tenant_id = a.tenant_id AND o.currency = a.currency)"
)
_SENT_REFUNDS = " AND o.transfer_id IS NOT NULL"  # a refund with a hold (the replay's have none)
# What disputes took from the clearing account and did not give back (docs/ledger.md, "Disputes").
_DISPUTED = (
    "(SELECT COALESCE(SUM(d.withdrawn_minor - d.reinstated_minor), 0) FROM disputes d"
    " WHERE d.tenant_id = a.tenant_id AND d.currency = a.currency)"
)
_FEES = """(SELECT COALESCE(SUM(f.debits_posted_minor - f.credits_posted_minor), 0) FROM ledger_accounts f
        WHERE f.tenant_id = a.tenant_id AND f.code = 'processor.fees.' || a.currency)"""
# (account code prefix, figure, the account's figure, what the flows say it must be)
_SYSTEM_FIGURES: Final = (
    ("payouts.in_transit", "posted", "a.credits_posted_minor - a.debits_posted_minor", _sum_of("payouts", ("sent",))),
    ("payouts.in_transit", "pending", "a.credits_pending_minor - a.debits_pending_minor", _sum_of("payouts", _HELD)),
    ("credits.balance", "posted", "a.credits_posted_minor - a.debits_posted_minor", _CREDITS),
    ("credits.issued", "posted", "a.debits_posted_minor - a.credits_posted_minor", _CREDITS),
    (
        "processor.clearing",
        "pending debits",
        "a.debits_pending_minor",
        _sum_of("payments", ("processing", "in_doubt", "requires_capture")),
    ),
    (
        "processor.clearing",
        "pending credits",
        "a.credits_pending_minor",
        _sum_of("refunds", _IN_FLIGHT_REFUNDS, _SENT_REFUNDS),
    ),
    (
        "processor.clearing",
        "posted",
        "a.debits_posted_minor - a.credits_posted_minor",
        f"{_sum_of('payments', ('succeeded',), amount=_CAPTURED)}"
        f" - {_sum_of('refunds', ('succeeded',), _SENT_REFUNDS)} - {_FEES} - {_DISPUTED}",
    ),
)


def system_balance_sql() -> str:
    """Every system account figure that differs from what the flows' states add up to:
    (tenant_id, account_id, code, figure, actual, expected)."""
    parts = [
        f"""SELECT a.tenant_id, a.id, a.code, '{figure}' AS figure, {actual} AS actual, {expected} AS expected
        FROM ledger_accounts a WHERE a.system AND a.code = '{prefix}.' || a.currency"""
        for prefix, figure, actual, expected in _SYSTEM_FIGURES
    ]
    return f"SELECT * FROM ({' UNION ALL '.join(parts)}) figures WHERE actual <> expected"


def _moved_by(column: str) -> str:
    """What the dispute's transfer in `column` debited, all of it owned by the dispute (else NULL)."""
    return (
        "(SELECT SUM(e.amount_minor) FROM ledger_transfers t JOIN ledger_entries e"
        " ON e.tenant_id = t.tenant_id AND e.transfer_id = t.id AND e.direction = 'debit'"
        f" WHERE t.tenant_id = d.tenant_id AND t.id = d.{column} AND t.owner_id = d.id)"
    )


def dispute_books_sql(where: str) -> str:
    """Disputes (within `where`, alias `d`) whose transfers do not match their status:
    (tenant_id, id, status, withdrawn_minor, withdrawn by the ledger, reinstated_minor, reinstated by the ledger)."""
    chargeback = "d.status IN ('needs_response', 'under_review', 'won', 'lost')"
    return f"""
    SELECT tenant_id, id, status, withdrawn_minor, withdrawn, reinstated_minor, reinstated FROM (
        SELECT d.tenant_id, d.id, d.status, d.amount_minor, d.fee_minor, d.withdrawn_minor, d.reinstated_minor,
            COALESCE({_moved_by("withdrawal_transfer_id")}, 0) AS withdrawn,
            COALESCE({_moved_by("reinstatement_transfer_id")}, 0) AS reinstated,
            CASE WHEN {chargeback} THEN 1 ELSE 0 END AS is_chargeback
        FROM disputes d WHERE {where}
    ) found
    WHERE withdrawn <> withdrawn_minor OR reinstated <> reinstated_minor
       OR (is_chargeback = 1 AND withdrawn_minor <> amount_minor + fee_minor)
       OR (is_chargeback = 0 AND withdrawn_minor <> 0)
       OR (status = 'won' AND reinstated_minor <> amount_minor)
       OR (status <> 'won' AND reinstated_minor <> 0)
    """


def _describe_dispute(row: Sequence[Any]) -> str:
    _, _, status, withdrawn_minor, withdrawn, reinstated_minor, reinstated = row
    return (
        f"status {status}: says withdrawn {withdrawn_minor}, reinstated {reinstated_minor};"
        f" its transfers moved {withdrawn} and {reinstated}"
    )


def _describe_balance(row: Sequence[Any]) -> str:
    return f"{row[2]} {row[3]} is {row[4]}; the flows' states say {row[5]}"


def _flow_check(table: str) -> Check:
    name = f"{_SUBJECT_TYPE[table]}_books_state"
    return Check(
        name,
        _SUBJECT_TYPE[table],
        table,
        flow_state_sql(table, window_of("o")),
        _describe_flow,
        all_sql=flow_state_sql(table, ALL),
    )


def _unowned_check() -> Check:
    describe: Callable[[Sequence[Any]], str] = lambda row: f"no flow owns it, and it moves {row[2]}"  # noqa: E731
    return Check(
        "system_account_unowned",
        "transfer",
        "ledger_transfers",
        unowned_sql(window_of("t")),
        describe,
        all_sql=unowned_sql(ALL),
    )


CHECKS: Final[tuple[Check, ...]] = (
    *(_flow_check(table) for table in EXPECTED),
    _unowned_check(),
    Check(
        "dispute_books_state",
        "dispute",
        "disputes",
        dispute_books_sql(window_of("d")),
        _describe_dispute,
        all_sql=dispute_books_sql(ALL),
    ),
    Check(
        "system_account_balance", "account", None, system_balance_sql(), _describe_balance, all_sql=system_balance_sql()
    ),
)
