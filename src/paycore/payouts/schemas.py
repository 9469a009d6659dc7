"""The payouts API shapes (SPEC §11): strict request models and the JSON of a payout.
Full account identifiers never leave: responses carry their last four characters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paycore.audit.schemas import history_json  # one rendering of a history for every money object
from paycore.audit.service import Event
from paycore.kit.clock import to_rfc3339
from paycore.payouts import states, windows
from paycore.payouts.types import Adjustment, Payout
from paycore.payouts.validation import mask
from paycore.schemas import AmountMinor, Currency, Id, Metadata, StrictModel

NOTE_LENGTH_MAX = 500


class BeneficiaryIn(StrictModel):
    name: str = Field(min_length=1, max_length=140)
    iban: str | None = Field(default=None, min_length=1, max_length=42)  # spaces allowed, removed
    bic: str | None = Field(default=None, min_length=8, max_length=11)
    routing_number: str | None = Field(default=None, min_length=1, max_length=9)
    account_number: str | None = Field(default=None, min_length=1, max_length=17)


class PayoutCreate(StrictModel):
    amount_minor: AmountMinor
    currency: Currency
    source_account: Id
    beneficiary: BeneficiaryIn
    rail: Literal["ach", "sepa"]
    execute_on: str | None = Field(default=None, min_length=1, max_length=10, description="YYYY-MM-DD (UTC)")
    metadata: Metadata = Field(default_factory=dict)


class AdjustmentCreate(StrictModel):
    kind: Literal["chargeback", "chargeback_reversal", "recovery", "fee_reversal", "refund"]
    amount_minor: AmountMinor
    effective_on: str | None = Field(default=None, min_length=10, max_length=10, description="YYYY-MM-DD")
    note: str | None = Field(default=None, min_length=1, max_length=NOTE_LENGTH_MAX)


def payout_json(payout: Payout, history: list[Event] | None = None) -> dict[str, Any]:
    returnable_until = None
    if payout.status == states.SETTLED and payout.settled_at_us is not None:
        returnable_until = to_rfc3339(windows.returnable_until_us(payout.rail, payout.settled_at_us))
    body: dict[str, Any] = {
        "id": payout.id,
        "object": "payout",
        "amount_minor": payout.amount_minor,
        "currency": payout.currency,
        "rail": payout.rail,
        "status": states.public(payout.status),
        "source_account": payout.source_account_id,
        "beneficiary": {
            "name": payout.beneficiary_name,
            "iban_last4": mask(payout.iban),
            "bic": payout.bic,
            "routing_number": payout.routing_number,
            "account_number_last4": mask(payout.account_number),
        },
        "execute_on": payout.execute_on,
        "failure_code": payout.failure_code,
        "return_code": payout.return_code,
        "bank_reference": payout.bank_reference,
        "batch_id": payout.batch_id,
        "attempts": payout.attempts,
        "returnable_until": returnable_until,
        "metadata": payout.metadata,
        "created_at": to_rfc3339(payout.created_at_us),
        "updated_at": to_rfc3339(payout.updated_at_us),
    }
    if history is not None:
        body["history"] = history_json(history)
    return body


def adjustment_json(adjustment: Adjustment) -> dict[str, Any]:
    return {
        "id": adjustment.id,
        "object": "payout_adjustment",
        "payout": adjustment.payout_id,
        "kind": adjustment.kind,
        "amount_minor": adjustment.amount_minor,
        "currency": adjustment.currency,
        "code": adjustment.code,
        "effective_on": adjustment.effective_on,
        "source": adjustment.source,
        "transfer_id": adjustment.transfer_id,
        "note": adjustment.note,
        "created_at": to_rfc3339(adjustment.created_at_us),
    }
