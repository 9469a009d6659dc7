"""The money invariants, one SQL query each (docs/invariants.md defines every one).

Every windowed check examines one window of its subjects, in primary-key order: those whose
key `(tenant_id, id)` lies in `(:after_t, :after_i) < key <= (:upto_t, :upto_i)`, a window of
at most PAYCORE_INVARIANTS_ROWS_MAX subjects chosen by `repository.window`. Each query returns
only problems, as `(tenant_id, subject_id, figures...)`; `describe` turns the figures into the
finding's detail. `currency_sum_nonzero` and `system_account_balance` are the checks that are not
windowed: one aggregate per run (a sum cannot be checked in pieces). The checks of the books
against the flows' states are in `books.py`.

The queries run on SQLite and PostgreSQL alike (row-value comparisons: SQLite >= 3.15).
"""

from __future__ import annotations

from typing import Final

from paycore.invariants import books
from paycore.invariants.types import Check
from paycore.invariants.types import window_of as _window
from paycore.ledger.limits import BALANCE_LIMIT_MINOR
from paycore.ledger.service import recomputed_totals

# posted/pending/available (paycore.ledger.balances.balance_of) from an account's cached totals
_FIGURES = """
    CASE WHEN a.normal_balance = 'credit' THEN a.credits_posted_minor - a.debits_posted_minor
         ELSE a.debits_posted_minor - a.credits_posted_minor END AS posted,
    CASE WHEN a.normal_balance = 'credit' THEN a.credits_pending_minor - a.debits_pending_minor
         ELSE a.debits_pending_minor - a.credits_pending_minor END AS pending,
    CASE WHEN a.normal_balance = 'credit'
         THEN CAST(a.credits_posted_minor AS NUMERIC) - a.debits_posted_minor - a.debits_pending_minor
         ELSE CAST(a.debits_posted_minor AS NUMERIC) - a.credits_posted_minor - a.credits_pending_minor
    END AS available
"""

# A posted transfer (a plain transfer or a post) that no later transfer reverses.
# What a customer paid: a payment's amount, or what a manual payment captured (SPEC §6.1; as
# `payments.schemas.captured_minor` and the refund ceiling read it).
_PAID = "COALESCE(p.amount_captured_minor, p.capture_requested_minor, p.amount_minor)"
_PAID_COLUMNS = "p.amount_captured_minor, p.capture_requested_minor, p.amount_minor"
_STANDING = """
    t.kind IN ('transfer', 'post')
    AND NOT EXISTS (SELECT 1 FROM ledger_transfers r WHERE r.tenant_id = t.tenant_id AND r.reverses_id = t.id)
"""

_LEDGER: Final[tuple[Check, ...]] = (
    Check(
        "transfer_unbalanced",
        "transfer",
        "ledger_transfers",
        f"""
        SELECT e.tenant_id, e.transfer_id, e.currency,
               SUM(CASE e.direction WHEN 'debit' THEN e.amount_minor ELSE -e.amount_minor END) AS difference
        FROM ledger_entries e
        WHERE {_window("e", "transfer_id")}
        GROUP BY e.tenant_id, e.transfer_id, e.currency
        HAVING SUM(CASE e.direction WHEN 'debit' THEN e.amount_minor ELSE -e.amount_minor END) <> 0
        """,
        lambda row: f"debits minus credits in {row[2]}: {row[3]}",
    ),
    Check(
        "entry_currency_mismatch",
        "account",
        "ledger_accounts",
        f"""
        SELECT a.tenant_id, a.id, a.currency, COUNT(*) AS entries
        FROM ledger_accounts a
        JOIN ledger_entries e ON e.tenant_id = a.tenant_id AND e.account_id = a.id
        WHERE {_window("a")} AND e.currency <> a.currency
        GROUP BY a.tenant_id, a.id, a.currency
        """,
        lambda row: f"{row[3]} entries in another currency than the account's {row[2]}",
    ),
    Check(
        "account_totals_mismatch",
        "account",
        "ledger_accounts",
        f"""
        SELECT a.tenant_id, a.id,
               a.debits_posted_minor, a.credits_posted_minor, a.debits_pending_minor, a.credits_pending_minor,
               COALESCE(x.dp, 0), COALESCE(x.cp, 0), COALESCE(x.dq, 0), COALESCE(x.cq, 0)
        FROM ledger_accounts a
        LEFT JOIN ({recomputed_totals(_window("e", "account_id"))}) x
            ON x.tenant_id = a.tenant_id AND x.account_id = a.id
        WHERE {_window("a")}
          AND (a.debits_posted_minor <> COALESCE(x.dp, 0) OR a.credits_posted_minor <> COALESCE(x.cp, 0)
            OR a.debits_pending_minor <> COALESCE(x.dq, 0) OR a.credits_pending_minor <> COALESCE(x.cq, 0))
        """,
        lambda row: f"cached totals {tuple(row[2:6])} != recomputed from entries {tuple(row[6:10])}",
    ),
    Check(
        "entry_sequence_gap",
        "account",
        "ledger_accounts",
        f"""
        SELECT a.tenant_id, a.id, a.entries_count, COALESCE(x.n, 0), COALESCE(x.top, 0)
        FROM ledger_accounts a
        LEFT JOIN (
            SELECT e.tenant_id, e.account_id, COUNT(*) AS n, MAX(e.account_sequence) AS top
            FROM ledger_entries e WHERE {_window("e", "account_id")}
            GROUP BY e.tenant_id, e.account_id
        ) x ON x.tenant_id = a.tenant_id AND x.account_id = a.id
        WHERE {_window("a")}
          AND (a.entries_count <> COALESCE(x.n, 0) OR COALESCE(x.top, 0) <> COALESCE(x.n, 0))
        """,
        lambda row: f"entries_count {row[2]}, {row[3]} entries, highest sequence {row[4]}",
    ),
    Check(
        "hold_overposted",
        "transfer",
        "ledger_transfers",
        f"""
        SELECT tenant_id, id, held, posted FROM (
            SELECT p.tenant_id, p.id,
                (SELECT SUM(e.amount_minor) FROM ledger_entries e
                 WHERE e.tenant_id = p.tenant_id AND e.transfer_id = p.id AND e.direction = 'debit') AS held,
                (SELECT SUM(e.amount_minor) FROM ledger_entries e
                 WHERE e.tenant_id = r.tenant_id AND e.transfer_id = r.id AND e.direction = 'debit') AS posted
            FROM ledger_transfers p
            JOIN ledger_transfers r ON r.tenant_id = p.tenant_id AND r.pending_id = p.id AND r.kind = 'post'
            WHERE {_window("p")} AND p.kind = 'pending'
        ) holds
        WHERE posted > held
        """,
        lambda row: f"a hold of {row[2]} was posted for {row[3]}",
    ),
    Check(
        "currency_sum_nonzero",
        "currency",
        None,
        """
        SELECT tenant_id, currency,
               SUM(debits_posted_minor) - SUM(credits_posted_minor) AS posted_difference,
               SUM(debits_pending_minor) - SUM(credits_pending_minor) AS pending_difference
        FROM ledger_accounts
        GROUP BY tenant_id, currency
        HAVING SUM(debits_posted_minor) <> SUM(credits_posted_minor)
            OR SUM(debits_pending_minor) <> SUM(credits_pending_minor)
        """,
        lambda row: f"the tenant's accounts do not sum to zero: posted off by {row[2]}, pending off by {row[3]}",
    ),
    Check(
        "balance_over_max",
        "account",
        "ledger_accounts",
        f"""
        SELECT tenant_id, id, posted, pending, available FROM (
            SELECT a.tenant_id, a.id, {_FIGURES}
            FROM ledger_accounts a
            WHERE {_window("a")}
        ) figures
        WHERE posted > {BALANCE_LIMIT_MINOR} OR posted < -{BALANCE_LIMIT_MINOR}
           OR pending > {BALANCE_LIMIT_MINOR} OR pending < -{BALANCE_LIMIT_MINOR}
           OR available > {BALANCE_LIMIT_MINOR} OR available < -{BALANCE_LIMIT_MINOR}
        """,
        lambda row: f"posted {row[2]}, pending {row[3]}, available {row[4]}: past 2^53 - 1",
    ),
    Check(
        "payment_charged_twice",
        "payment",
        "payments",
        f"""
        SELECT p.tenant_id, p.id, COUNT(*) AS posted
        FROM payments p
        JOIN ledger_transfers t ON t.reference_id = p.id AND t.tenant_id = p.tenant_id
            AND t.reference_type IN ('payment', 'payout') AND t.reference_type = 'payment' AND t.owner_id = p.id
        WHERE {_window("p")} AND {_STANDING}
          AND EXISTS (
            SELECT 1 FROM ledger_entries e
            JOIN ledger_accounts c ON c.tenant_id = e.tenant_id AND c.id = e.account_id
            WHERE e.tenant_id = t.tenant_id AND e.transfer_id = t.id AND e.direction = 'debit'
              AND c.code = 'processor.clearing.' || p.currency)
        GROUP BY p.tenant_id, p.id
        HAVING COUNT(*) > 1
        """,
        lambda row: f"{row[2]} posted ledger transfers take the payment from the processor clearing account",
        duplicate_movement=True,
    ),
    Check(
        "refund_over_payment",
        "payment",
        "payments",
        f"""
        SELECT p.tenant_id, p.id, {_PAID} AS paid, p.refunded_minor, COALESCE(SUM(r.amount_minor), 0) AS counted,
            p.disputed_minor
        FROM payments p
        LEFT JOIN refunds r ON r.tenant_id = p.tenant_id AND r.payment_id = p.id
            AND r.status NOT IN ('failed', 'canceled')
        WHERE {_window("p")}
        GROUP BY p.tenant_id, p.id, {_PAID_COLUMNS}, p.refunded_minor, p.disputed_minor
        HAVING COALESCE(SUM(r.amount_minor), 0) + p.disputed_minor > {_PAID}
            OR p.refunded_minor + p.disputed_minor > {_PAID}
        """,
        lambda row: (
            f"payment of {row[2]} paid: refunded_minor {row[3]}, refunds counted by rule zero {row[4]},"
            f" disputed_minor {row[5]} (SPEC §6.2: refunds plus disputed money)"
        ),
    ),
    Check(
        "payout_sent_twice",
        "payout",
        "payouts",
        f"""
        SELECT o.tenant_id, o.id, COUNT(*) AS posted
        FROM payouts o
        JOIN ledger_transfers t ON t.reference_id = o.id AND t.tenant_id = o.tenant_id
            AND t.reference_type IN ('payment', 'payout') AND t.reference_type = 'payout' AND t.owner_id = o.id
        WHERE {_window("o")} AND {_STANDING}
          AND EXISTS (
            SELECT 1 FROM ledger_entries e
            WHERE e.tenant_id = t.tenant_id AND e.transfer_id = t.id AND e.direction = 'debit'
              AND e.account_id = o.source_account_id)
        GROUP BY o.tenant_id, o.id
        HAVING COUNT(*) > 1
        """,
        lambda row: f"{row[2]} posted ledger transfers take the payout from its source account",
        duplicate_movement=True,
    ),
)

# The books' own checks, then the books against the flows' states (books.py).
CHECKS: Final[tuple[Check, ...]] = (*_LEDGER, *books.CHECKS)
NAMES: Final = tuple(check.name for check in CHECKS)
DUPLICATE_MOVEMENTS: Final = tuple(check.name for check in CHECKS if check.duplicate_movement)
assert len(set(NAMES)) == len(NAMES)
