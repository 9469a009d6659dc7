"""PostgreSQL only: the bank's `returned` words that still took the reference path, each in one
call (ADR 0026 step 3).

- `paycore_inbound_refuse_payout_return`, new: a `returned` word for a payout `settled` past its
  return window (Python reads the window from the payout's settlement). The reference path
  changes nothing and writes the refusal's note: the event stored `stale` (a redelivery writes
  nothing and answers `duplicate`), the payout locked and checked `settled` (else PC013) and the
  audit event with the cause `late`, by 0043's `paycore_inbound_confirm_payout`, then the note
  (`payout.return_refused`, `return_window_closed`) once that stored the event.
- `paycore_payout_return`, new: a settled payout's return step inside a call that settled it
  (the compare-and-set from `settled` as the settlement left it, at its time, to `returned` a
  microsecond later; the state event; the return's and the return fee's postings and adjustments
  by 0049's `paycore_payout_post` and `paycore_payout_adjust`, at the webhook's time).
- `paycore_inbound_return_sent_payout` and `paycore_inbound_return_waiting_payout`, new: a
  `returned` word for a payout not settled yet, moved as the reference path moves it: the
  settlement by 0045's `paycore_inbound_settle_payout` (from `sent`) or 0049's
  `paycore_inbound_settle_waiting_payout` (from `processing` or `in_doubt`, through `sent`), each
  with its own arguments as they are (the event stored `applied`, the bank's fee, the audit
  event; a redelivery answers `duplicate` having written nothing), then `paycore_payout_return`.
  Their first argument is the tenant; the settlement's others are positional (`$2` ...), as that
  function names them.

Every statement filters by `p_tenant_id`, each function's first argument (the functions it calls
take it first too). PC013 undoes the whole call, and the caller takes the reference path. New
functions only: the release before never calls them, and this release falls back to the
reference path where they do not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops them. SQLite: nothing (its statements are
`paycore.inbound.apply_object_repository`'s and `paycore.payouts`' repositories').

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-07 03:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None

_REFUSE_PAYOUT_RETURN = (
    "paycore_inbound_refuse_payout_return(text, text, text, text, text, bigint, text, text, text[], text, text, "
    "text, text, text, text, text, text, text)"
)

_CREATE_REFUSE_PAYOUT_RETURN = """
CREATE FUNCTION paycore_inbound_refuse_payout_return(
    -- paycore_inbound_confirm_payout's arguments (0043): the payout locked in p_statuses
    p_tenant_id text,
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    p_now_us bigint,
    p_result text,
    p_payout_id text,
    p_statuses text[],
    p_audit_event_id text,
    p_audit_type text,
    p_actor text,
    p_audit_data text,
    p_cause text,
    -- the refusal's note (audit.record_other: kind note, unpublished), at p_now_us
    p_note_event_id text,
    p_note_type text,
    p_note_cause text,
    p_note_data text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    stored text;
BEGIN
    stored := paycore_inbound_confirm_payout(p_tenant_id, p_event_id, p_type, p_object_type, p_payload, p_now_us,
        p_result, p_payout_id, p_statuses, p_audit_event_id, p_audit_type, p_actor, p_audit_data, p_cause);
    IF stored = p_result THEN  -- not a redelivery ('duplicate': nothing written)
        INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
            data, created_at_us)
        VALUES (p_tenant_id, p_note_event_id, 'note', p_note_type, 'payout', p_payout_id, NULL, NULL, p_note_cause,
            p_actor, p_note_data, p_now_us);
    END IF;
    RETURN stored;
END $$
"""


def _sibling(pattern: str) -> ModuleType:
    """The migration `*_<pattern>.py` beside this one, loaded: the one home of the SQL text and
    the signatures this one reuses."""
    [path] = Path(__file__).parent.glob(f"*_{pattern}.py")
    spec = importlib.util.spec_from_file_location(f"paycore_migration_{pattern}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SETTLEMENT = _sibling("inbound_payout_settlement")  # 0045
_RETURN = _sibling("inbound_payout_return")  # 0049


def _types(signature: str) -> list[str]:
    return [name.strip() for name in signature[signature.index("(") + 1 : -1].split(",")]


_STEP_TYPES = (
    "text, text, bigint, bigint, text, bigint, text, text, text[], text[], bigint[], text[], text[], text[], text[], "
    "text[], bigint[], text, text, text[], text[], bigint[], text[], text[], text[], bigint, text, text, text, text, "
    "text, text"
)
_PAYOUT_RETURN = f"paycore_payout_return({_STEP_TYPES})"
_CREATE_PAYOUT_RETURN = f"""
CREATE FUNCTION paycore_payout_return(
    p_tenant_id text,
    p_payout_id text,
    -- the payout as the settlement in this call left it: settled at p_settled_at_us (row-locked)
    p_settled_at_us bigint,
    -- as the return leaves it: returned at p_now_us
    p_now_us bigint,
    p_return_code text,
    p_amount_minor bigint,
    p_currency text,
    p_source_account_id text,{_RETURN._POSTINGS}
    -- the postings' and the adjustments' time (the webhook's)
    p_event_at_us bigint,
    -- the return's state event
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    p_snapshot text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    moved record;
BEGIN
    -- What Machine.changes writes for returned (paycore.payouts.lifecycle._columns_of), as 0049's
    -- paycore_inbound_return_payout writes it.
    UPDATE payouts SET status = 'returned', updated_at_us = p_now_us, fault_code = NULL, faulted_at_us = NULL,
        return_code = p_return_code, next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL,
        returned_at_us = p_now_us, in_doubt_since_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = 'succeeded' AND updated_at_us = p_settled_at_us
        AND settled_at_us = p_settled_at_us AND p_settled_at_us < p_now_us
    RETURNING amount_minor, currency, source_account_id INTO moved;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payout % is not settled as planned', p_payout_id USING ERRCODE = 'PC013';
    END IF;
    IF moved.amount_minor <> p_amount_minor OR moved.currency <> p_currency
        OR moved.source_account_id <> p_source_account_id THEN
        RAISE EXCEPTION 'payout % is not the payout planned', p_payout_id USING ERRCODE = 'PC009';
    END IF;
{_RETURN._STATE_EVENT.format(from_state="'settled'", to_state="'returned'")}{_RETURN._POST_AND_ADJUST}END $$
"""


def _composite(name: str, settle: str) -> tuple[str, str]:
    """(signature, CREATE) of a function that calls the settlement function `settle` (its
    signature) with its own arguments, then `paycore_payout_return` with the rest."""
    settle_types = _types(settle)
    count = len(settle_types)
    step = [f"p_{argument}" for argument in _STEP_NAMES]
    signature = f"{name}({', '.join(settle_types)}, {', '.join(_types(_PAYOUT_RETURN)[2:])})"
    arguments = ",\n    ".join(
        [
            "p_tenant_id text",
            *settle_types[1:],
            *(f"{n} {t}" for n, t in zip(step, _types(_PAYOUT_RETURN)[2:], strict=True)),
        ]
    )
    settle_call = f"{settle[: settle.index('(')]}({', '.join(f'${k}' for k in range(1, count + 1))})"
    create = f"""
CREATE FUNCTION {name}(
    -- {settle[: settle.index("(")]}'s arguments as it takes them (the tenant first), then the return's step's
    {arguments}
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    stored text;
BEGIN
    stored := {settle_call};
    IF stored <> ${count} THEN
        RETURN stored;  -- a redelivery ('duplicate'): nothing written
    END IF;
    PERFORM paycore_payout_return(p_tenant_id, $6, {", ".join(step)});
    RETURN stored;
END $$
"""
    return signature, create


# paycore_payout_return's arguments after the tenant and the payout (its third on).
_STEP_NAMES = (
    "settled_at_us", "now_us", "return_code", "amount_minor", "currency", "source_account_id",
    "transfer_ids", "reference_types", "transfer_times", "entry_ids", "entry_transfer_ids", "entry_account_ids",
    "entry_codes", "entry_directions", "entry_amounts", "adjustment_code", "effective_on", "adjustment_ids",
    "adjustment_kinds", "adjustment_amounts", "adjustment_transfer_ids", "adjustment_event_ids",
    "adjustment_event_data", "event_at_us", "state_event_id", "state_type", "state_cause", "actor", "state_data",
    "snapshot",
)  # fmt: skip
_RETURN_SENT_PAYOUT, _CREATE_RETURN_SENT_PAYOUT = _composite(
    "paycore_inbound_return_sent_payout", _SETTLEMENT._SETTLE_PAYOUT
)
_RETURN_WAITING_PAYOUT, _CREATE_RETURN_WAITING_PAYOUT = _composite(
    "paycore_inbound_return_waiting_payout", _RETURN._SETTLE_WAITING_PAYOUT
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for create in (
            _CREATE_REFUSE_PAYOUT_RETURN,
            _CREATE_PAYOUT_RETURN,
            _CREATE_RETURN_SENT_PAYOUT,
            _CREATE_RETURN_WAITING_PAYOUT,
        ):
            op.execute(create)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in (_RETURN_WAITING_PAYOUT, _RETURN_SENT_PAYOUT, _PAYOUT_RETURN, _REFUSE_PAYOUT_RETURN):
            op.execute(f"DROP FUNCTION {signature}")
