"""Property: whatever happens to the ledger, the books stay right.

Random sequences of transfers (simple and multi-entry, some pending with an expiry, some
in batches, some unbalanced or in the wrong currency), posts (full and partial), voids,
reversals and expiry rounds run through the service functions, each in its own
`Database.transaction` with the effect inside a savepoint (as the idempotency layer runs
it), refusals included. After every sequence:

- `verify` finds nothing: every transfer balances per currency, every currency sums to
  zero, every cached balance equals the balance recomputed from the entries;
- no `no_overdraft` account has a negative available balance;
- every refusal wrote nothing (checked inside its own transaction);
- every transfer's status is the one a simple model of the state machine predicts.

Each example runs under a tenant of its own in one database per backend, so the ledger
`verify` checks at the end of an example also holds everything earlier examples left.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, select

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import repository
from paycore.ledger import service as ledger
from paycore.ledger.errors import TransferNotPending, TransferNotReversible
from paycore.ledger.models import accounts as accounts_table
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.verify import verify

# code, currency, normal balance, no_overdraft
CHART = (
    ("cash", "USD", "debit", False),
    ("alice", "USD", "credit", True),
    ("bob", "USD", "credit", True),
    ("fees", "USD", "credit", False),
    ("vault", "USD", "debit", True),
    ("eur.cash", "EUR", "debit", False),
    ("eur.wallet", "EUR", "credit", True),
)
US_PER_S = 1_000_000
_tenants = itertools.count()

account = st.integers(0, len(CHART) - 1)
amount = st.one_of(st.integers(1, 400), st.integers(1, 400), st.just(AMOUNT_MINOR_MAX))
expiry_s = st.none() | st.integers(1, 120)
ref = st.integers(0, 40)  # which earlier transfer an action targets (modulo how many exist)

simple = st.tuples(st.just("simple"), account, account, amount, st.booleans(), expiry_s)
multi = st.tuples(
    st.just("multi"),
    st.lists(st.tuples(account, st.sampled_from(["debit", "credit"]), amount), min_size=1, max_size=5),
    st.booleans(),  # balance it (else it is most likely refused as unbalanced)
    st.booleans(),  # pending
)
batch = st.tuples(st.just("batch"), st.lists(st.tuples(account, account, amount), min_size=1, max_size=3))
post = st.tuples(st.just("post"), ref, st.none() | amount)
void = st.tuples(st.just("void"), ref)
reverse = st.tuples(st.just("reverse"), ref)
tick = st.tuples(st.just("tick"), st.integers(0, 90), st.booleans())  # seconds, run the expiry job
operations = st.lists(st.one_of(simple, simple, multi, batch, post, post, void, reverse, tick), min_size=3, max_size=30)


@dataclass
class Model:
    """What the test expects of each transfer it made: only the state machine, not money."""

    tenant_id: str
    account_ids: list[str]
    now_us: int
    transfers: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    expires_at_us: dict[str, int | None] = field(default_factory=dict)
    reversed_ids: set[str] = field(default_factory=set)
    refusals: int = 0

    def pick(self, index: int) -> str | None:
        return self.transfers[index % len(self.transfers)] if self.transfers else None


def open_chart(database: Database, tenant_id: str, now: int) -> list[str]:
    def work(connection: Connection) -> list[str]:
        return [
            ledger.create_account(
                connection,
                tenant_id,
                code=code,
                currency=currency,
                normal_balance=normal_balance,
                no_overdraft=no_overdraft,
                metadata={},
                now_us=now,
            ).id
            for code, currency, normal_balance, no_overdraft in CHART
        ]

    return database.transaction(work)


def balanced(legs: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """Add legs so that every currency balances (each new leg within the amount bound)."""
    result = list(legs)
    differences: dict[str, int] = {}
    for index, direction, amount_minor in legs:
        currency = CHART[index][1]
        differences[currency] = differences.get(currency, 0) + (amount_minor if direction == "debit" else -amount_minor)
    for currency, difference in sorted(differences.items()):
        target = next(i for i, row in enumerate(CHART) if row[1] == currency and row[3] is False)
        direction = "credit" if difference > 0 else "debit"
        remaining = abs(difference)
        while remaining > 0:
            piece = min(remaining, AMOUNT_MINOR_MAX)
            result.append((target, direction, piece))
            remaining -= piece
    return result


def account_snapshot(connection: Connection, tenant_id: str) -> list[Any]:
    query = select(accounts_table).where(accounts_table.c.tenant_id == tenant_id).order_by(accounts_table.c.id)
    return [tuple(row) for row in connection.execute(query)]


def apply(connection: Connection, model: Model, operation: tuple[Any, ...]) -> None:
    """Run one operation through the service; raise the DomainError of a refusal."""
    kind, tenant, now, ids = operation[0], model.tenant_id, model.now_us, model.account_ids
    if kind == "simple":
        _, debit, credit, amount_minor, pending, expiry = operation
        spec = TransferSpec(
            entries=(EntrySpec(ids[debit], "debit", amount_minor), EntrySpec(ids[credit], "credit", amount_minor)),
            pending=pending,
            currency=CHART[debit][1],
            expires_at_us=None if expiry is None else now + expiry * US_PER_S,
        )
        _created(model, ledger.create_transfer(connection, tenant, spec, now_us=now))
    elif kind == "multi":
        _, legs, balance_it, pending = operation
        legs = balanced(legs) if balance_it else legs
        spec = TransferSpec(entries=tuple(EntrySpec(ids[i], d, a) for i, d, a in legs), pending=pending)
        _created(model, ledger.create_transfer(connection, tenant, spec, now_us=now))
    elif kind == "batch":
        specs = [
            TransferSpec(entries=(EntrySpec(ids[d], "debit", a), EntrySpec(ids[c], "credit", a)), currency=CHART[d][1])
            for d, c, a in operation[1]
        ]
        for transfer in ledger.create_batch(connection, tenant, specs, now_us=now, idempotency_key=None)[1]:
            _created(model, transfer)
    elif kind == "tick":
        model.now_us += operation[1] * US_PER_S
        if not operation[2]:
            return  # time passes, the worker has not run: due holds are still pending
        ledger.expire_due(connection, now_us=model.now_us, limit=1000)
        for transfer_id, status in model.status.items():
            expires = model.expires_at_us[transfer_id]
            if status == "pending" and expires is not None and expires <= model.now_us:
                model.status[transfer_id] = "expired"
    else:
        _act_on_transfer(connection, model, operation)


def _act_on_transfer(connection: Connection, model: Model, operation: tuple[Any, ...]) -> None:
    kind, target = operation[0], model.pick(operation[1])
    if target is None:
        return
    tenant, now, expected = model.tenant_id, model.now_us, model.status[target]
    try:
        if kind == "post":
            result = ledger.post_pending(
                connection, tenant, target, amount_minor=operation[2], now_us=now, owner_id=None
            )
            assert result.status == "posted"
        elif kind == "void":
            result = ledger.void_pending(connection, tenant, target, now_us=now, owner_id=None)
            assert result.status == "voided"
        else:
            reversal = ledger.reverse_transfer(connection, tenant, target, now_us=now, owner_id=None)
            assert reversal.status == "posted" and reversal.reverses_id is not None
    except TransferNotPending:
        assert expected != "pending", (kind, target, expected)
        raise
    except TransferNotReversible:
        assert target in model.reversed_ids or expected not in ("posted",), (target, expected)
        raise
    # Success: what the model allows, and then what the model now expects.
    if kind in ("post", "void"):
        assert expected == "pending", (kind, target, expected)
        model.status[target] = "posted" if kind == "post" else "voided"
    else:
        assert expected == "posted" and target not in model.reversed_ids, (target, expected)
        model.reversed_ids.add(target)
        _created(model, reversal)


def _created(model: Model, transfer: ledger.Transfer) -> None:
    model.transfers.append(transfer.id)
    model.status[transfer.id] = transfer.status
    model.expires_at_us[transfer.id] = transfer.expires_at_us


def run_operation(database: Database, model: Model, operation: tuple[Any, ...]) -> None:
    def work(connection: Connection) -> None:
        before = (account_snapshot(connection, model.tenant_id), repository.count_rows(connection))
        try:
            with connection.begin_nested():
                apply(connection, model, operation)
        except DomainError:
            model.refusals += 1
            # A refusal writes nothing, even though the outer transaction commits.
            after = (account_snapshot(connection, model.tenant_id), repository.count_rows(connection))
            assert after == before, operation

    database.transaction(work)


def check_books(database: Database, model: Model) -> None:
    with database.read() as connection:
        report = verify(connection)
        assert report.ok, report.problems
        for row in connection.execute(select(accounts_table).where(accounts_table.c.tenant_id == model.tenant_id)):
            # Available, from the raw totals (not through the code under test): posted minus
            # outgoing holds, in the account's normal direction.
            if row.normal_balance == "credit":
                available = row.credits_posted_minor - row.debits_posted_minor - row.debits_pending_minor
            else:
                available = row.debits_posted_minor - row.credits_posted_minor - row.credits_pending_minor
            if row.no_overdraft:
                assert available >= 0, row
            assert ledger.get_account(connection, model.tenant_id, row.id).balance.available_minor == available
        for transfer_id, expected in model.status.items():
            assert ledger.get_transfer(connection, model.tenant_id, transfer_id).status == expected, transfer_id


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=operations)
def test_the_books_always_balance(database: Database, operations: list[tuple[Any, ...]]) -> None:
    tenant_id = f"prop{next(_tenants)}"
    start = now_us()
    model = Model(tenant_id=tenant_id, account_ids=open_chart(database, tenant_id, start), now_us=start)
    for operation in operations:
        run_operation(database, model, operation)
    check_books(database, model)


def test_the_model_sees_refusals_and_successes(database: Database) -> None:
    """A fixed sequence through the same machinery, so the property's harness is itself
    shown to tell success from refusal (a harness that refused everything would pass)."""
    tenant_id = f"prop-fixed{next(_tenants)}"
    start = now_us()
    model = Model(tenant_id=tenant_id, account_ids=open_chart(database, tenant_id, start), now_us=start)
    sequence: list[tuple[Any, ...]] = [
        ("simple", 0, 1, 500, False, None),  # cash -> alice 500
        ("simple", 1, 2, 501, False, None),  # refused: insufficient funds
        ("simple", 1, 2, 200, True, 10),  # transfers[1]: hold alice -> bob 200, expires in 10 s
        ("post", 1, 50),  # partial post of the hold
        ("void", 1),  # refused: already posted
        ("reverse", 1),  # transfers[2]: reverses the hold's post
        ("reverse", 1),  # refused: already reversed
        ("simple", 1, 5, 10, False, None),  # refused: currency mismatch
        ("multi", [(1, "debit", 100), (3, "credit", 99)], False, False),  # refused: unbalanced
        ("simple", 1, 2, 100, True, 5),  # transfers[3]: a hold that will expire
        ("tick", 6, False),
        ("post", 3, None),  # refused: expired (the worker has not run yet)
        ("tick", 0, True),  # the worker expires it
        ("void", 3),  # refused: no longer pending
    ]
    for operation in sequence:
        run_operation(database, model, operation)
    assert model.refusals == 7
    assert [model.status[t] for t in model.transfers] == ["posted", "posted", "posted", "expired"]
    check_books(database, model)
    with database.read() as connection:
        alice = ledger.get_account(connection, tenant_id, model.account_ids[1]).balance
        bob = ledger.get_account(connection, tenant_id, model.account_ids[2]).balance
    assert (alice.posted_minor, alice.pending_minor, alice.available_minor) == (500, 0, 500)
    assert (bob.posted_minor, bob.pending_minor, bob.available_minor) == (0, 0, 0)
