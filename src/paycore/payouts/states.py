"""The payout state machine (SPEC §11): the one transition table every status change checks.

    scheduled  -> queued        (its execute_on date has come; a worker)
    scheduled  -> canceled      (POST /cancel)
    queued     -> processing    (a worker claims it: compare-and-set, racing cancel)
    queued     -> canceled      (POST /cancel: the same compare-and-set; one of the two wins)
    processing -> sent          (the bank accepted it into a batch: irreversible from here)
    processing -> failed        (the bank refused the request: nothing was sent)
    processing -> in_doubt      (no answer: timeout, dropped connection, 5xx)
    in_doubt   -> sent | failed (by the bank's answer to a status query or a webhook only)
    sent       -> settled       (paid to the beneficiary)
    sent       -> failed        (rejected by the bank before settlement: the money comes back)
    settled    -> returned      (sent back by the beneficiary's bank, inside the return window)

`failed`, `returned` and `canceled` are terminal. `settled` is final once its return window
has closed (docs/payouts.md). `in_doubt` is never left by a guess.

Stored and public names. The drawing above, the API, the events table and the docs use the
public names. The database stores `succeeded` for public `settled`, the word payments and
refunds store for the same fact ("the counterparty confirmed the money arrived"), so one
stored vocabulary means one thing across domains (docs/migrations.md). `SETTLED` is the
stored value; `public` and `stored` translate, and every renderer and filter goes through
them. Rows written by older code (revision 0004's) may say `settled` until migration 0006
rewrites them:
`LEGACY_NAMES` is the only place that knows, used when a row is read (`normalize`) and when a
query filters on the status (`spellings`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

SCHEDULED: Final = "scheduled"
QUEUED: Final = "queued"
PROCESSING: Final = "processing"
IN_DOUBT: Final = "in_doubt"
SENT: Final = "sent"
SETTLED: Final = "succeeded"  # public name: "settled"
FAILED: Final = "failed"
RETURNED: Final = "returned"
CANCELED: Final = "canceled"

STATUSES: Final = (SCHEDULED, QUEUED, PROCESSING, IN_DOUBT, SENT, SETTLED, FAILED, RETURNED, CANCELED)

TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        (SCHEDULED, QUEUED),
        (SCHEDULED, CANCELED),
        (QUEUED, PROCESSING),
        (QUEUED, CANCELED),
        (PROCESSING, SENT),
        (PROCESSING, FAILED),
        (PROCESSING, IN_DOUBT),
        (IN_DOUBT, SENT),
        (IN_DOUBT, FAILED),
        (SENT, SETTLED),
        (SENT, FAILED),
        (SETTLED, RETURNED),
    }
)
TERMINAL: Final = frozenset({FAILED, RETURNED, CANCELED})
CANCELABLE: Final = frozenset({SCHEDULED, QUEUED})
# The hold on the source account is pending in these; posted from `sent` on.
HELD: Final = frozenset({SCHEDULED, QUEUED, PROCESSING, IN_DOUBT})
# Sent to the bank, or maybe sent, with no final answer yet: a worker asks the bank.
AWAITING_BANK: Final = frozenset({PROCESSING, IN_DOUBT, SENT})


def allowed(from_state: str, to_state: str) -> bool:
    return (from_state, to_state) in TRANSITIONS


# Public name -> stored name where the two differ.
_STORED_NAMES: Final = {"settled": SETTLED}
_PUBLIC_NAMES: Final = {stored_name: public_name for public_name, stored_name in _STORED_NAMES.items()}

# Retired stored spelling -> the stored name that replaced it. Rows written by code older
# than migration 0005 say `settled`; migration 0006 rewrites them and 0007 makes the database
# refuse the old spelling. Removable (with `normalize` and `spellings` becoming identities)
# once 0007 has shipped to every database: no row can hold a legacy spelling after it.
LEGACY_NAMES: Final = {"settled": SETTLED}


def public(stored: str) -> str:
    """The status name the API, the events and the docs use for a stored status."""
    return _PUBLIC_NAMES.get(stored, stored)


def stored(public_name: str) -> str:
    """The stored status for a public status name (the inverse of `public`)."""
    return _STORED_NAMES.get(public_name, public_name)


def normalize(stored_value: str) -> str:
    """The status a row means, whichever spelling wrote it (a row not yet backfilled)."""
    return LEGACY_NAMES.get(stored_value, stored_value)


def spellings(statuses: Iterable[str]) -> tuple[str, ...]:
    """Every stored value that means one of `statuses`: what a query filtering on the status
    must match while a row may hold a legacy spelling (until migration 0006 rewrote them)."""
    wanted = tuple(dict.fromkeys(statuses))
    legacy = tuple(old for old, current in LEGACY_NAMES.items() if current in wanted)
    return wanted + legacy


# One public name per stored status and back: the API's vocabulary is exactly the table's.
assert all(stored(public(status)) == status for status in STATUSES)
assert len({public(status) for status in STATUSES}) == len(STATUSES)
assert not set(LEGACY_NAMES) & set(STATUSES), "a legacy spelling is never a status the code writes"
