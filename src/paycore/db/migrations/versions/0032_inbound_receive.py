"""PostgreSQL only: `paycore_inbound_receive`, the processor's webhook received in one call in
its plain case (ADR 0026 step 3).

The processor's webhook (`POST /v1/webhooks/processor`: `paycore.inbound.service.receive`) is,
through SQLAlchemy Core in one transaction: the event stored under its id (`ON CONFLICT DO
NOTHING`: a redelivery is a no-op), the payment it names read for update, the evidence judged,
the event on the payment's audit log, and the stored event's status. In the plain case a
charge event finds its payment already in the status it proves (the processor's synchronous
answer settled it first): the event is kept `stale` and nothing else changes. This function
writes that case from the plan `paycore.inbound.receive_plan` made, in one prepared call in
autocommit (ADR 0011's way), in the reference path's order: the event stored (as the reference
path leaves it: `stale`, tried once, done), then the payment locked, then the audit event.

It commits a success only. It returns `duplicate`, having written nothing, for an event stored
before, and `stale` once written; it raises PC013 (nothing written) when the payment is
missing, not in the status the event proves, or of another amount or currency: the caller
then runs the reference path, which decides as it always has. Every statement filters by
`p_tenant_id`, its first argument (a distributed PostgreSQL can run the call on the tenant's
node).

New function only: code of 0023-0031 never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.inbound.receive_repository`'s).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06 11:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

_SIGNATURE = (
    "paycore_inbound_receive(text, text, text, text, text, text, bigint, text, text, bigint, text, text, text,"
    " text, text, text)"
)

_CREATE = """
CREATE FUNCTION paycore_inbound_receive(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done
    p_event_id text,
    p_type text,
    p_object_type text,
    p_request_id text,
    p_payload text,
    p_now_us bigint,
    p_status text,
    -- what the payment named by p_request_id must be
    p_payment_status text,
    p_amount_minor bigint,
    p_currency text,
    -- the event on the payment's audit log (its data as paycore.audit encodes it)
    p_audit_event_id text,
    p_audit_type text,
    p_audit_object_type text,
    p_actor text,
    p_audit_data text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_request_id, p_payload, p_status, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    PERFORM 1 FROM payments
    WHERE tenant_id = p_tenant_id AND id = p_request_id AND status = p_payment_status
        AND amount_minor = p_amount_minor AND currency = p_currency
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payment % is not % for the event''s amount', p_request_id, p_payment_status
            USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, p_audit_object_type, p_request_id, NULL, NULL,
        p_status, p_actor, p_audit_data, p_now_us);
    RETURN p_status;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
