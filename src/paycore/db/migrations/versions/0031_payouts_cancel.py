"""PostgreSQL only: `paycore_payouts_cancel`, a payout's cancel in one call (ADR 0026 step
3).

A payout's cancel (`POST /v1/payouts/{payout_id}/cancel`: `paycore.payouts.service.cancel`
inside `idempotency.run`) is, through SQLAlchemy Core in one transaction: the key's claim, the
payout's read for update, its compare-and-set to `canceled`, the hold's read with its
resolution and entries, the void transfer, the hold's two accounts' facts read and their
pending totals released, the state event (its snapshot, numbered after the payout's last), the
history's read and the key's answer. This function writes all of them from the plan
`paycore.payouts.cancel_plan` made from the payout as read, in one prepared call in autocommit
(ADR 0011's way): the key claimed first (queued on its advisory lock as every claim is,
revision 0020) with its answer; the payout's compare-and-set, which moves it only if it is
still what the plan read (status, `updated_at_us`, attempts: the race with a worker's claim is
decided by this row's lock, as on the reference path); the void (the unique (tenant_id,
pending_id) refuses a second); the hold's two entries' accounts' pending totals released in
account id order (the reference path's lock order); the state event (published: the trigger of
revision 0015 queues it for the tenant's webhook endpoints), numbered as `paycore.audit.write`
numbers it.

It commits a success only. It returns false, having written nothing, when the key exists; it
raises PC012 (nothing written) when the payout is missing or has moved since it was read, or
its hold is not on two accounts: the caller then runs the reference path, which replays the
key or answers the 409 with the current status, as it always has. Every statement filters by
`p_tenant_id`, its first argument (a distributed PostgreSQL can run the call on the tenant's
node).

New function only: code of 0023-0030 never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.payouts.cancel_repository`'s).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 09:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_SIGNATURE = (
    "paycore_payouts_cancel(text, text, text, bigint, bigint, integer, text, text, text, bigint, integer, text,"
    " bigint, text, bigint, text, text, text, text, text, text, text, text, text)"
)

_CREATE = f"""
CREATE FUNCTION paycore_payouts_cancel(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_now_us bigint,
    p_expires_at_us bigint,
    -- the key's answer (200 and the payout's JSON), stored with its claim
    p_response_status integer,
    p_response_body text,
    p_payout_id text,
    -- the payout as the plan read it: moved only if it still is
    p_from_status text,
    p_updated_before_us bigint,
    p_attempts integer,
    p_to_status text,
    p_updated_at_us bigint,
    p_transfer_id text,
    p_amount_minor bigint,
    p_void_id text,
    -- the state event (data and snapshot as paycore.audit encodes them)
    p_event_id text,
    p_event_type text,
    p_event_from text,
    p_event_to text,
    p_event_cause text,
    p_actor text,
    p_event_data text,
    p_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    entry record;
    released integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_response_status, p_response_body, p_now_us, p_expires_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays or refuses it
    END IF;

    UPDATE payouts SET status = p_to_status, updated_at_us = p_updated_at_us, fault_code = NULL,
        faulted_at_us = NULL, next_attempt_at_us = NULL, claimed_by = NULL, claimed_until_us = NULL,
        in_doubt_since_us = NULL
    WHERE tenant_id = p_tenant_id AND id = p_payout_id AND status = p_from_status
        AND updated_at_us = p_updated_before_us AND attempts = p_attempts AND transfer_id = p_transfer_id
        AND amount_minor = p_amount_minor;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payout % moved since it was read', p_payout_id USING ERRCODE = 'PC012';
    END IF;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_void_id, 'void', p_transfer_id, NULL, NULL, NULL, 'payout', p_payout_id, p_payout_id,
        '{{}}', NULL, p_updated_at_us);

    -- In id order, as every transfer locks its accounts: no deadlock with the reference path.
    FOR entry IN
        SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
        WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
        ORDER BY e.account_id
    LOOP
        UPDATE ledger_accounts SET
            debits_pending_minor = debits_pending_minor
                - CASE WHEN entry.direction = 'debit' THEN entry.amount_minor ELSE 0 END,
            credits_pending_minor = credits_pending_minor
                - CASE WHEN entry.direction = 'credit' THEN entry.amount_minor ELSE 0 END
        WHERE tenant_id = p_tenant_id AND id = entry.account_id;
        IF NOT FOUND OR entry.amount_minor <> p_amount_minor THEN
            RAISE EXCEPTION 'the hold % is not the payout''s', p_transfer_id USING ERRCODE = 'PC012';
        END IF;
        released := released + 1;
    END LOOP;
    IF released <> 2 THEN
        RAISE EXCEPTION 'a payout holds on two accounts, found %', released USING ERRCODE = 'PC012';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_id, 'state_change', p_event_type, 'payout', p_payout_id, p_event_from, p_event_to,
        p_event_cause, p_actor, p_event_data,
        (SELECT COALESCE(MAX(object_sequence), 0) + 1 FROM events
         WHERE tenant_id = p_tenant_id AND object_id = p_payout_id),
        p_snapshot, p_updated_at_us);
    RETURN true;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
