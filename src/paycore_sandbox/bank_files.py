"""The file a closed batch was sent to the bank as: a NACHA file for ACH, a SEPA credit
transfer initiation (`pain.001.001.03`, made by `sepaxml`, validated against its XSD) for SEPA.

The file holds every payout of the batch, the ones the receiving banks will reject or
return included: they are decided after the file is sent. Both are made from the stored
rows when asked, dated at the batch's close, so the same batch always gives the same
entries (the pain.001 message id and creation time are sepaxml's own and vary).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import sepaxml  # type: ignore[import-untyped]
from sepaxml import SepaTransfer
from sqlalchemy import RowMapping

from paycore_sandbox import nacha
from paycore_sandbox.bank_accounts import compact_iban

if TYPE_CHECKING:
    import xmlschema

# The sandbox's own accounts, as the sender of every file.
ORIGINATOR: Final = nacha.Originator(
    destination_routing="110000000",
    destination_name="PAYCORE SANDBOX BANK",
    origin_id="1000000001",
    origin_name="PAYCORE",
    company_name="PAYCORE SANDBOX",
    company_id="1000000001",
    odfi_id="11000000",
)
SEPA_DEBTOR: Final = {"name": "PAYCORE SANDBOX", "IBAN": "DE68370400440532099999", "BIC": "COBADEFFXXX"}
PAIN_SCHEMA: Final = "pain.001.001.03"
ACH_MEDIA_TYPE: Final = "text/plain; charset=us-ascii"
SEPA_MEDIA_TYPE: Final = "application/xml"


@dataclass(frozen=True)
class BatchFile:
    media_type: str
    filename: str
    content: bytes


def batch_file(batch: RowMapping, payouts: Sequence[RowMapping], sec_code: str) -> BatchFile:
    """The file of a closed batch with its payouts (all of them, in the order they joined)."""
    assert batch["closed_at_us"] is not None and len(payouts) == batch["count"] >= 1
    assert sum(payout["amount_minor"] for payout in payouts) == batch["total_minor"], "pair: the batch's total"
    closed_at = dt.datetime.fromtimestamp(batch["closed_at_us"] // 1_000_000, tz=dt.UTC)
    if batch["rail"] == "ach":
        text = nacha_file(payouts, sec_code, closed_at)
        return BatchFile(ACH_MEDIA_TYPE, f"{batch['batch_id']}.ach", text.encode("ascii"))
    return BatchFile(SEPA_MEDIA_TYPE, f"{batch['batch_id']}.xml", pain_001(payouts, closed_at.date()))


def nacha_file(payouts: Sequence[RowMapping], sec_code: str, closed_at: dt.datetime) -> str:
    entries = [
        nacha.Entry(
            routing_number=payout["routing_number"],
            account_number=payout["account_number"],
            amount_minor=payout["amount_minor"],
            name=payout["beneficiary_name"],
            individual_id=payout["bank_payout_id"][-15:],
        )
        for payout in payouts
    ]
    return nacha.write_file(
        ORIGINATOR, entries, sec_code=sec_code, created_at=closed_at, effective_date=closed_at.date()
    )


def pain_001(payouts: Sequence[Mapping[Any, Any]], execution_date: dt.date) -> bytes:
    transfer = SepaTransfer({**SEPA_DEBTOR, "batch": True, "currency": "EUR"}, schema=PAIN_SCHEMA, clean=True)
    for payout in payouts:
        payment = {
            "name": payout["beneficiary_name"],
            "IBAN": compact_iban(payout["iban"]),
            "amount": payout["amount_minor"],  # sepaxml takes integer cents
            "execution_date": execution_date,
            "description": f"payout {payout['bank_payout_id']}",
            "endtoend_id": payout["bank_payout_id"],
        }
        if payout["bic"] is not None:
            payment["BIC"] = payout["bic"]
        transfer.add_payment(payment)
    exported: bytes = transfer.export(validate=False)
    pain_schema().validate(exported.decode())  # raises xmlschema.XMLSchemaValidationError
    return exported


@functools.cache
def pain_schema() -> xmlschema.XMLSchema:
    """The pain.001.001.03 XSD that sepaxml ships, built once per process. sepaxml's own
    `export(validate=True)` builds it again for every file: 70 ms of CPU on a quiet machine,
    0.4 s the first time (importing xmlschema), and seconds on a loaded one, long enough for a
    test's HTTP call for the file to time out under parallel runs. Imported here, as sepaxml
    does, so that starting the sandbox does not pay for it."""
    import xmlschema

    return xmlschema.XMLSchema(str(Path(sepaxml.__file__).parent / "schemas" / f"{PAIN_SCHEMA}.xsd"))
