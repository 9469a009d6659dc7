"""A payout's cancel (`POST /v1/payouts/{payout_id}/cancel`) on the data plane (ADR 0026 step
3, issue 39): what it costs in SQL, counted (never timed) on each database; that it writes
exactly the rows the reference path (`service.cancel` inside `idempotency.run`) writes for the
same cancel; that everything but a success written at once is the reference path's to decide;
and that processes canceling one payout void its hold once.

Counted as tests/integration/payouts/test_create_data_plane.py counts, around the phase alone
(`cancel.cancel`, below the HTTP edge). `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.
"""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.audit import rows as audit_rows
from paycore.audit import service as audit
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.payouts import cancel, cancel_plan, cancel_repository, lifecycle, rounds, schemas, service, states
from paycore.payouts.errors import PayoutNotCancelable, PayoutNotFound
from paycore.payouts.types import Payout
from tests.integration.payouts.test_create_data_plane import ACTOR, NOW_US, funded, new, plane, rows_of
from tests.integration.payouts.test_create_data_plane import scope as create_scope
from tests.support.payouts import funded_source, load
from tests.support.payouts import schedule as support_schedule
from tests.support.rows import row_counts
from tests.support.statements import counting

RETENTION_US = 86_400_000_000
# The phase alone, a scheduled payout canceled. Both: the payout's read and its events' read
# (the plan's: the snapshot and the answer's history). PostgreSQL: they and the one call in
# autocommit (no BEGIN, no COMMIT of the client's). SQLite: BEGIN IMMEDIATE, the two reads, the
# key's claim with its answer, the compare-and-set, the void, the two accounts' pending totals,
# the state event, and the group's commit.
STATEMENTS = {"sqlite": 9, "postgresql": 3}
COMMITS = {"sqlite": 1, "postgresql": 0}
# The reference path, the same cancel: the key's claim, the payout's read for update, its
# compare-and-set, the hold's read (with its resolution and entries), the void, the two
# accounts' facts read, their totals, the state event, the history's read and the key's
# answer: 11 statements and a commit (and BEGIN IMMEDIATE on SQLite).
REFERENCE_STATEMENTS = {"sqlite": 12, "postgresql": 11}


def scope(tenant_id: str, key: str, *, fingerprint: str = "c" * 64, now_us: int = NOW_US + 100) -> KeyScope:
    return KeyScope(tenant_id, key, fingerprint, now_us=now_us, expires_at_us=now_us + RETENTION_US)


class Reference:
    """The reference path, as the route runs it (`routers.payouts.cancel_answer`'s effect),
    counted: how often the data plane handed a cancel to it."""

    def __init__(self, database: Database, key_scope: KeyScope, payout_id: str) -> None:
        self.database, self.scope, self.payout_id, self.calls = database, key_scope, payout_id, 0

    def effect(self, connection: Connection) -> Outcome:
        tenant_id, now_us = self.scope.tenant_id, self.scope.now_us
        payout = service.cancel(connection, tenant_id, self.payout_id, now_us=now_us, actor=ACTOR)
        return Outcome(200, dumps(schemas.payout_json(payout, service.history(connection, payout))))

    def __call__(self) -> Outcome:
        self.calls += 1
        outcome, _ = idempotency.run(self.database, self.scope, self.effect, render_refusal)
        return outcome


def canceled(database: Database, key_scope: KeyScope, payout_id: str) -> tuple[Outcome, int]:
    """The phase's answer, and how often it ran the reference path."""
    reference = Reference(database, key_scope, payout_id)
    answer = cancel.cancel(database, key_scope, payout_id, actor=ACTOR, encode=dumps, reference=reference)
    return answer, reference.calls


def never() -> Outcome:
    raise AssertionError("the data plane was expected to cancel this payout itself")


def cancel_on_plane(database: Database, key_scope: KeyScope, payout_id: str) -> Outcome:
    answer = cancel.cancel(database, key_scope, payout_id, actor=ACTOR, encode=dumps, reference=never)
    assert answer.status == 200
    return answer


def scheduled(database: Database, tenant_id: str, *, amount_minor: int = 2_500, key: str = "p") -> str:
    """A scheduled payout of the tenant (its source funded): its id."""
    source = funded(database, tenant_id, 10_000)
    answer = plane(database, create_scope(tenant_id, key), new(source, amount_minor, key=key))
    return str(json.loads(answer.body)["id"])


def moved(database: Database, tenant_id: str, payout_id: str, *to_states: str) -> Payout:
    """The payout moved through `to_states` by its machine (a worker's queueing and claim)."""

    def work(connection: Connection) -> Payout:
        payout = lifecycle.MACHINE.load(connection, tenant_id, payout_id)
        for index, to_state in enumerate(to_states):
            change = lifecycle.MACHINE.move(
                connection, payout, to_state, cause="test", actor=ACTOR, now_us=NOW_US + 10 + index
            )
            assert change.changed
            payout = change.item
        return payout

    return database.transaction(work)


def test_the_target_is_the_transition_tables() -> None:
    assert [cancel_plan.target(status) for status in states.STATUSES] == [
        states.CANCELED if (status, states.CANCELED) in states.TRANSITIONS else None for status in states.STATUSES
    ]
    assert {status for status in states.STATUSES if cancel_plan.target(status)} == states.CANCELABLE


def test_cancel_is_two_reads_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    payout_id = scheduled(database, "count")
    dialect = database.engine.dialect.name
    with counting(database) as statements:
        answer = cancel_on_plane(database, scope("count", "c"), payout_id)
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), run
    if dialect == "postgresql":
        assert run[-1].startswith("SELECT paycore_payouts_cancel("), run
    assert '"status":"canceled"' in answer.body and '"to":"canceled"' in answer.body
    with database.read() as connection:
        payout = lifecycle.MACHINE.load(connection, "count", payout_id)
        source = ledger.get_account(connection, "count", payout.source_account_id)
        assert ledger.verify(connection).problems == []
    assert payout.status == states.CANCELED
    assert (source.balance.pending_minor, source.balance.available_minor) == (0, 10_000)  # the hold released


def test_the_reference_paths_count_is_what_the_comment_says(database: Database) -> None:
    payout_id = scheduled(database, "refcount")
    with counting(database) as statements:
        assert Reference(database, scope("refcount", "c"), payout_id)().status == 200
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == (REFERENCE_STATEMENTS[database.engine.dialect.name], 1), run


@pytest.mark.parametrize("through", [(), (states.QUEUED,)], ids=["scheduled", "queued"])
def test_the_rows_are_the_reference_paths(database: Database, through: tuple[str, ...]) -> None:
    """The same cancel, one tenant's payout through the data plane, another's through the
    reference path: the same payout, void, totals, entries, events (snapshot, sequence) and
    keys with their answers."""
    ids = {tenant: scheduled(database, tenant) for tenant in ("plane", "reference")}
    for tenant, payout_id in ids.items():
        if through:
            moved(database, tenant, payout_id, *through)
    mine = cancel_on_plane(database, scope("plane", "c"), ids["plane"])
    reference = Reference(database, scope("reference", "c"), ids["reference"])
    theirs = reference()
    written, expected = rows_of(database, "plane"), rows_of(database, "reference")
    assert [len(rows) for rows in written.values()] == [1, 3, 6, 4, 3 + len(through), 2]
    for table in expected:
        for row, other in zip(written[table], expected[table], strict=True):
            assert row == other, (table, {k: (v, other[k]) for k, v in row.items() if other[k] != v})
    with database.read() as connection:
        sources = {lifecycle.MACHINE.load(connection, t, i).source_account_id: "S" for t, i in ids.items()}
    renamed = {ids["plane"]: "P", ids["reference"]: "P", **sources}
    assert mine.status == theirs.status == 200
    assert _masked(mine.body, renamed) == _masked(theirs.body, renamed)
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def _masked(body: str, names: dict[str, str]) -> str:
    for actual, name in names.items():
        body = body.replace(actual, name)
    return body


def test_a_key_that_exists_is_replayed_by_the_reference_path(database: Database) -> None:
    payout_id = scheduled(database, "again")
    first = cancel_on_plane(database, scope("again", "c"), payout_id)
    before = row_counts(database)
    assert canceled(database, scope("again", "c", now_us=NOW_US + 200), payout_id) == (first, 1)
    assert row_counts(database) == before


def test_a_canceled_payout_is_answered_unchanged_by_the_reference_path(database: Database) -> None:
    payout_id = scheduled(database, "twice")
    cancel_on_plane(database, scope("twice", "c1"), payout_id)
    answer, calls = canceled(database, scope("twice", "c2", now_us=NOW_US + 200), payout_id)
    assert calls == 1 and answer.status == 200 and '"status":"canceled"' in answer.body
    assert row_counts(database)["ledger_transfers"] == 3  # the funding, the hold, one void


def test_a_claimed_payout_is_the_reference_paths_409(database: Database) -> None:
    """A payout a worker claimed: planned as nothing, refused by the reference path (the 409
    with its current status, not recorded: the key stays free), nothing written."""
    payout_id = scheduled(database, "claimed")
    moved(database, "claimed", payout_id, states.QUEUED, states.PROCESSING)
    before = row_counts(database)
    reference = Reference(database, scope("claimed", "c"), payout_id)
    with pytest.raises(PayoutNotCancelable) as raised:
        cancel.cancel(database, reference.scope, payout_id, actor=ACTOR, encode=dumps, reference=reference)
    assert reference.calls == 1 and raised.value.details == {"status": "processing"}
    assert row_counts(database) == before


def test_a_payout_moved_after_the_read_is_left_to_the_reference_path(database: Database) -> None:
    """The plan's payout is the one read; a worker's claim between the read and the write makes
    the write write nothing, and the reference path answers the 409 (the claim won)."""
    payout_id = scheduled(database, "raced")
    moved(database, "raced", payout_id, states.QUEUED)
    key_scope = scope("raced", "c")
    with database.read() as connection:
        before = lifecycle.MACHINE.load(connection, "raced", payout_id)
        events = audit.events_of(connection, "raced", payout_id, limit=100)
    plan = cancel_plan.plan_cancel(
        key_scope,
        before,
        events,
        actor=ACTOR,
        context=audit_rows.EventContext(None, None),
        new_ids=cancel_plan.NewIds("txn_00000000000000000000000001", "evt_00000000000000000000000001"),
        encode=dumps,
    )
    assert plan is not None
    moved(database, "raced", payout_id, states.PROCESSING)
    counts = row_counts(database)
    if database.is_postgres:
        with database.autocommit() as connection:
            assert cancel.call(connection, plan) is False
    else:
        with pytest.raises(cancel_repository.Moved):
            database.transaction(lambda connection: cancel_repository.write_statements(connection, plan))
    assert row_counts(database) == counts


def test_a_missing_payout_is_the_reference_paths_404(database: Database) -> None:
    funded(database, "missing", 0)
    before = row_counts(database)
    reference = Reference(database, scope("missing", "c"), "po_00000000000000000000000000")
    with pytest.raises(PayoutNotFound):
        cancel.cancel(database, reference.scope, reference.payout_id, actor=ACTOR, encode=dumps, reference=reference)
    assert reference.calls == 1 and row_counts(database) == before


def test_below_its_revision_postgresql_takes_the_reference_path(database: Database) -> None:
    """Without `paycore_payouts_cancel` (a schema at the revision before, which this code runs
    on: SQLSTATE 42883), the reference path cancels the payout."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL only: SQLite's list needs no function")
    payout_id = scheduled(database, "old")
    with database.engine.begin() as connection:
        connection.execute(text("DROP FUNCTION paycore_payouts_cancel"))
    answer, calls = canceled(database, scope("old", "c"), payout_id)
    assert answer.status == 200 and calls == 1 and '"status":"canceled"' in answer.body
    assert row_counts(database)["ledger_transfers"] == 3


# ------------------------------------------------------------------ processes canceling at once

RACERS = 6


def _race(url: str, payout_id: str, key: str, through_plane: bool, barrier: Any, results: Any) -> None:
    """One process: cancel the payout under its own key (half through the data plane, half
    through the reference path), started together."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    try:
        key_scope = scope("race", key)
        reference = Reference(database, key_scope, payout_id)
        barrier.wait(timeout=60)
        if through_plane:
            answer = cancel.cancel(database, key_scope, payout_id, actor=ACTOR, encode=dumps, reference=reference)
        else:
            answer = reference()
        results.put((answer.status, answer.body))
    finally:
        database.dispose()


def test_processes_canceling_one_payout_void_its_hold_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    payout_id = scheduled(database, "race")
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(RACERS), context.Queue()
    processes = [
        context.Process(
            target=_race, args=(settings.database_url, payout_id, f"k{index}", index % 2 == 0, barrier, results)
        )
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    answers = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert all(status == 200 and '"status":"canceled"' in body for status, body in answers), answers
    with database.read() as connection:
        voids = connection.execute(
            text("SELECT count(*) FROM ledger_transfers WHERE tenant_id = 'race' AND kind = 'void'")
        ).scalar_one()
        cancels = connection.execute(
            text("SELECT count(*) FROM events WHERE tenant_id = 'race' AND to_state = 'canceled'")
        ).scalar_one()
        assert ledger.verify(connection).problems == []
        payout = lifecycle.MACHINE.load(connection, "race", payout_id)
        balance = ledger.get_account(connection, "race", payout.source_account_id).balance
    assert (voids, cancels) == (1, 1)
    assert (balance.pending_minor, balance.available_minor) == (0, 10_000)
    assert payout.status == states.CANCELED


# ------------------------------------------------------------------ a cancel racing the worker's claim

QUEUED_PAYOUTS = 60
CLAIM_POLICY = Policy(attempts_max=3, backoff_ms=1, backoff_max_ms=2, lease_ms=600_000, batch_max=1)


def _cancel_or_claim(url: str, role: str, payout_ids: list[str], barrier: Any, results: Any) -> None:
    """One process: `cancel` cancels each payout through the data plane (the reference path
        where it writes nothing), as an API process; `claim` runs the workers' claim until nothing
        queued is left. The cancel walks the claim's order backwards, so the two meet (somewhere in
    the middle, on the payouts both reach at once) and each wins some."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    won: list[str] = []
    lost: dict[str, str] = {}
    try:
        with database.read() as connection:  # warm: connected, the payout's statements prepared
            lifecycle.MACHINE.find(connection, "race", payout_ids[0])
        barrier.wait(timeout=60)
        if role == "claim":
            for _ in range(QUEUED_PAYOUTS + 1):
                claimed = database.transaction(
                    lambda c: rounds.claim_queued(
                        c, policy=CLAIM_POLICY, worker_id="racer", actor="worker:send_payouts"
                    )
                )
                if not claimed:
                    break
                won.extend(payout.id for payout in claimed)
        else:
            for index, payout_id in enumerate(reversed(payout_ids)):  # the claim's last first: they meet
                key_scope = scope("race", f"c{index}", now_us=now_us())
                reference = Reference(database, key_scope, payout_id)
                try:
                    cancel.cancel(database, key_scope, payout_id, actor=ACTOR, encode=dumps, reference=reference)
                    won.append(payout_id)
                except PayoutNotCancelable as refused:
                    lost[payout_id] = str(refused.details["status"])
        results.put((role, won, lost))
    finally:
        database.dispose()


def test_a_cancel_racing_the_workers_claim_has_exactly_one_winner(database: Database, settings: Settings) -> None:
    """SPEC §11's race across processes, the cancel on the data plane: each payout is canceled
    (its hold voided once) or claimed (`processing`, its hold standing, the canceler told 409
    `processing`), never both."""
    if not database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    source = funded_source(database, "race", QUEUED_PAYOUTS * 100)
    born = [support_schedule(database, "race", source, 100) for _ in range(QUEUED_PAYOUTS)]
    assert rounds.queue_due(database, batch_max=QUEUED_PAYOUTS, actor="worker:queue_payouts") == QUEUED_PAYOUTS
    queued = [load(database, payout) for payout in born]
    payout_ids = [p.id for p in sorted(queued, key=lambda p: (p.next_attempt_at_us or 0, p.id))]
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=_cancel_or_claim, args=(settings.database_url, role, payout_ids, barrier, results))
        for role in ("cancel", "claim")
    ]
    for process in processes:
        process.start()
    reports = {role: (won, lost) for role, won, lost in (results.get(timeout=120) for _ in processes)}
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    canceled, told = set(reports["cancel"][0]), reports["cancel"][1]
    claimed = set(reports["claim"][0])
    assert canceled.isdisjoint(claimed) and canceled | claimed == set(payout_ids)
    assert set(told) == claimed and set(told.values()) <= {"processing"}
    with database.read() as connection:
        voided = connection.execute(
            text("SELECT pending_id FROM ledger_transfers WHERE tenant_id = 'race' AND kind = 'void'")
        ).scalars()
        voided_ids = list(voided)
        payouts = {p.id: p for p in (lifecycle.MACHINE.load(connection, "race", i) for i in payout_ids)}
        assert ledger.verify(connection).problems == []
    assert sorted(voided_ids) == sorted(payouts[i].transfer_id for i in canceled)  # once each
    assert all(payouts[i].status == states.PROCESSING for i in claimed)
    assert all(payouts[i].status == states.CANCELED for i in canceled)
    print(f"{len(canceled)} canceled first, {len(claimed)} claimed first, of {QUEUED_PAYOUTS}")
    assert canceled and claimed, "one side finished before the other started: nothing raced"
