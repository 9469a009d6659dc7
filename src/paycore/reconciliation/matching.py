"""What one line of the settlement report says about the paycore object it names (ADR 0014):
the one home of the break rules, without a database.

`judge(line, known)` compares a report line with what paycore holds for the object (`known`,
None when paycore has no such object) and returns a `Verdict`: the breaks it finds, the final
status the line proves for an object still waiting on the processor (applied later through
that object's machine, as any other evidence), and the fee to book. The rules:

- a line moves money when it is a succeeded charge or refund, a settled payout or a payout
  return; one that names nothing paycore knows and moves money is `missing_in_paycore`
  (a failed or pending charge paycore never sent moved nothing: not a break);
- another currency is `currency_mismatch`, another amount `amount_mismatch` (a return may
  bring back less than was paid out, never more); either way nothing is proved;
- a final status for an object still waiting (a payment or refund `processing` or `in_doubt`,
  a payout `processing`, `in_doubt` or `sent`) is proved, and a return for a `settled` payout
  (a return of a payout paycore does not hold as settled is a mismatch: the settlement line,
  earlier in the same or an earlier report, comes first); a status that contradicts what paycore
  already holds as final, or a line for an object paycore never sent, is `status_mismatch`
  (paycore `failed`, the processor `succeeded` is the worst kind: money moved that paycore
  gave back); a report never moves a state backwards;
- a fee the processor took is booked once; a fee paycore booked before at another amount is
  `fee_mismatch`;
- a manual payment (SPEC §6.1) has a line only when captured: a `charge` `succeeded` line of
  the captured amount, dated by the capture. Its amount is compared with what paycore holds as
  captured (`amount_captured_minor`), or, while the capture's outcome is not known, with what
  the capture asked for; the line proves the capture (`succeeded`, with that amount) only for a
  payment whose capture is in flight or in doubt. A capture line for an authorization paycore
  never sent a capture for (open, canceled, expired, its authorization or cancel in doubt), or
  a line of another status for a manual payment, is `status_mismatch`. The report never states
  an expiry or a cancel (it lists captures only): no line is not the processor's word;
- a dispute line (SPEC §6.2; `dispute_withdrawal`, `dispute_fee`, `dispute_reinstatement`) names
  the dispute by the processor's dispute id (`processor_id`), and moves money: one paycore does
  not know is `missing_in_paycore` (the line alone never makes the dispute; before the chunk,
  the run asks the processor for it, and its answer makes it: `unknown_disputes`). A
  withdrawal is compared with the disputed amount paycore withdrew, a fee line with the fee it
  withdrew with it, a reinstatement with what it reinstated (`amount_mismatch`,
  `currency_mismatch` as any line); a line for money paycore has not moved for the dispute
  (nothing withdrawn: an inquiry; nothing reinstated: not won) is `status_mismatch`. The line
  proves nothing: a dispute moves on its processor's word only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from paycore.reconciliation.report import Line

BreakType = Literal[
    "missing_in_paycore",
    "missing_at_processor",
    "amount_mismatch",
    "currency_mismatch",
    "status_mismatch",
    "fee_mismatch",
    "duplicate_line",
    "malformed_line",
    "manual_resolution_contradicted",
    "unknown_account",  # the line's merchant is no tenant of paycore (chunks.py: judged before this module)
    "item_not_moved",  # what the line proves could not be applied to its object (chunks.py, lifecycle.faults)
]
Kind = Literal["payment", "refund", "payout", "dispute"]

KIND_OF_LINE: Final[dict[str, Kind]] = {
    "charge": "payment",
    "refund": "refund",
    "payout": "payout",
    "payout_return": "payout",
    "dispute_withdrawal": "dispute",
    "dispute_fee": "dispute",
    "dispute_reinstatement": "dispute",
}
DISPUTE_LINE_TYPES: Final = frozenset(line_type for line_type, kind in KIND_OF_LINE.items() if kind == "dispute")
# The statuses in which an object waits on the processor's or bank's word, by kind. A payout
# `processing` or `in_doubt` that a report shows settled was sent: it is moved through `sent`.
WAITING: Final[dict[Kind, frozenset[str]]] = {
    "payment": frozenset({"processing", "in_doubt"}),
    "refund": frozenset({"processing", "in_doubt"}),
    "payout": frozenset({"processing", "in_doubt", "sent"}),
    "dispute": frozenset(),  # a report line never moves a dispute
}
# What each line type proves, by the status it reports; None: nothing final yet.
_PROVES: Final[dict[tuple[str, str], str | None]] = {
    ("charge", "succeeded"): "succeeded",
    ("charge", "failed"): "failed",
    ("charge", "pending"): None,
    ("refund", "succeeded"): "succeeded",
    ("refund", "failed"): "failed",
    ("refund", "pending"): None,
    ("payout", "settled"): "settled",
    ("payout_return", "returned"): "returned",
}
# Final statuses a line agrees with, beyond the one it proves: a payout settled one day and
# returned on a later one is `returned` when its settlement line is read again.
_AGREES: Final[dict[tuple[str, str], frozenset[str]]] = {
    ("payout", "settled"): frozenset({"settled", "returned"}),
}
_MOVES_MONEY: Final = frozenset({("charge", "succeeded"), ("refund", "succeeded"), ("payout", "settled")})


@dataclass(frozen=True)
class Known:
    """What paycore holds for the object a line names (statuses as the API shows them)."""

    kind: Kind
    id: str
    status: str
    amount_minor: int
    currency: str
    fee_minor: int | None = None  # the processor's fee booked for it before; None: none yet
    # A manual payment (SPEC §6.1): whether a capture was sent (in flight, in doubt, or done).
    # `amount_minor` is then what was captured or asked for; a capture line is compared with it.
    manual: bool = False
    capture_sent: bool = False
    # A dispute: whether paycore moved the money the line names (withdrew it, or reinstated it).
    moved: bool = False


@dataclass(frozen=True)
class Finding:
    type: BreakType
    detail: str


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...] = ()
    proves: str | None = None  # a final status to apply to a waiting object, as evidence
    fee_to_book_minor: int = 0

    @property
    def matched(self) -> bool:
        return not self.findings


def contradicts(kind: Kind, status: str, reported: str) -> bool:
    """Whether the processor's final word `reported` (a charge or refund `succeeded`/`failed`;
    a payout `accepted`, `rejected`, `settled` or `returned`) contradicts an item paycore holds
    as final in `status` (public name): what a manual resolution must never have got wrong."""
    if kind != "payout":
        return reported in ("succeeded", "failed") and status in ("succeeded", "failed") and reported != status
    paid = status in ("sent", "settled", "returned")
    return (status == "failed" and reported in ("accepted", "settled", "returned")) or (paid and reported == "rejected")


def moves_money(line: Line) -> bool:
    return (line.type, line.status) in _MOVES_MONEY or line.type == "payout_return" or line.type in DISPUTE_LINE_TYPES


def reference(line: Line) -> str:
    """The id of the object the line names, in its kind: a dispute line's is the processor's
    dispute id (its request id is the disputed charge's), every other line's its request id."""
    return line.processor_id if line.type in DISPUTE_LINE_TYPES else line.request_id


def judge(line: Line, known: Known | None) -> Verdict:
    """The breaks, the proof and the fee one line gives about `known` (see the module)."""
    if known is None:
        if not moves_money(line):
            return Verdict()
        return Verdict((Finding("missing_in_paycore", f"no {KIND_OF_LINE[line.type]} {reference(line)}"),))
    assert known.kind == KIND_OF_LINE[line.type], "the caller looks the line up in its kind's table"
    if known.kind == "dispute":
        return Verdict(_money_findings(line, known) or _dispute_moved(line, known) or _fee(line, known)[1])
    if known.manual and (line.status != "succeeded" or not known.capture_sent):
        return Verdict(_mismatch(line, known))  # the report lists captures only, of captures sent
    money = _money_findings(line, known)
    if money:
        return Verdict(money)  # a line that disagrees on the money proves nothing
    findings, proves = _status(line, known)
    fee, fee_finding = _fee(line, known)
    return Verdict(findings + fee_finding, proves, fee)


def _money_findings(line: Line, known: Known) -> tuple[Finding, ...]:
    if line.currency != known.currency:
        return (Finding("currency_mismatch", f"report {line.currency}, paycore {known.currency}"),)
    if line.type == "payout_return":
        wrong = line.amount_minor > known.amount_minor  # the returning bank may keep charges
    else:
        wrong = line.amount_minor != known.amount_minor
    if wrong:
        return (Finding("amount_mismatch", f"report {line.amount_minor}, paycore {known.amount_minor}"),)
    return ()


def _status(line: Line, known: Known) -> tuple[tuple[Finding, ...], str | None]:
    reported = _PROVES[(line.type, line.status)]
    if line.type == "payout_return":  # follows the settlement, which paycore must hold first
        if known.status == "settled":
            return (), reported
        return (() if known.status == "returned" else _mismatch(line, known)), None
    if known.status in WAITING[known.kind]:
        if reported is None:
            return (), None  # pending at the processor too: nothing to learn yet
        return (), reported
    agreeing = _AGREES.get((line.type, line.status), frozenset({reported}))
    if known.status in agreeing:
        return (), None
    return _mismatch(line, known), None


def _dispute_moved(line: Line, known: Known) -> tuple[Finding, ...]:
    if known.moved:
        return ()
    what = "reinstated" if line.type == "dispute_reinstatement" else "withdrew"
    detail = f"report {line.type} {line.status}, paycore dispute {known.status} ({what} nothing)"
    return (Finding("status_mismatch", detail),)


def _mismatch(line: Line, known: Known) -> tuple[Finding, ...]:
    detail = f"report {line.type} {line.status}, paycore {known.kind} {known.status}"
    if known.manual and not known.capture_sent:
        detail += " (an authorization paycore sent no capture for)"
    return (Finding("status_mismatch", detail),)


def _fee(line: Line, known: Known) -> tuple[int, tuple[Finding, ...]]:
    if line.fee_minor == 0 and known.fee_minor is None:
        return 0, ()
    if known.fee_minor is None:
        return line.fee_minor, ()
    if known.fee_minor != line.fee_minor:
        return 0, (Finding("fee_mismatch", f"report {line.fee_minor}, booked {known.fee_minor}"),)
    return 0, ()
