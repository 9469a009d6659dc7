"""PostgreSQL only: `paycore_refunds_create`, a refund's creating phase in one call (ADR 0026
step 3).

Creating a refund (`POST /v1/payments/{id}/refunds`: `paycore.refunds.service.create_refund`
inside `idempotency.run`) was twelve statements through SQLAlchemy Core in one transaction:
the key's claim, the tenant's settings (the approval threshold), the ceiling's conditional
UPDATE of the payment, the clearing account's read, the pending transfer, the two accounts'
totals, the entries, the refund, its birth event, the events' read back (the answer's history)
and the key's answer. This function writes them from the plan `paycore.refunds.create_plan`
made, in one prepared call in autocommit (ADR 0011's way): the key claimed first (queued on its
advisory lock as every claim is, revision 0020) with its answer; the ceiling's reservation
(`paycore.refunds.ceiling.reserve`'s UPDATE, with its conditions: the payment in the refundable
status, `refunded_minor + amount <= amount_minor`), with one more condition, a copy of
`paycore.refunds.create_plan.needs_approval`: the sum stays within the tenant's threshold, read
from `tenant_settings` in the same statement (a refund that needs approval is the reference
path's); the pending transfer (owned by the refund: revision 0024's triggers accept its entry on
the system account); the destination's and the clearing account's pending totals in id order
(the reference path's lock order, after the payment's row as `create_refund` locks them) with
the checks of `paycore.ledger.postings._apply` (the range, the balance limit of revision 0010,
the overdraft flag: copies listed in `paycore.ledger.limits`, held to it by
tests/integration/ledger/test_limit_copies.py); each entry numbered with its account's next
sequence number; the refund `pending` and its event, numbered 1 (the trigger of revision 0015
queues it for the tenant's webhook endpoints).

It commits a success only. It returns false, having written nothing, when the key exists; it
raises PC011 (nothing written) when the reservation finds no succeeded payment with room for
the amount within the tenant's threshold, or a payment whose currency or destination is not the
plan's, or a destination that is the clearing account; PC001/PC002/PC003 on a limit: the caller
then runs the reference path, which replays or refuses the key, refuses the refund (not found,
not refundable, over the ceiling), stores it `requires_approval`, or records the refusal, as it
always has. Every statement filters by `p_tenant_id`, its first argument (a distributed
PostgreSQL can run the call on the tenant's node).

New function only: older code never calls it, and this release's code falls back to the
reference path where it does not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION
stays 0023. Downgrade drops it. SQLite: nothing (its statements are
`paycore.refunds.create_repository`'s).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579
_SIGNATURE = (
    "paycore_refunds_create(text, text, text, bigint, integer, text, text, text, text, text, bigint, text, text,"
    " text, text[], text, text, text, text, text, text, text, text)"
)

_CREATE = f"""
CREATE FUNCTION paycore_refunds_create(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_now_us bigint,
    -- the key's answer: the refund and its history, rendered
    p_response_status integer,
    p_response_body text,
    p_refund_id text,
    p_payment_id text,
    -- paycore.refunds.ceiling.REFUNDABLE_STATUS
    p_refundable_status text,
    p_currency text,
    p_amount_minor bigint,
    -- the payment's destination (debited), the processor clearing account's code (credited)
    p_destination_id text,
    p_clearing_code text,
    p_transfer_id text,
    -- the entries' ids: the destination's, the clearing account's
    p_entry_ids text[],
    p_reason text,
    -- the refund's birth event (its data and snapshot as paycore.audit encodes them)
    p_event_id text,
    p_event_type text,
    p_event_to_state text,
    p_event_cause text,
    p_event_actor text,
    p_event_data text,
    p_event_snapshot text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    paid_currency text;
    paid_to text;
    account record;
    slot integer;
    delta_debit bigint;
    delta_credit bigint;
    debits_posted bigint;
    credits_posted bigint;
    debits_pending bigint;
    credits_pending bigint;
    count_after bigint;
    figures_after numeric[];
    figures_before numeric[];
    seen integer[] := ARRAY[]::integer[];
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, p_response_status, p_response_body, p_now_us, NULL)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller's reference path replays or refuses it
    END IF;

    -- The ceiling (paycore.refunds.ceiling.reserve), and four eyes by sum: a copy of
    -- paycore.refunds.create_plan.needs_approval (a refund past the threshold is not this call's).
    UPDATE payments SET refunded_minor = refunded_minor + p_amount_minor
    WHERE tenant_id = p_tenant_id AND id = p_payment_id AND status = p_refundable_status
        AND refunded_minor + p_amount_minor <= amount_minor
        AND refunded_minor + p_amount_minor <= coalesce(
            (SELECT s.refund_approval_threshold_minor FROM tenant_settings s WHERE s.tenant_id = p_tenant_id),
            total_max)
    RETURNING currency, destination_account_id INTO paid_currency, paid_to;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payment %: not refundable here (status, ceiling or approval)', p_payment_id
            USING ERRCODE = 'PC011';
    END IF;
    IF paid_currency <> p_currency OR paid_to <> p_destination_id THEN
        RAISE EXCEPTION 'payment % is not the one the plan expects', p_payment_id USING ERRCODE = 'PC011';
    END IF;

    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, 'pending', NULL, NULL, NULL, NULL, 'refund', p_refund_id, p_refund_id,
        '{{}}', NULL, p_now_us);

    -- In id order, as every transfer locks its accounts: no deadlock with the reference path.
    FOR account IN
        SELECT a.id, a.code, a.currency, a.normal_balance, a.no_overdraft, a.system FROM ledger_accounts a
        WHERE a.tenant_id = p_tenant_id AND (a.id = p_destination_id OR a.code = p_clearing_code)
        ORDER BY a.id
    LOOP
        IF account.id = p_destination_id AND account.code = p_clearing_code THEN
            RAISE EXCEPTION 'the destination is the processor clearing account' USING ERRCODE = 'PC011';
        END IF;
        slot := CASE WHEN account.id = p_destination_id THEN 1 ELSE 2 END;
        IF slot = 2 AND (account.currency <> p_currency OR account.normal_balance <> 'debit' OR NOT account.system)
        THEN
            RAISE EXCEPTION 'account % is not the processor clearing account %', account.id, p_clearing_code
                USING ERRCODE = 'PC009';
        END IF;
        IF slot = 1 AND account.currency <> p_currency THEN
            RAISE EXCEPTION 'the destination holds %, the refund is in %', account.currency, p_currency
                USING ERRCODE = 'PC011';
        END IF;
        delta_debit := CASE WHEN slot = 1 THEN p_amount_minor ELSE 0 END;
        delta_credit := p_amount_minor - delta_debit;
        UPDATE ledger_accounts SET
            debits_pending_minor = debits_pending_minor + delta_debit,
            credits_pending_minor = credits_pending_minor + delta_credit,
            entries_count = ledger_accounts.entries_count + 1
        WHERE tenant_id = p_tenant_id AND id = account.id
            AND debits_pending_minor <= total_max - delta_debit
            AND credits_pending_minor <= total_max - delta_credit
        RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range', account.id
                USING ERRCODE = 'PC001', DETAIL = account.id;
        END IF;
        figures_after := paycore_balance_figures(account.normal_balance, debits_posted, credits_posted,
            debits_pending, credits_pending);
        figures_before := paycore_balance_figures(account.normal_balance, debits_posted, credits_posted,
            debits_pending - delta_debit, credits_pending - delta_credit);
        FOR k IN 1 .. 4 LOOP
            IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                RAISE EXCEPTION 'account % would pass the balance limit', account.id
                    USING ERRCODE = 'PC003', DETAIL = account.id;
            END IF;
        END LOOP;
        IF account.no_overdraft AND (
            (account.normal_balance = 'credit' AND credits_posted - debits_posted - debits_pending < 0)
            OR (account.normal_balance = 'debit' AND debits_posted - credits_posted - credits_pending < 0)) THEN
            RAISE EXCEPTION 'account % has insufficient available funds', account.id
                USING ERRCODE = 'PC002', DETAIL = account.id;
        END IF;
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        VALUES (p_tenant_id, p_entry_ids[slot], p_transfer_id, account.id,
            CASE WHEN slot = 1 THEN 'debit' ELSE 'credit' END, p_amount_minor, p_currency, count_after,
            p_now_us);
        seen := seen || slot;
    END LOOP;
    IF cardinality(seen) <> 2 THEN
        RAISE EXCEPTION 'a refund holds on two accounts, found %', cardinality(seen) USING ERRCODE = 'PC011';
    END IF;

    INSERT INTO refunds (tenant_id, id, payment_id, idempotency_key, amount_minor, currency, reason, status,
        failure_code, processor_request_id, processor_reference, transfer_id, attempts, next_attempt_at_us,
        claimed_by, claimed_until_us, in_doubt_since_us, fault_code, faulted_at_us, created_at_us, updated_at_us)
    VALUES (p_tenant_id, p_refund_id, p_payment_id, p_key, p_amount_minor, p_currency, p_reason, 'pending', NULL,
        p_refund_id, NULL, p_transfer_id, 0, p_now_us, NULL, NULL, NULL, NULL, NULL, p_now_us, p_now_us);

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        object_sequence, snapshot, created_at_us)
    VALUES (p_tenant_id, p_event_id, 'state_change', p_event_type, 'refund', p_refund_id, NULL, p_event_to_state,
        p_event_cause, p_event_actor, p_event_data, 1, p_event_snapshot, p_now_us);
    RETURN true;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_SIGNATURE}")
