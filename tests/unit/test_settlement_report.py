"""Reading the settlement report (paycore.reconciliation.report), without a database: every
line typed and checked, a bad line a finding with its number, a file that is not a report
refused before anything is read from it."""

from __future__ import annotations

import io

import pytest

from paycore.kit import clock
from paycore.reconciliation.report import HEADER, Line, Malformed, NotAReport, encoded, opened, read

HEAD = ",".join(HEADER)
CHARGE = "charge,pay_1,ch_1,acme,2500,103,USD,succeeded,2024-11-25T16:00:00.123456Z,,"
RETURN = "payout_return,po_6,bpo_6,acme,20000,200,USD,returned,2024-11-25T16:06:02.500000Z,bb_6,R02"


def lines(*rows: str, end: str = "\r\n") -> list[str]:
    return list(io.StringIO(end.join([HEAD, *rows]) + end, newline=""))


def test_each_line_is_typed_with_its_number_and_fields() -> None:
    read_lines = list(read(lines(CHARGE, RETURN)))

    assert read_lines == [
        Line(
            number=2,
            type="charge",
            request_id="pay_1",
            processor_id="ch_1",
            merchant_id="acme",
            amount_minor=2500,
            fee_minor=103,
            currency="USD",
            status="succeeded",
            created_at_us=clock.parse_rfc3339("2024-11-25T16:00:00.123456Z"),
            batch_id=None,
            code=None,
            fields=tuple(CHARGE.split(",")),
        ),
        Line(
            number=3,
            type="payout_return",
            request_id="po_6",
            processor_id="bpo_6",
            merchant_id="acme",
            amount_minor=20000,
            fee_minor=200,
            currency="USD",
            status="returned",
            created_at_us=clock.parse_rfc3339("2024-11-25T16:06:02.5Z"),
            batch_id="bb_6",
            code="R02",
            fields=tuple(RETURN.split(",")),
        ),
    ]


@pytest.mark.parametrize(
    ("kind", "status", "wrong"),
    [
        ("dispute_withdrawal", "withdrawn", "charged"),
        ("dispute_fee", "charged", "reinstated"),
        ("dispute_reinstatement", "reinstated", "withdrawn"),
    ],
)
def test_a_dispute_line_is_read_with_its_event_and_no_other(kind: str, status: str, wrong: str) -> None:
    """SPEC §6.2: request id the charge's, processor id the dispute's, code its reason."""
    text = f"{kind},pay_1,dp_sbx_01JD9,acme,1500,0,USD,{status},2024-11-25T16:07:00.000000Z,,fraudulent"
    [found] = read(lines(text))
    assert isinstance(found, Line)
    assert (found.type, found.processor_id, found.amount_minor, found.status, found.code) == (
        kind,
        "dp_sbx_01JD9",
        1500,
        status,
        "fraudulent",
    )
    [bad] = read(lines(text.replace(status, wrong)))
    assert isinstance(bad, Malformed) and bad.reason == f"status {wrong!r} is not one a {kind} line has"


def test_lf_endings_quoted_fields_and_blank_lines_read_the_same() -> None:
    quoted = '"charge","pay_1","ch_1","acme","2500","103","USD","succeeded","2024-11-25T16:00:00.123456Z","",""'
    crlf = list(read(lines(CHARGE)))
    assert list(read(lines(quoted, "", end="\n"))) == crlf


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("amount_minor", "12.5"), "amount_minor '12.5' is not a whole number of minor units"),
        (("amount_minor", "-5"), "amount_minor '-5' is not a whole number of minor units"),
        (("amount_minor", "1e3"), "amount_minor '1e3' is not a whole number of minor units"),
        (("amount_minor", "007"), "amount_minor '007' is not a whole number of minor units"),
        (("amount_minor", str(2**53)), f"amount_minor '{2**53}' is not a whole number of minor units"),
        (("fee_minor", ""), "fee_minor '' is not a whole number of minor units"),
        (("amount_minor", "1²"), "amount_minor '1²' is not a whole number of minor units"),
        (("amount_minor", "\u0661\u0662"), "amount_minor '\u0661\u0662' is not a whole number of minor units"),
        (("fee_minor", "\uff15"), "fee_minor '\uff15' is not a whole number of minor units"),
        (("amount_minor", "9" * 17), f"amount_minor '{'9' * 17}' is not a whole number of minor units"),
        (("currency", "usd"), "currency 'usd' is not an ISO 4217 code"),
        (
            ("type", "chargeback"),
            "type 'chargeback' is not one of charge, refund, payout, payout_return, dispute_withdrawal, "
            "dispute_fee, dispute_reinstatement",
        ),
        (("status", "settled"), "status 'settled' is not one a charge line has"),
        (("created_at", "2024-11-25 16:00"), "created_at '2024-11-25 16:00' is not an RFC 3339 time"),
        (("request_id", ""), "request_id '' is not an id"),
        (("merchant_id", "a b"), "merchant_id 'a b' is not an id"),
    ],
)
def test_a_wrong_field_makes_the_line_malformed_and_the_next_lines_still_count(
    change: tuple[str, str], reason: str
) -> None:
    fields = CHARGE.split(",")
    fields[HEADER.index(change[0])] = change[1]
    bad = ",".join(fields)

    found = list(read(lines(CHARGE, bad, RETURN)))

    assert [type(item) for item in found] == [Line, Malformed, Line]
    assert found[1] == Malformed(3, reason, tuple(fields))


def test_a_truncated_last_line_is_malformed() -> None:
    text = HEAD + "\r\n" + CHARGE + "\r\n" + CHARGE[:25]

    found = list(read(io.StringIO(text, newline="")))

    assert found[1] == Malformed(3, "5 fields, a report line has 11", tuple(CHARGE[:25].split(",")))


def test_an_unterminated_quote_is_malformed_not_a_crash() -> None:
    found = list(read(lines(CHARGE, 'charge,"pay_2')))

    assert isinstance(found[1], Malformed) and found[1].reason.startswith("not CSV")


def test_a_field_longer_than_any_report_has_is_malformed_and_not_kept() -> None:
    fields = CHARGE.split(",")
    fields[1] = "x" * 300

    found = list(read(lines(",".join(fields))))

    assert found == [Malformed(2, "request_id is longer than 256 characters", ("charge",))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the report is empty"),
        ("type,request_id,amount\r\n" + CHARGE + "\r\n", "line 1 is not a settlement report's header"),
        ("id,amount_minor\r\n1,2\r\n", "line 1 is not a settlement report's header"),
    ],
)
def test_what_is_not_a_report_is_refused_before_any_line(text: str, message: str) -> None:
    with pytest.raises(NotAReport, match=message):
        next(read(io.StringIO(text, newline="")))


def test_lines_are_read_as_they_come_not_all_at_once() -> None:
    def endless() -> object:
        yield HEAD + "\r\n"
        while True:
            yield CHARGE + "\r\n"

    reader = read(endless())  # type: ignore[arg-type]
    assert [next(reader).number for _ in range(3)] == [2, 3, 4]


# --- the report's encoding (issue 29 item 6) ------------------------------------------------


def test_a_byte_order_mark_before_the_header_is_skipped_and_the_lines_are_the_same() -> None:
    marked = ["\ufeff" + lines(CHARGE)[0], *lines(CHARGE)[1:]]

    assert list(read(marked)) == list(read(lines(CHARGE)))


def test_a_byte_order_mark_anywhere_else_is_kept_and_found() -> None:
    fields = CHARGE.split(",")
    fields[0] = "\ufeffcharge"

    (found,) = read(lines(",".join(fields)))

    assert isinstance(found, Malformed) and found.fields[0] == "\ufeffcharge"


def test_opened_bytes_keep_their_line_ends_and_read_as_text() -> None:
    raw = ("\ufeff" + HEAD + "\r\n" + CHARGE + "\r\n").encode()

    text = opened(io.BytesIO(raw))

    assert list(text) == ["\ufeff" + HEAD + "\r\n", CHARGE + "\r\n"]
    assert b"".join(encoded(line) for line in lines(CHARGE)) == (HEAD + "\r\n" + CHARGE + "\r\n").encode()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            HEAD.encode() + b"\r\n" + CHARGE.encode().replace(b"acme", b"caf\xe9") + b"\r\n",
            r"line 2 is not UTF-8 \(byte 0xe9 at character 22\)",
        ),
        ((HEAD + "\r\n").encode("utf-16"), "line 1 begins with a UTF-16 byte-order mark"),
        ((HEAD + "\r\n").encode("utf-16-le"), "line 1 holds NUL bytes, as UTF-16 text does"),
        ((HEAD + "\r\n").encode("utf-16-be"), "line 1 holds NUL bytes"),
    ],
)
def test_bytes_in_another_encoding_are_refused_naming_the_line(raw: bytes, message: str) -> None:
    with pytest.raises(NotAReport, match=message):
        opened(io.BytesIO(raw))  # a stream that can be read twice: checked whole at once
    with pytest.raises(NotAReport, match=message):
        list(read(io.TextIOWrapper(Unseekable(raw), encoding="utf-8", errors="surrogateescape", newline="")))


def test_a_stream_read_once_is_refused_where_its_bad_line_is_met() -> None:
    raw = (HEAD + "\r\n" + CHARGE + "\r\n").encode() + CHARGE.encode().replace(b"acme", b"\xff") + b"\r\n"

    reader = read(opened(Unseekable(raw)))

    assert isinstance(next(reader), Line)  # line 2 came before line 3 was read
    with pytest.raises(NotAReport, match="line 3 is not UTF-8"):
        next(reader)


class Unseekable(io.BytesIO):
    """Bytes that can be read once, as a pipe's."""

    def seekable(self) -> bool:
        return False
