"""The fault plan: which calls go wrong, and how, decided reproducibly from a seed.

A plan is a JSON object, validated strictly (unknown faults or fields are refused):

    {"seed": 42, "hold_ms": 1000, "settle_late_ms": 2000,
     "rules": [{"fault": "drop_response", "percent": 30, "ops": ["charge"]},
               {"fault": "error_500", "next_n": 2},
               {"fault": "delay_ms", "delay_ms": 1500, "percent": 100}]}

Every rule is evaluated, in order, on every call whose operation it lists: a `percent` rule
draws from one `random.Random(seed)` (so a run with the same seed and the same calls makes
the same decisions), a `next_n` rule fires on the next N calls it matches. At most one
*transport* fault applies to a call (the first rule that fires); the webhook and settlement
faults combine with it and with each other.

Transport faults (`drop_request`, `drop_response`, `delay_ms`, `error_500`) are applied by
the transport (in-process or the HTTP server); the others change what the sandbox stores
for the object the call creates: `settle_late` makes it pending (a payout: the bank answers
`settle_late_ms` later), `duplicate_webhook` and `reorder_webhooks` change how its webhooks
are delivered, and the `report_*` faults make its lines of the settlement report wrong
(recorded now, applied when the report is written: see settlement.py): left out, an amount,
fee, status or currency changed, written twice, an amount written as a decimal, or an extra
charge nobody was told of. When two rules with a delta fire on one call, the first one's
delta is used. A rule without `ops` applies to `charge` and `refund`; payouts are hit only
by rules that name `payout` or `get_payout`, captures and cancels of authorizations only by
rules that name `capture` or `cancel` (the transport faults and the two webhook faults), and
dispute calls only by rules that name them (`dispute_open`, `dispute_evidence`,
`dispute_accept`, `get_dispute`); `drop_webhook` (the event the dispute call makes is never
sent) applies to the three dispute writes only.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paycore_sandbox.limits import (
    DELAY_MS_MAX,
    HOLD_MS_MAX,
    NEXT_N_MAX,
    REPORT_DELTA_MINOR_MAX,
    RULES_MAX,
    SETTLE_LATE_MS_MAX,
    SandboxSettings,
)

Op = Literal[
    "charge",
    "refund",
    "payout",
    "capture",
    "cancel",
    "get_charge",
    "get_refund",
    "get_payout",
    "dispute_open",
    "dispute_evidence",
    "dispute_accept",
    "get_dispute",
]
TransportFault = Literal["drop_request", "drop_response", "delay_ms", "error_500"]
# The faults kept per object in `sandbox_report_faults` (whose CHECK lists these names).
ReportFault = Literal[
    "report_drop_line",
    "report_amount_delta",
    "report_fee_delta",
    "report_status",
    "report_unknown_charge",
    "report_currency",
    "report_duplicate_line",
    "report_malformed_line",
]
FaultName = Literal[TransportFault, "duplicate_webhook", "reorder_webhooks", "drop_webhook", "settle_late", ReportFault]

OPS: Final[tuple[Op, ...]] = get_args(Op)
REPORT_FAULTS: Final[tuple[ReportFault, ...]] = get_args(ReportFault)
_TRANSPORT_FAULTS: Final[dict[str, TransportFault]] = {name: name for name in get_args(TransportFault)}
WRITE_OPS: Final[frozenset[str]] = frozenset({"charge", "refund", "payout"})
# A capture or a cancel closes an existing charge: its webhook faults apply (to the closing
# event), not settle_late or the report's, which belong to the call that created the object.
# The dispute calls that change a dispute (an open also comes from the background for a
# tok_disputed charge: the plan is asked then, and its webhook faults apply to that dispute).
DISPUTE_WRITE_OPS: Final[frozenset[str]] = frozenset({"dispute_open", "dispute_evidence", "dispute_accept"})
WEBHOOK_FAULT_OPS: Final[frozenset[str]] = WRITE_OPS | {"capture", "cancel"} | DISPUTE_WRITE_OPS
_WEBHOOK_FAULTS: Final = frozenset({"duplicate_webhook", "reorder_webhooks"})
PERCENT_DRAW: Final = 100  # percent rules draw an integer in [0, 100): no floats


class FaultPlanError(ValueError):
    """The plan is not valid; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _write_ops() -> list[Op]:
    return ["charge", "refund"]  # the default from before payouts existed: a payout is named to be hit


class Rule(_Strict):
    fault: FaultName
    percent: Annotated[int, Field(ge=0, le=100)] | None = None
    next_n: Annotated[int, Field(ge=1, le=NEXT_N_MAX)] | None = None
    ops: Annotated[list[Op], Field(min_length=1, max_length=len(OPS))] = Field(default_factory=_write_ops)
    delay_ms: Annotated[int, Field(ge=0, le=DELAY_MS_MAX)] | None = None
    amount_delta_minor: Annotated[int, Field(ge=-REPORT_DELTA_MINOR_MAX, le=REPORT_DELTA_MINOR_MAX)] | None = None
    fee_delta_minor: Annotated[int, Field(ge=-REPORT_DELTA_MINOR_MAX, le=REPORT_DELTA_MINOR_MAX)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Rule:
        if (self.percent is None) == (self.next_n is None):
            raise ValueError("a rule needs exactly one of 'percent' (0-100) or 'next_n'")
        if (self.fault == "delay_ms") != (self.delay_ms is not None):
            raise ValueError("'delay_ms' is required for the delay_ms fault and allowed for no other")
        for field, fault in (("amount_delta_minor", "report_amount_delta"), ("fee_delta_minor", "report_fee_delta")):
            delta = getattr(self, field)
            if (self.fault == fault) != (delta is not None):
                raise ValueError(f"'{field}' is required for the {fault} fault and allowed for no other")
            if delta == 0:
                raise ValueError(f"'{field}' must not be 0: a delta of 0 leaves the report right")
        if len(set(self.ops)) != len(self.ops):
            raise ValueError("'ops' lists an operation twice")
        if self.fault == "drop_webhook" and not DISPUTE_WRITE_OPS.issuperset(self.ops):
            ops = ", ".join(f"'{op}'" for op in sorted(DISPUTE_WRITE_OPS))
            raise ValueError(f"drop_webhook applies to the dispute calls {ops} only")
        allowed = WEBHOOK_FAULT_OPS if self.fault in _WEBHOOK_FAULTS else WRITE_OPS
        if self.fault not in _TRANSPORT_FAULTS and self.fault != "drop_webhook" and not allowed.issuperset(self.ops):
            also = " (and to 'capture' and 'cancel')" if self.fault in _WEBHOOK_FAULTS else ""
            raise ValueError(
                f"{self.fault} applies to the write operations 'payout', 'charge' and 'refund' only{also}"
                + (" (and to the dispute calls)" if also else "")
            )
        if self.fault == "report_unknown_charge" and self.ops != ["charge"]:
            raise ValueError('report_unknown_charge applies to \'charge\' only: set "ops": ["charge"]')
        return self


class FaultPlan(_Strict):
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    hold_ms: Annotated[int, Field(ge=0, le=HOLD_MS_MAX)] | None = None
    settle_late_ms: Annotated[int, Field(ge=0, le=SETTLE_LATE_MS_MAX)] | None = None
    rules: Annotated[list[Rule], Field(max_length=RULES_MAX)] = Field(default_factory=list)


def parse_plan(raw: object) -> FaultPlan:
    """Validate a plan given as parsed JSON; raise FaultPlanError with every problem found."""
    if not isinstance(raw, Mapping):
        raise FaultPlanError("a fault plan is a JSON object")
    try:
        return FaultPlan.model_validate(dict(raw))
    except ValidationError as error:
        problems = []
        for detail in error.errors(include_url=False):
            where = ".".join(str(part) for part in detail["loc"]) or "plan"
            problems.append(f"{where}: {detail['msg']}")
        raise FaultPlanError("invalid fault plan: " + "; ".join(problems)) from None


@dataclass(frozen=True)
class Decision:
    """What goes wrong with one call. `hold_ms` and `settle_late_ms` are the plan's values at
    the time of the decision, so a call is handled by one consistent plan."""

    transport: TransportFault | None = None
    delay_ms: int = 0
    duplicate_webhook: bool = False
    reorder_webhooks: bool = False
    drop_webhook: bool = False
    settle_late: bool = False
    report_drop_line: bool = False
    report_amount_delta_minor: int = 0  # 0: the line's amount is right
    report_fee_delta_minor: int = 0
    report_status: bool = False
    report_unknown_charge: bool = False
    report_currency: bool = False
    report_duplicate_line: bool = False
    report_malformed_line: bool = False
    hold_ms: int = SandboxSettings.hold_ms
    settle_late_ms: int = SandboxSettings.settle_late_ms
    rules_fired: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert self.delay_ms == 0 or self.transport == "delay_ms"
        assert 0 <= self.hold_ms <= HOLD_MS_MAX and 0 <= self.delay_ms <= DELAY_MS_MAX
        assert abs(self.report_amount_delta_minor) <= REPORT_DELTA_MINOR_MAX
        assert abs(self.report_fee_delta_minor) <= REPORT_DELTA_MINOR_MAX


NO_FAULTS: Final = Decision()


class FaultInjector:
    """The current plan of a sandbox and its state (the random stream, the next_n counts).

    Decisions are made one at a time under a lock, so the sequence of decisions depends only
    on the seed and the sequence of calls. This lock orders decisions; it protects no money.
    """

    def __init__(self, settings: SandboxSettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._plan: FaultPlan | None = None
        self._random = random.Random(0)
        self._remaining: list[int] = []

    def set_plan(self, raw: object) -> FaultPlan:
        plan = parse_plan(raw)
        with self._lock:
            self._plan = plan
            self._random = random.Random(plan.seed)
            self._remaining = [rule.next_n or 0 for rule in plan.rules]
        return plan

    def clear(self) -> None:
        with self._lock:
            self._plan = None
            self._remaining = []

    def describe(self) -> dict[str, Any]:
        """The plan in force with its effective values, and what is left of each next_n."""
        with self._lock:
            plan = self._plan or FaultPlan()
            described = plan.model_dump(exclude_none=True)
            described["hold_ms"] = self._hold_ms(plan)
            described["settle_late_ms"] = self._settle_late_ms(plan)
            described["active"] = self._plan is not None
            for rule, remaining in zip(described["rules"], self._remaining, strict=True):
                if "next_n" in rule:
                    rule["remaining"] = remaining
            return described

    def decide(self, op: Op) -> Decision:
        assert op in OPS, f"unknown operation {op!r}"
        with self._lock:
            plan = self._plan
            if plan is None:
                return Decision(hold_ms=self._settings.hold_ms, settle_late_ms=self._settings.settle_late_ms)
            fired = [index for index, rule in enumerate(plan.rules) if op in rule.ops and self._fires(index, rule)]
            return self._combine(plan, [plan.rules[index] for index in fired], tuple(fired))

    def _fires(self, index: int, rule: Rule) -> bool:
        if rule.next_n is not None:
            if self._remaining[index] == 0:
                return False
            self._remaining[index] -= 1
            return True
        assert rule.percent is not None
        return self._random.randrange(PERCENT_DRAW) < rule.percent

    def _combine(self, plan: FaultPlan, rules: list[Rule], fired: tuple[int, ...]) -> Decision:
        transport = next((rule for rule in rules if rule.fault in _TRANSPORT_FAULTS), None)
        names = {rule.fault for rule in rules}
        amount_delta = next((rule.amount_delta_minor for rule in rules if rule.amount_delta_minor is not None), 0)
        fee_delta = next((rule.fee_delta_minor for rule in rules if rule.fee_delta_minor is not None), 0)
        return Decision(
            transport=_TRANSPORT_FAULTS[transport.fault] if transport is not None else None,
            delay_ms=(transport.delay_ms or 0) if transport is not None else 0,
            duplicate_webhook="duplicate_webhook" in names,
            reorder_webhooks="reorder_webhooks" in names,
            drop_webhook="drop_webhook" in names,
            settle_late="settle_late" in names,
            report_drop_line="report_drop_line" in names,
            report_amount_delta_minor=amount_delta,
            report_fee_delta_minor=fee_delta,
            report_status="report_status" in names,
            report_unknown_charge="report_unknown_charge" in names,
            report_currency="report_currency" in names,
            report_duplicate_line="report_duplicate_line" in names,
            report_malformed_line="report_malformed_line" in names,
            hold_ms=self._hold_ms(plan),
            settle_late_ms=self._settle_late_ms(plan),
            rules_fired=fired,
        )

    def _hold_ms(self, plan: FaultPlan) -> int:
        return self._settings.hold_ms if plan.hold_ms is None else plan.hold_ms

    def _settle_late_ms(self, plan: FaultPlan) -> int:
        return self._settings.settle_late_ms if plan.settle_late_ms is None else plan.settle_late_ms
