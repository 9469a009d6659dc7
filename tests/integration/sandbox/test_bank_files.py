"""The files a batch is sent as: NACHA for ACH (written by hand, checked record by record
here) and pain.001.001.03 for SEPA (made by sepaxml), fetched from the sandbox's HTTP API."""

from __future__ import annotations

import dataclasses
import datetime as dt
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import xmlschema

from paycore.kit.money import format_minor
from paycore_sandbox import Sandbox, nacha
from paycore_sandbox.bank_files import ORIGINATOR, SEPA_DEBTOR, pain_001, pain_schema
from tests.integration.sandbox.bank_support import CLOSE_MS, ach, at_ms, iban_ending, install_clock, sepa
from tests.integration.sandbox.conftest import SECRET, SETTINGS, RecordingSink, StartServer
from tests.integration.sandbox.test_http_api import call

PAIN = {"p": "urn:iso:std:iso:20022:tech:xsd:pain.001.001.03"}
CREATED_AT = dt.datetime(2030, 6, 3, 12, 34, tzinfo=dt.UTC)


def entry(index: int, routing_number: str = "021000021", amount_minor: int = 1_000) -> nacha.Entry:
    return nacha.Entry(routing_number, f"{index:012d}", amount_minor, f"Receiver {index}", f"id{index}")


def write(entries: list[nacha.Entry], sec_code: str = "PPD") -> list[str]:
    text = nacha.write_file(
        ORIGINATOR, entries, sec_code=sec_code, created_at=CREATED_AT, effective_date=CREATED_AT.date()
    )
    assert text.endswith("\n")
    return text.split("\n")[:-1]


@dataclass(frozen=True)
class Control:
    """The numbers of a batch control (8) or file control (9) record."""

    count: int
    entry_hash: int
    debit_minor: int
    credit_minor: int


def batch_control(record: str) -> Control:
    assert record[0] == "8" and record[1:4] == "220"
    return Control(int(record[4:10]), int(record[10:20]), int(record[20:32]), int(record[32:44]))


def file_control(record: str) -> tuple[int, int, Control]:
    """(batch count, block count, the totals)."""
    assert record[0] == "9" and record[55:] == " " * 39
    totals = Control(int(record[13:21]), int(record[21:31]), int(record[31:43]), int(record[43:55]))
    return int(record[1:7]), int(record[7:13]), totals


def check_structure(lines: list[str], entries: list[nacha.Entry]) -> None:
    """Every rule of the format that a bank's file checker applies to a credit file."""
    assert all(len(line) == nacha.RECORD_LENGTH for line in lines)
    assert len(lines) % nacha.BLOCKING_FACTOR == 0
    records = [line for line in lines if line != "9" * 94]
    padding = lines[len(records) :]
    assert all(line == "9" * 94 for line in padding) and len(padding) < nacha.BLOCKING_FACTOR
    assert [record[0] for record in records] == ["1", "5", *["6"] * len(entries), "8", "9"]
    expected_hash = sum(int(item.routing_number[:8]) for item in entries) % 10**10
    expected_total = sum(item.amount_minor for item in entries)
    control = batch_control(records[-2])
    assert control == Control(len(entries), expected_hash, 0, expected_total)
    batches, blocks, totals = file_control(records[-1])
    assert (batches, blocks) == (1, len(lines) // nacha.BLOCKING_FACTOR)
    assert totals == control
    for record, item in zip(records[2:-2], entries, strict=True):
        assert record[1:3] == "22", "a credit to a checking account"
        assert record[3:12] == item.routing_number
        assert record[12:29] == item.account_number.ljust(17)
        assert int(record[29:39]) == item.amount_minor
        assert record[78] == "0", "no addenda"
    traces = [record[79:94] for record in records[2:-2]]
    assert traces == [ORIGINATOR.odfi_id + f"{sequence:07d}" for sequence in range(1, len(entries) + 1)]


@pytest.mark.parametrize("entries_count", [1, 6, 7, 23])
def test_a_nacha_file_is_whole_blocks_of_94_character_records(entries_count: int) -> None:
    entries = [entry(index, amount_minor=index + 1) for index in range(entries_count)]

    lines = write(entries)

    check_structure(lines, entries)
    records_count = entries_count + 4
    assert len(lines) == -(-records_count // 10) * 10  # 6 entries fill one block exactly


def test_the_headers_carry_the_originator_the_dates_and_the_sec_code() -> None:
    file_header, batch_header = write([entry(1)], sec_code="CCD")[:2]

    assert file_header[:3] == "101" and file_header[3:13] == " 110000000"
    assert file_header[23:29] == "300603" and file_header[29:33] == "1234"
    assert file_header[33:40] == "A094101"
    assert file_header[40:63] == "PAYCORE SANDBOX BANK".ljust(23)
    assert batch_header[:4] == "5220" and batch_header[50:53] == "CCD"
    assert batch_header[53:63] == "PAYOUT    " and batch_header[69:75] == "300603"
    assert batch_header[78] == "1" and batch_header[79:87] == ORIGINATOR.odfi_id and batch_header[87:] == "0000001"


def test_the_entry_hash_keeps_its_rightmost_ten_digits() -> None:
    entries = [entry(index, routing_number="999999992") for index in range(200)]

    lines = write(entries)

    check_structure(lines, entries)
    assert 200 * 99_999_999 == 19_999_999_800
    assert batch_control(lines[202]).entry_hash == 9_999_999_800


def test_names_are_upper_case_ascii_cut_to_their_field() -> None:
    named = nacha.Entry("021000021", "123456", 1, "Zoë Müller-Lüdenscheidt & Söhne GmbH", "x")

    record = write([named])[2]

    assert record[54:76] == "ZOE MULLER-LUDENSCHEID"
    assert record.isascii()


def test_a_pain_001_is_checked_against_its_schema_which_is_built_once() -> None:
    payout = {"beneficiary_name": "Zoe", "iban": "DE89370400440532013000", "amount_minor": 1, "bank_payout_id": "b1"}
    text = pain_001([{**payout, "bic": None}], CREATED_AT.date()).decode()
    broken = text.replace("<NbOfTxs>1</NbOfTxs>", "<NbOfTxs>one</NbOfTxs>", 1)
    assert broken != text

    assert pain_schema() is pain_schema()
    pain_schema().validate(text)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        pain_schema().validate(broken)


# --- the files of the sandbox's batches, over HTTP ------------------------------------------


@dataclass
class Served:
    sandbox: Sandbox
    url: str


@pytest.fixture
def served(
    tmp_path: Path, serve_sandbox: StartServer, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Served]:
    sec_code = getattr(request, "param", "PPD")
    settings = dataclasses.replace(SETTINGS, ach_sec_code=sec_code)
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 'files.db'}", webhook_secret=SECRET, settings=settings)
    install_clock(monkeypatch)
    yield Served(sandbox, serve_sandbox(sandbox, RecordingSink()))
    sandbox.close()


@pytest.mark.parametrize("served", ["PPD", "CCD"], indirect=True)
def test_an_ach_batch_file_lists_its_payouts(served: Served) -> None:
    requests = [ach("po_1", amount_minor=1), ach("po_2", "000111111113", 250_000), ach("po_3", "000222222227", 99)]
    results = [served.sandbox.send_payout(request) for request in requests]
    batch_id = results[0].batch_id
    assert batch_id is not None
    served.sandbox.settle_due(at_ms(CLOSE_MS))

    status, text = call(served.url, "GET", f"/v1/batches/{batch_id}/file")

    assert status == 200 and isinstance(text, str)
    lines = text.split("\n")[:-1]
    entries = [
        nacha.Entry(request.routing_number or "", request.account_number or "", request.amount_minor, "", "")
        for request in requests
    ]
    check_structure(lines, entries)
    sec_code = served.sandbox.settings.ach_sec_code
    assert lines[1][50:53] == sec_code
    assert [line[39:54] for line in lines[2:5]] == [result.bank_payout_id[-15:] for result in results]
    assert lines[2][54:76] == "JANE DOE".ljust(22)
    assert lines[0][23:29] == "300603", "dated at the batch's close"


def test_a_sepa_batch_file_is_a_valid_pain_001(served: Served) -> None:
    requests = [
        sepa("po_1", amount_minor=12_345),
        sepa("po_2", iban_ending("0003"), 1, bic="COBADEFFXXX"),
        sepa("po_3", "DE89 3704 0044 0532 0130 00", 99_999_999_999),
    ]
    results = [served.sandbox.send_payout(request) for request in requests]
    batch_id = results[0].batch_id
    assert batch_id is not None and {result.batch_id for result in results} == {batch_id}
    served.sandbox.settle_due(at_ms(CLOSE_MS))

    status, text = call(served.url, "GET", f"/v1/batches/{batch_id}/file")

    assert status == 200 and isinstance(text, str)
    root = ET.fromstring(text.encode())
    total_minor = sum(request.amount_minor for request in requests)
    assert root.findtext("p:CstmrCdtTrfInitn/p:GrpHdr/p:NbOfTxs", namespaces=PAIN) == "3"
    assert root.findtext("p:CstmrCdtTrfInitn/p:GrpHdr/p:CtrlSum", namespaces=PAIN) == format_minor(total_minor, "EUR")
    payment = root.find("p:CstmrCdtTrfInitn/p:PmtInf", PAIN)
    assert payment is not None
    assert payment.findtext("p:DbtrAcct/p:Id/p:IBAN", namespaces=PAIN) == SEPA_DEBTOR["IBAN"]
    assert payment.findtext("p:ReqdExctnDt", namespaces=PAIN) == "2030-06-03"
    transfers = payment.findall("p:CdtTrfTxInf", PAIN)
    seen = [
        (
            transfer.findtext("p:PmtId/p:EndToEndId", namespaces=PAIN),
            transfer.findtext("p:Amt/p:InstdAmt", namespaces=PAIN),
            transfer.findtext("p:CdtrAcct/p:Id/p:IBAN", namespaces=PAIN),
        )
        for transfer in transfers
    ]
    assert seen == [
        (results[0].bank_payout_id, "123.45", "DE89370400440532013000"),
        (results[1].bank_payout_id, "0.01", iban_ending("0003")),
        (results[2].bank_payout_id, "999999999.99", "DE89370400440532013000"),
    ]
    amount = transfers[0].find("p:Amt/p:InstdAmt", PAIN)
    assert amount is not None and amount.get("Ccy") == "EUR"
    assert transfers[1].findtext("p:CdtrAgt/p:FinInstnId/p:BIC", namespaces=PAIN) == "COBADEFFXXX"
    assert transfers[0].findtext("p:Cdtr/p:Nm", namespaces=PAIN) == "Zoe Muller"


def test_an_open_batch_has_no_file_yet_and_an_unknown_one_none(served: Served) -> None:
    batch_id = served.sandbox.send_payout(ach("po_1")).batch_id

    status, body = call(served.url, "GET", f"/v1/batches/{batch_id}/file")
    assert (status, body["error"]) == (409, "batch_open")
    status, body = call(served.url, "GET", "/v1/batches/bb_unknown/file")
    assert (status, body["error"]) == (404, "not_found")
