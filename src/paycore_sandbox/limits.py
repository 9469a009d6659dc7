"""Every bound of the sandbox, named, in one place (units last)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

DEFAULT_DATABASE_URL: Final = "sqlite:///./paycore-sandbox.db"
DEFAULT_WEBHOOK_URL: Final = "http://127.0.0.1:8000/v1/webhooks/processor"
DEFAULT_WEBHOOK_SECRET: Final = "whsec_sandbox_dev"

REQUEST_ID_LENGTH_MAX: Final = 255
MERCHANT_ID_LENGTH_MAX: Final = 64
TOKEN_LENGTH_MAX: Final = 64
DESCRIPTION_LENGTH_MAX: Final = 1000
BENEFICIARY_NAME_LENGTH_MAX: Final = 140
IBAN_LENGTH_MAX: Final = 64  # as written, spaces included (an IBAN is at most 34 characters compact)
BIC_LENGTH_MAX: Final = 11
ROUTING_NUMBER_LENGTH: Final = 9
ACCOUNT_NUMBER_LENGTH_MIN: Final = 4
ACCOUNT_NUMBER_LENGTH_MAX: Final = 17  # NACHA's DFI account number field

# What one bank file can carry: NACHA's amount fields are 10 digits per entry and 12 per
# batch; the SEPA credit transfer scheme allows 999,999,999.99 EUR per payment.
ACH_AMOUNT_MINOR_MAX: Final = 9_999_999_999
ACH_BATCH_TOTAL_MINOR_MAX: Final = 999_999_999_999
SEPA_AMOUNT_MINOR_MAX: Final = 99_999_999_999
SEPA_BATCH_TOTAL_MINOR_MAX: Final = 9_007_199_254_740_991  # 2^53 - 1, so JSON readers get it exactly
BANK_BATCH_MAX_MAX: Final = 10_000
BANK_STEP_MS_MAX: Final = 86_400_000

# The HTTP service (`paycore processor serve`): its body bound defaults to paycore's
# (PAYCORE_BODY_BYTES_MAX sets both); an admin token is 16 to 256 printable ASCII characters
# without spaces, so that a short one is refused rather than guessed.
BODY_BYTES_MAX: Final = 1_048_576
ADMIN_TOKEN_LENGTH_MIN: Final = 16
ADMIN_TOKEN_LENGTH_MAX: Final = 256

# The HTTP webhook sink (`paycore_sandbox.sink`): kept-alive connections per destination, at
# most this many (so at most this many deliveries at once through one sink); an idle one is
# closed rather than reused after WEBHOOK_CONNECTION_IDLE_MS_MAX, below the keep-alive time of
# paycore's server (PAYCORE_HTTP_KEEPALIVE_IDLE_MS, 5 s), so the receiver is rarely the one
# closing it; an answer's body is read up to WEBHOOK_ANSWER_BYTES_MAX, and a longer one closes
# the connection.
WEBHOOK_CONNECTIONS_MAX: Final = 4
WEBHOOK_CONNECTION_IDLE_MS_MAX: Final = 2_000
WEBHOOK_ANSWER_BYTES_MAX: Final = 65_536

# Authorizations (a charge with capture "manual"): how long one lives uncaptured before it
# expires (a card network's usual seven days), and the lifetime of the test token
# tok_expires_quickly, short enough for a test to watch.
AUTHORIZATION_LIFETIME_MS: Final = 7 * 86_400_000
QUICK_AUTHORIZATION_LIFETIME_MS: Final = 2_000

# Disputes (disputes.py): the evidence text's bound (SPEC §6.2), the reasons a dispute may give
# (the card networks' categories, as public processors name them), and the bound of each of the
# dispute settings' times.
EVIDENCE_TEXT_LENGTH_MAX: Final = 20_000
DISPUTE_REASONS: Final = (
    "fraudulent",
    "unrecognized",
    "duplicate",
    "product_not_received",
    "product_unacceptable",
    "subscription_canceled",
    "credit_not_processed",
    "general",
)
DISPUTE_TYPES: Final = ("chargeback", "inquiry")
DISPUTE_STEP_MS_MAX: Final = 90 * 86_400_000

HOLD_MS_MAX: Final = 60_000  # how long the HTTP server sits on a dropped request or answer
DELAY_MS_MAX: Final = 60_000
SETTLE_LATE_MS_MAX: Final = 86_400_000
RULES_MAX: Final = 50
NEXT_N_MAX: Final = 1_000_000
# How far a report_amount_delta or report_fee_delta fault moves a line, either way.
REPORT_DELTA_MINOR_MAX: Final = 1_000_000_000


@dataclass(frozen=True)
class SandboxSettings:
    """Defaults of a run and the bounds of the background work."""

    hold_ms: int = 1_000  # used when no fault plan says otherwise
    settle_late_ms: int = 2_000  # tok_pending, and settle_late without a plan value
    webhook_attempts_max: int = 20
    webhook_backoff_ms_first: int = 500
    webhook_backoff_ms_max: int = 60_000
    webhook_timeout_ms: int = 5_000
    webhook_batch_max: int = 100
    # Deliveries in flight at once (one object's events are still sent one after another, in
    # order); a sink may allow fewer (`sink.concurrency_max`, e.g. its connections).
    webhook_concurrency_max: int = 4
    settle_batch_max: int = 100
    background_rounds_max: int = 100  # per wake-up of the background loop
    lease_ms: int = 30_000  # a webhook being sent is not picked up by another deliverer meanwhile
    report_rows_per_fetch: int = 500
    # The bank rail (compressed time: real banks take hours and days, see docs/sandbox.md).
    bank_batch_window_ms: int = 500  # a batch closes this long after it opened ...
    bank_batch_max: int = 1_000  # ... or when it holds this many payouts
    bank_reject_after_ms: int = 300  # batch close -> the planned rejections
    bank_settle_after_ms: int = 1_000  # batch close -> the other payouts settle
    bank_return_after_ms: int = 1_000  # settlement -> a planned return
    bank_late_return_after_ms: int = 3_000  # settlement -> a late return (R10, FOCR)
    bank_steps_max: int = 100  # payouts moved (and batches closed) per transaction
    ach_fee_minor: int = 25  # charged at settlement
    sepa_fee_minor: int = 20
    ach_return_fee_minor: int = 200  # charged on a return
    sepa_return_fee_minor: int = 500
    sepa_return_charges_minor: int = 100  # deducted from the returned amount by the AC04 test account
    ach_sec_code: str = "PPD"  # the NACHA batch's standard entry class: PPD (people) or CCD (companies)
    # Disputes (compressed time, as the bank rail's): a tok_disputed charge is disputed this long
    # after it succeeds; a dispute answered with evidence is decided this long after; one not
    # answered within its evidence window is lost (an inquiry becomes a chargeback). Networks
    # give 7 to 30 days; tests set milliseconds.
    dispute_open_after_ms: int = 1_000
    dispute_decision_after_ms: int = 1_000
    dispute_evidence_window_ms: int = 7 * 86_400_000
    dispute_fee_minor: int = 1_500  # charged when a chargeback opens (an inquiry costs nothing)
    dispute_decision_seed: int = 0  # decides evidence that is neither winning_evidence nor losing_evidence

    def __post_init__(self) -> None:
        assert 0 <= self.hold_ms <= HOLD_MS_MAX
        assert 0 <= self.settle_late_ms <= SETTLE_LATE_MS_MAX
        assert self.webhook_attempts_max >= 1
        assert 1 <= self.webhook_backoff_ms_first <= self.webhook_backoff_ms_max
        assert self.webhook_timeout_ms >= 1
        assert self.webhook_batch_max >= 1 and self.settle_batch_max >= 1
        assert self.webhook_concurrency_max >= 1
        assert self.lease_ms > self.webhook_timeout_ms, "a lease outlives the send it covers"
        assert 1 <= self.bank_batch_max <= BANK_BATCH_MAX_MAX and self.bank_steps_max >= 1
        steps_ms = (
            self.bank_batch_window_ms,
            self.bank_reject_after_ms,
            self.bank_settle_after_ms,
            self.bank_return_after_ms,
            self.bank_late_return_after_ms,
        )
        assert all(0 <= step_ms <= BANK_STEP_MS_MAX for step_ms in steps_ms)
        assert self.bank_batch_window_ms >= 1, "a batch is open for a while: the payout that opens it joins it"
        fees_minor = (self.ach_fee_minor, self.sepa_fee_minor, self.ach_return_fee_minor, self.sepa_return_fee_minor)
        assert all(type(fee) is int and fee >= 0 for fee in fees_minor)
        assert type(self.sepa_return_charges_minor) is int and self.sepa_return_charges_minor >= 0
        assert self.ach_sec_code in ("PPD", "CCD")
        dispute_steps_ms = (self.dispute_open_after_ms, self.dispute_decision_after_ms, self.dispute_evidence_window_ms)
        assert all(0 <= step_ms <= DISPUTE_STEP_MS_MAX for step_ms in dispute_steps_ms)
        assert type(self.dispute_fee_minor) is int and self.dispute_fee_minor >= 0
        assert type(self.dispute_decision_seed) is int and self.dispute_decision_seed >= 0


# The dispute evidence window of a sandbox opened without explicit settings (`paycore processor
# serve`, `paycore serve --dev`): milliseconds, so a demo can watch a dispute lost by silence.
DISPUTE_EVIDENCE_WINDOW_ENV: Final = "PAYCORE_SANDBOX_DISPUTE_EVIDENCE_WINDOW_MS"


def settings_from_environment(environment: Mapping[str, str]) -> SandboxSettings:
    """The defaults, with what the environment sets (a value that is not a whole number of
    milliseconds within the bound stops the sandbox: a typo is not a seven-day window)."""
    raw = environment.get(DISPUTE_EVIDENCE_WINDOW_ENV)
    if raw is None:
        return SandboxSettings()
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) <= DISPUTE_STEP_MS_MAX:
        raise ValueError(f"{DISPUTE_EVIDENCE_WINDOW_ENV} is 1 to {DISPUTE_STEP_MS_MAX} milliseconds, not {raw!r}")
    return SandboxSettings(dispute_evidence_window_ms=int(raw))


# The admin token (paycore_sandbox.admin): its variable and its rule, here with no web framework,
# so that the command line reads them without importing one.
ADMIN_TOKEN_ENV: Final = "PAYCORE_SANDBOX_ADMIN_TOKEN"


def admin_token_problem(token: str) -> str | None:
    """Why `token` cannot be an admin token, or None."""
    if not ADMIN_TOKEN_LENGTH_MIN <= len(token) <= ADMIN_TOKEN_LENGTH_MAX:
        return f"the admin token must be {ADMIN_TOKEN_LENGTH_MIN} to {ADMIN_TOKEN_LENGTH_MAX} characters"
    if not all("!" <= character <= "~" for character in token):
        return "the admin token must be printable ASCII without spaces"
    return None
