"""The dispute calls of the sandbox (disputes.py, dispute_actions.py), as methods of `Sandbox`:
one transaction each, committed before it returns; a transport asks `decide(op)` first and
passes the decision, as for charges."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.processor.port import ProcessorRefused
from paycore_sandbox import dispute_actions, dispute_repository, disputes
from paycore_sandbox.faults import NO_FAULTS, Decision
from paycore_sandbox.limits import SandboxSettings

_Result = TypeVar("_Result")


def answer(outcome: _Result | ProcessorRefused) -> _Result:
    """A refusal returned from a transaction that committed (an expiry or a passed evidence
    deadline found on the way)."""
    if isinstance(outcome, ProcessorRefused):
        raise outcome
    return outcome


class DisputeCalls:
    database: Database
    settings: SandboxSettings

    def open_dispute(
        self, request: disputes.OpenDisputeRequest, faults: Decision = NO_FAULTS
    ) -> disputes.DisputeResult:
        """The admin call: open a dispute on a captured charge now."""
        disputes.check_open(request)
        now_us = clock.now_us()
        return self.database.transaction(
            lambda connection: disputes.open_dispute(connection, request, faults, self.settings, now_us)
        )

    def submit_evidence(
        self, request: disputes.EvidenceRequest, faults: Decision = NO_FAULTS
    ) -> disputes.DisputeResult:
        disputes.check_action(request)
        now_us = clock.now_us()
        return answer(
            self.database.transaction(
                lambda connection: dispute_actions.submit_evidence(connection, request, faults, self.settings, now_us)
            )
        )

    def accept_dispute(self, request: disputes.AcceptRequest, faults: Decision = NO_FAULTS) -> disputes.DisputeResult:
        disputes.check_action(request)
        now_us = clock.now_us()
        return answer(
            self.database.transaction(
                lambda connection: dispute_actions.accept(connection, request, faults, self.settings, now_us)
            )
        )

    def get_dispute(self, dispute_id: str) -> disputes.DisputeResult | None:
        """The dispute now: a step already due (a decision, a deadline) is taken first, as
        `get_charge` expires an authorization, so a read never shows open what is decided."""
        with self.database.read() as connection:
            row = dispute_repository.find(connection, dispute_id)
        if row is None:
            return None
        now_us = clock.now_us()
        if row["next_step_at_us"] is not None and row["next_step_at_us"] <= now_us:
            return self.database.transaction(lambda connection: self._step_and_read(connection, dispute_id, now_us))
        return disputes.result(row)

    def disputes_of_charge(self, charge_request_id: str) -> list[disputes.DisputeResult]:
        """The disputes of the charge made for a request id (at most one), as `get_dispute` reads each."""
        with self.database.read() as connection:
            row = dispute_repository.of_charge(connection, charge_request_id)
        found = None if row is None else self.get_dispute(row["dispute_id"])
        return [] if found is None else [found]

    def _step_and_read(self, connection: Connection, dispute_id: str, now_us: int) -> disputes.DisputeResult:
        row = dispute_repository.find(connection, dispute_id)
        assert row is not None, "a dispute is never deleted"
        if row["next_step_at_us"] is not None and row["next_step_at_us"] <= now_us:
            disputes.step(connection, row, self.settings, now_us)
            row = dispute_repository.find(connection, dispute_id)
            assert row is not None
        return disputes.result(row)
