"""The payout's calls to the bank (SPEC §11), through the processor port: the one payout
request, sent the same every time with the payout's id as the bank's dedupe key, and the
payout's status. Account numbers are masked in what is recorded. Each call is timed and
classified (`paycore.lifecycle.calls`); the worker rounds that make them are `rounds`."""

from __future__ import annotations

import dataclasses

from paycore.lifecycle.calls import Call, timed
from paycore.payouts.lifecycle import SEND_OPERATION
from paycore.payouts.types import Payout
from paycore.payouts.validation import mask
from paycore.processor.port import PayoutRequest, PayoutResult, Processor

_MASKED = ("iban", "account_number")


def payout_request(payout: Payout) -> PayoutRequest:
    """The one request sent for this payout, every time: its id is the bank's dedupe key."""
    return PayoutRequest(
        request_id=payout.id,
        merchant_id=payout.tenant_id,
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        rail="ach" if payout.rail == "ach" else "sepa",
        beneficiary_name=payout.beneficiary_name,
        iban=payout.iban,
        bic=payout.bic,
        routing_number=payout.routing_number,
        account_number=payout.account_number,
    )


def send(processor: Processor, request: PayoutRequest) -> Call[PayoutResult]:
    recorded = dataclasses.asdict(request)
    for name in _MASKED:
        recorded[name] = mask(recorded[name])
    ids = {"payout_id": request.request_id, "tenant_id": request.merchant_id}  # never the account fields
    return timed(SEND_OPERATION, recorded, lambda: processor.send_payout(request), ids=ids)


def get(processor: Processor, request_id: str) -> Call[PayoutResult]:
    ids = {"payout_id": request_id}
    return timed("get_payout", {"request_id": request_id}, lambda: processor.get_payout(request_id), ids=ids)
