"""`paycore ledger verify`: recompute the books from the entries and compare.

Checks, each one SQL query that runs on SQLite and PostgreSQL and returns only problems:
1. every transfer's entries balance per currency;
2. every entry's currency is its account's currency;
3. every account's cached totals equal the totals recomputed from its entries;
4. the sum of all posted (and of all pending) balances is zero per currency;
5. no post moved more than its hold;
6. every account's entries are numbered 1..entries_count, without gaps (statement order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, text

_LIMIT_PER_CHECK = 100  # a broken ledger is reported by example, not dumped whole

UNBALANCED_TRANSFERS = text(
    """
    SELECT tenant_id, transfer_id, currency,
           SUM(CASE direction WHEN 'debit' THEN amount_minor ELSE -amount_minor END) AS difference
    FROM ledger_entries
    GROUP BY tenant_id, transfer_id, currency
    HAVING SUM(CASE direction WHEN 'debit' THEN amount_minor ELSE -amount_minor END) <> 0
    LIMIT :limit
    """
)

CURRENCY_MISMATCHES = text(
    """
    SELECT e.tenant_id, e.id, e.currency, a.currency AS account_currency
    FROM ledger_entries e
    JOIN ledger_accounts a ON a.tenant_id = e.tenant_id AND a.id = e.account_id
    WHERE e.currency <> a.currency
    LIMIT :limit
    """
)


def recomputed_totals(where: str = "") -> str:
    """Each account's four totals recomputed from its entries, as a subquery with the columns
    `tenant_id, account_id, dp, cp, dq, cq`, over the entries `where` selects (alias `e`; all
    of them by default). Posted: entries of plain transfers and of posts. Pending: entries of
    holds not yet resolved. Also used by the invariant job (paycore.invariants), windowed."""
    return f"""
    SELECT e.tenant_id, e.account_id,
        SUM(CASE WHEN t.kind IN ('transfer', 'post') AND e.direction = 'debit'
                 THEN e.amount_minor ELSE 0 END) AS dp,
        SUM(CASE WHEN t.kind IN ('transfer', 'post') AND e.direction = 'credit'
                 THEN e.amount_minor ELSE 0 END) AS cp,
        SUM(CASE WHEN t.kind = 'pending' AND r.id IS NULL AND e.direction = 'debit'
                 THEN e.amount_minor ELSE 0 END) AS dq,
        SUM(CASE WHEN t.kind = 'pending' AND r.id IS NULL AND e.direction = 'credit'
                 THEN e.amount_minor ELSE 0 END) AS cq
    FROM ledger_entries e
    JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id
    LEFT JOIN ledger_transfers r ON r.tenant_id = t.tenant_id AND r.pending_id = t.id
    {f"WHERE {where}" if where else ""}
    GROUP BY e.tenant_id, e.account_id
"""


CACHED_TOTAL_MISMATCHES = text(
    f"""
    SELECT a.tenant_id, a.id,
           a.debits_posted_minor, a.credits_posted_minor, a.debits_pending_minor, a.credits_pending_minor,
           COALESCE(x.dp, 0) AS dp, COALESCE(x.cp, 0) AS cp, COALESCE(x.dq, 0) AS dq, COALESCE(x.cq, 0) AS cq
    FROM ledger_accounts a
    LEFT JOIN ({recomputed_totals()}) x ON x.tenant_id = a.tenant_id AND x.account_id = a.id
    WHERE a.debits_posted_minor <> COALESCE(x.dp, 0)
       OR a.credits_posted_minor <> COALESCE(x.cp, 0)
       OR a.debits_pending_minor <> COALESCE(x.dq, 0)
       OR a.credits_pending_minor <> COALESCE(x.cq, 0)
    LIMIT :limit
    """
)

NONZERO_CURRENCY_SUMS = text(
    """
    SELECT currency,
           SUM(debits_posted_minor) - SUM(credits_posted_minor) AS posted_difference,
           SUM(debits_pending_minor) - SUM(credits_pending_minor) AS pending_difference
    FROM ledger_accounts
    GROUP BY currency
    HAVING SUM(debits_posted_minor) <> SUM(credits_posted_minor)
        OR SUM(debits_pending_minor) <> SUM(credits_pending_minor)
    """
)

OVERPOSTED_HOLDS = text(
    """
    SELECT p.tenant_id, p.id,
           (SELECT SUM(amount_minor) FROM ledger_entries WHERE tenant_id = p.tenant_id
                AND transfer_id = p.id AND direction = 'debit') AS held,
           (SELECT SUM(amount_minor) FROM ledger_entries WHERE tenant_id = r.tenant_id
                AND transfer_id = r.id AND direction = 'debit') AS posted
    FROM ledger_transfers p
    JOIN ledger_transfers r ON r.tenant_id = p.tenant_id AND r.pending_id = p.id AND r.kind = 'post'
    WHERE (SELECT SUM(amount_minor) FROM ledger_entries WHERE tenant_id = r.tenant_id
                AND transfer_id = r.id AND direction = 'debit')
        > (SELECT SUM(amount_minor) FROM ledger_entries WHERE tenant_id = p.tenant_id
                AND transfer_id = p.id AND direction = 'debit')
    LIMIT :limit
    """
)

ENTRY_SEQUENCE_MISMATCHES = text(
    """
    SELECT a.tenant_id, a.id, a.entries_count, COALESCE(x.n, 0) AS n, COALESCE(x.top, 0) AS top
    FROM ledger_accounts a
    LEFT JOIN (
        SELECT tenant_id, account_id, COUNT(*) AS n, MAX(account_sequence) AS top
        FROM ledger_entries GROUP BY tenant_id, account_id
    ) x ON x.tenant_id = a.tenant_id AND x.account_id = a.id
    WHERE a.entries_count <> COALESCE(x.n, 0) OR COALESCE(x.top, 0) <> COALESCE(x.n, 0)
    LIMIT :limit
    """
)

COUNTS = text(
    """
    SELECT (SELECT COUNT(*) FROM ledger_accounts), (SELECT COUNT(*) FROM ledger_transfers),
           (SELECT COUNT(*) FROM ledger_entries)
    """
)


@dataclass
class VerifyReport:
    accounts: int = 0
    transfers: int = 0
    entries: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(connection: Connection) -> VerifyReport:
    accounts, transfers, entries = connection.execute(COUNTS).one()
    report = VerifyReport(accounts=accounts, transfers=transfers, entries=entries)
    params = {"limit": _LIMIT_PER_CHECK}
    for row in connection.execute(UNBALANCED_TRANSFERS, params):
        report.problems.append(
            f"transfer {row.tenant_id}/{row.transfer_id} is unbalanced in {row.currency} by {row.difference}"
        )
    for row in connection.execute(CURRENCY_MISMATCHES, params):
        report.problems.append(
            f"entry {row.tenant_id}/{row.id} is in {row.currency} but its account holds {row.account_currency}"
        )
    for row in connection.execute(CACHED_TOTAL_MISMATCHES, params):
        cached = (
            row.debits_posted_minor,
            row.credits_posted_minor,
            row.debits_pending_minor,
            row.credits_pending_minor,
        )
        report.problems.append(
            f"account {row.tenant_id}/{row.id}: cached totals {cached} != recomputed {(row.dp, row.cp, row.dq, row.cq)}"
        )
    for row in connection.execute(NONZERO_CURRENCY_SUMS):
        report.problems.append(
            f"currency {row.currency} does not sum to zero: posted off by {row.posted_difference},"
            f" pending off by {row.pending_difference}"
        )
    for row in connection.execute(ENTRY_SEQUENCE_MISMATCHES, params):
        report.problems.append(
            f"account {row.tenant_id}/{row.id}: entries_count {row.entries_count}, {row.n} entries,"
            f" highest sequence {row.top}"
        )
    for row in connection.execute(OVERPOSTED_HOLDS, params):
        report.problems.append(f"hold {row.tenant_id}/{row.id} of {row.held} was posted for {row.posted}")
    return report
