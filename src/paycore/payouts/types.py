"""A payout as the domain sees it: an immutable value read from its row."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row

from paycore.lifecycle.columns import WorkFields
from paycore.payouts import states
from paycore.payouts.validation import Beneficiary


@dataclass(frozen=True)
class NewPayout:
    """A payout request that passed the HTTP edge's shapes, before its own rules
    (`create_plan.check_request`)."""

    amount_minor: int
    currency: str
    source_account_id: str
    rail: str
    beneficiary: Beneficiary
    execute_on: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Payout(WorkFields):
    tenant_id: str
    id: str
    idempotency_key: str | None
    amount_minor: int
    currency: str
    rail: str
    source_account_id: str
    beneficiary_name: str
    iban: str | None
    bic: str | None
    routing_number: str | None
    account_number: str | None
    execute_on: str
    metadata: dict[str, str]
    status: str
    failure_code: str | None
    return_code: str | None
    transfer_id: str
    bank_reference: str | None
    batch_id: str | None
    sent_at_us: int | None
    settled_at_us: int | None
    returned_at_us: int | None


def payout_from_row(row: Mapping[Any, Any] | Row[Any]) -> Payout:
    """The payout a row means: a status in a retired spelling (states.LEGACY_NAMES), in a row
    not yet backfilled, reads as the status the code writes now."""
    row = row._mapping if isinstance(row, Row) else row  # a Row or its mapping
    return Payout(**{**row, "metadata": json.loads(row["metadata"]), "status": states.normalize(row["status"])})


def payout_row(payout: Payout) -> dict[str, Any]:
    """The row that stores `payout`: what the repository inserts."""
    return {**dataclasses.asdict(payout), "metadata": json.dumps(payout.metadata, sort_keys=True)}


@dataclass(frozen=True)
class Adjustment:
    tenant_id: str
    id: str
    payout_id: str
    kind: str
    amount_minor: int
    currency: str
    code: str | None
    effective_on: str
    source: str
    dedupe_key: str
    transfer_id: str
    note: str | None
    created_at_us: int


def adjustment_from_row(row: Any) -> Adjustment:
    return Adjustment(**dict(row._mapping))
