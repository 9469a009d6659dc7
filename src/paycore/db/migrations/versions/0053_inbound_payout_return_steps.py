"""PostgreSQL only: the bank's `returned` words that still took the reference path, each in one
call (ADR 0026 step 3).

- `paycore_inbound_refuse_payout_return`, new: a `returned` word for a payout `settled` past its
  return window (Python reads the window from the payout's settlement). The reference path
  changes nothing and writes the refusal's note: the event stored `stale` (a redelivery writes
  nothing and answers `duplicate`), the payout locked and checked `settled` (else PC013) and the
  audit event with the cause `late`, by 0043's `paycore_inbound_confirm_payout`, then the note
  (`payout.return_refused`, `return_window_closed`) once that stored the event.

Every statement filters by `p_tenant_id`, each function's first argument (the functions it calls
take it first too). PC013 undoes the whole call, and the caller takes the reference path. New
functions only: the release before never calls them, and this release falls back to the
reference path where they do not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops them. SQLite: nothing (its statements are
`paycore.inbound.apply_object_repository`'s and `paycore.payouts`' repositories').

Revision ID: 0053
Revises: 0050
Create Date: 2026-12-07 03:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0053"
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


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_REFUSE_PAYOUT_RETURN)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_REFUSE_PAYOUT_RETURN}")
