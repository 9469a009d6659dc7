"""PostgreSQL only: a processor webhook that moves a payment, in one round trip (ADR 0026 step 3).

0039's `paycore_inbound_apply` took a plan made from the payment as read: the caller read the
payment first (a statement of its own, before the call), for the checks (the status, an
automatic payment with no operation in flight, the event's amount and currency, a clock past its
last change) and for what the move writes from it (the expected status, the key, the hold's
amount, transfer and destination, the state event's snapshot). `paycore_inbound_apply_payment`
reads the payment itself, under its row lock, and builds those: the caller plans only what the
event says (`paycore.inbound.apply_plan.plan_call`), and the phase is one prepared call.

- The event stored first (`applied`, tried once, done), as the reference path and 0039 do: its
  key is the first lock taken. Then the payment read, FOR UPDATE where the event was new.
- Not movable (missing, another status, manual, an operation in flight, another amount or
  currency, a clock not past its last change): SQLSTATE PC013, the event's row undone, and the
  caller's reference path decides, exactly where the caller's own read decided so before; a
  redelivery of an event whose payment is movable answers `duplicate` having written nothing.
- The creating request's answer checked recorded (else PC013), `paycore_payments_settle` called
  as 0039 calls it (neither a call nor an answer; its refusals PC001-PC004 undo the whole call),
  the event on the payment's audit log.
- The state event's snapshot, `paycore.payments.schemas.payment_object` of the moved payment
  encoded as `paycore.audit.rows.event_row` encodes it (`json.dumps(sort_keys=True,
  separators=(",", ":"))`, ASCII only), byte for byte: the keys in sorted order, integers as
  integers, times by `paycore_rfc3339` (`paycore.kit.clock.to_rfc3339`, every 64-bit time), each
  string by `paycore_json_string` (Python's escapes: `\\uXXXX` past `~`, surrogate pairs past
  the BMP), and the metadata from its stored text (`types.payment_row`'s `json.dumps(sort_keys=
  True)`: sorted and ASCII already) with its separators made compact, token by token.
  tests/integration/inbound/test_apply_payment_snapshot.py compares the bytes with Python's.

Every statement filters by `p_tenant_id`, its first argument (`paycore db distribute` delegates
the function by it, ADR 0031; the two helpers read no table). New functions only: 0039's stays
for the release before, and this release falls back to the reference path where the new one does
not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION stays. Downgrade drops them.
SQLite: nothing (its list is `paycore.inbound.apply_repository`'s, after the payment's read in
the same transaction).

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-06 19:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None

_APPLY_PAYMENT = (
    "paycore_inbound_apply_payment(text, text, text, text, text, text, bigint, text, text, text, bigint, text,"
    " boolean, text, text[], text, text, text, text, text, text, text, text, text)"
)
_JSON_STRING = "paycore_json_string(text)"
_RFC3339 = "paycore_rfc3339(bigint)"

# Python's `json.dumps(value)` of a str (ensure_ascii): PostgreSQL's own escapes (`\"`, `\\`,
# `\b`, `\f`, `\n`, `\r`, `\t`, `\u00XX` below a space) are Python's; every character past `~`
# is escaped too, as `\uXXXX` (lower-case hex), past the BMP as a surrogate pair. NULL: `null`.
_CREATE_JSON_STRING = r"""
CREATE FUNCTION paycore_json_string(p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    encoded text;
    escaped text := '';
    c text;
    code integer;
BEGIN
    IF p_value IS NULL THEN
        RETURN 'null';
    END IF;
    encoded := to_json(p_value)::text;
    IF encoded ~ '^[ -~]*$' THEN  -- printable ASCII: PostgreSQL's escapes are Python's
        RETURN encoded;
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(encoded, '') LOOP
        code := ascii(c);
        IF code BETWEEN 32 AND 126 THEN
            escaped := escaped || c;
        ELSIF code < 65536 THEN
            escaped := escaped || '\u' || lpad(to_hex(code), 4, '0');
        ELSE  -- a surrogate pair
            escaped := escaped || '\u' || to_hex(55296 + ((code - 65536) >> 10))
                || '\u' || to_hex(56320 + ((code - 65536) & 1023));
        END IF;
    END LOOP;
    RETURN escaped;
END $$
"""

# `paycore.kit.clock.to_rfc3339`: `2026-12-04T09:00:00.000000Z`, for any 64-bit time. Years 1 to
# 9999 by PostgreSQL's own calendar (what datetime renders); any other by `_far_rfc3339`'s integer
# arithmetic (H. Hinnant's civil_from_days, in numeric: floor division throughout), the year
# `%04d` (`-001` before year 1).
_CREATE_RFC3339 = """
CREATE FUNCTION paycore_rfc3339(p_us bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    us numeric := p_us;
    seconds numeric;
    days numeric;
    second_of_day numeric;
    z numeric;
    era numeric;
    doe numeric;
    yoe numeric;
    doy numeric;
    mp numeric;
    year numeric;
    month numeric;
    day numeric;
BEGIN
    seconds := div(us, 1000000) - CASE WHEN mod(us, 1000000) < 0 THEN 1 ELSE 0 END;
    IF p_us BETWEEN -62135596800000000 AND 253402300799999999 THEN  -- 0001-01-01 to 9999-12-31
        RETURN to_char(to_timestamp(seconds::double precision) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
            || '.' || lpad((us - seconds * 1000000)::text, 6, '0') || 'Z';
    END IF;
    days := div(seconds, 86400) - CASE WHEN mod(seconds, 86400) < 0 THEN 1 ELSE 0 END;
    second_of_day := seconds - days * 86400;
    z := days + 719468;
    era := div(z, 146097) - CASE WHEN mod(z, 146097) < 0 THEN 1 ELSE 0 END;
    doe := z - era * 146097;  -- from here on nothing is negative
    yoe := div(doe - div(doe, 1460) + div(doe, 36524) - div(doe, 146096), 365);
    doy := doe - (365 * yoe + div(yoe, 4) - div(yoe, 100));
    mp := div(5 * doy + 2, 153);
    day := doy - div(153 * mp + 2, 5) + 1;
    month := CASE WHEN mp < 10 THEN mp + 3 ELSE mp - 9 END;
    year := yoe + era * 400 + CASE WHEN month <= 2 THEN 1 ELSE 0 END;
    RETURN CASE WHEN year >= 0 THEN lpad(year::text, 4, '0') || substr(year::text, 5)
            ELSE '-' || lpad((-year)::text, 3, '0') || substr((-year)::text, 4) END
        || '-' || lpad(month::text, 2, '0') || '-' || lpad(day::text, 2, '0')
        || 'T' || lpad(div(second_of_day, 3600)::text, 2, '0')
        || ':' || lpad(div(mod(second_of_day, 3600), 60)::text, 2, '0')
        || ':' || lpad(mod(second_of_day, 60)::text, 2, '0') || '.' || lpad((us - seconds * 1000000)::text, 6, '0')
        || 'Z';
END $$
"""

_CREATE_APPLY_PAYMENT = r"""
CREATE FUNCTION paycore_inbound_apply_payment(
    p_tenant_id text,
    -- the event as stored (processor_webhooks), tried once and done: its status is p_result
    p_event_id text,
    p_type text,
    p_object_type text,
    p_payload text,
    p_payment_id text,
    p_now_us bigint,
    -- what the event proves: the status, the failure code (NULL: the payment's stays), the
    -- processor's reference; and the charge's amount and currency, which must be the payment's
    p_status text,
    p_failure_code text,
    p_processor_reference text,
    p_amount_minor bigint,
    p_currency text,
    -- the hold posted (succeeded) or voided; the resolution's id, its entries' ids (posted only)
    p_post boolean,
    p_resolution_id text,
    p_entry_ids text[],
    -- the state event, its from_state and snapshot made here from the payment's row
    p_state_event_id text,
    p_state_type text,
    p_state_cause text,
    p_actor text,
    p_state_data text,
    -- the event on the payment's audit log (its data as paycore.audit encodes it), its cause p_result
    p_audit_event_id text,
    p_audit_type text,
    p_audit_data text,
    p_result text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    paid record;
    stored boolean;
    moved integer;
    captured bigint;
    snapshot text;
BEGIN
    INSERT INTO processor_webhooks (tenant_id, event_id, type, object_type, request_id, payload, status, attempts,
        next_attempt_at_us, created_at_us, processed_at_us)
    VALUES (p_tenant_id, p_event_id, p_type, p_object_type, p_payment_id, p_payload, p_result, 1, NULL, p_now_us,
        p_now_us)
    ON CONFLICT DO NOTHING;
    stored := FOUND;

    IF stored THEN  -- the reference path's lock order: the event's key, then the payment's row
        SELECT * INTO paid FROM payments WHERE tenant_id = p_tenant_id AND id = p_payment_id FOR UPDATE;
    ELSE
        SELECT * INTO paid FROM payments WHERE tenant_id = p_tenant_id AND id = p_payment_id;
    END IF;
    IF NOT FOUND OR paid.status NOT IN ('processing', 'in_doubt') OR paid.capture_method <> 'automatic'
        OR paid.operation IS NOT NULL OR paid.amount_minor <> p_amount_minor OR paid.currency <> p_currency
        OR paid.updated_at_us >= p_now_us THEN
        RAISE EXCEPTION 'payment % is not one this event moves', p_payment_id USING ERRCODE = 'PC013';
    END IF;
    IF NOT stored THEN
        RETURN 'duplicate';  -- a redelivery: stored before, nothing more to do
    END IF;

    PERFORM 1 FROM idempotency_keys
    WHERE tenant_id = p_tenant_id AND key = paid.idempotency_key AND response_status IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % is not recorded: the webhook would write it', paid.idempotency_key
            USING ERRCODE = 'PC013';
    END IF;

    -- paycore.payments.schemas.payment_object of the payment as moved (automatic, succeeded or
    -- failed: nothing capturable, nothing in doubt), its keys sorted. (No colon before a letter
    -- or digit in this text: Alembic's text() would read it as a bind parameter.)
    captured := CASE WHEN p_status = 'succeeded' THEN paid.amount_minor ELSE 0 END;
    snapshot := concat(
        '{"amount_capturable_minor":', 0, ',"amount_captured_minor":', captured,
        ',"amount_minor":', paid.amount_minor,
        ',"authorization_expires_at":', CASE WHEN paid.authorization_expires_at_us IS NULL THEN 'null'
            ELSE '"' || paycore_rfc3339(paid.authorization_expires_at_us) || '"' END,
        ',"cancellation_reason":', paycore_json_string(paid.cancellation_reason),
        ',"capture":', paycore_json_string(paid.capture_method),
        ',"created_at":"', paycore_rfc3339(paid.created_at_us),
        '","currency":', paycore_json_string(paid.currency),
        ',"description":', paycore_json_string(paid.description),
        ',"destination_account":', paycore_json_string(paid.destination_account_id),
        ',"disputed_minor":', paid.disputed_minor,
        ',"failure_code":', paycore_json_string(coalesce(p_failure_code, paid.failure_code)),
        ',"id":', paycore_json_string(paid.id),
        ',"in_doubt_operation":', 'null', ',"metadata":',
        CASE WHEN paid.metadata = '{}' THEN '{}'
            ELSE regexp_replace(paid.metadata, '("(?:[^"\\]|\\.)*")([:,]) ', '\1\2', 'g') END,
        ',"object":"payment","processor_reference":', paycore_json_string(p_processor_reference),
        ',"refundable_minor":', CASE WHEN p_status = 'succeeded'
            THEN greatest(captured - paid.refunded_minor - paid.disputed_minor, 0) ELSE 0 END,
        ',"refunded_minor":', paid.refunded_minor,
        ',"source":{"type":', paycore_json_string(paid.source_type),
        '},"status":', paycore_json_string(p_status),
        ',"updated_at":"', paycore_rfc3339(p_now_us), '"}');

    SELECT count(*) INTO moved FROM paycore_payments_settle(p_tenant_id, p_payment_id, paid.idempotency_key,
        p_now_us, paid.status, p_status, coalesce(p_failure_code, paid.failure_code), p_processor_reference,
        paid.amount_minor, paid.transfer_id, paid.destination_account_id, p_post, p_resolution_id, p_entry_ids,
        ARRAY[NULL, p_state_event_id], ARRAY[NULL, p_state_type], ARRAY[NULL, p_state_cause], p_actor, NULL,
        p_state_data, snapshot, NULL, NULL, NULL);
    IF moved = 0 THEN  -- never under the row's lock; kept as 0039 keeps it
        RAISE EXCEPTION 'payment % is not % any more', p_payment_id, paid.status USING ERRCODE = 'PC013';
    END IF;

    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor, data,
        created_at_us)
    VALUES (p_tenant_id, p_audit_event_id, 'webhook', p_audit_type, 'payment', p_payment_id, NULL, NULL,
        p_result, p_actor, p_audit_data, p_now_us);
    RETURN p_result;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_JSON_STRING)
        op.execute(_CREATE_RFC3339)
        op.execute(_CREATE_APPLY_PAYMENT)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_APPLY_PAYMENT}")
        op.execute(f"DROP FUNCTION {_RFC3339}")
        op.execute(f"DROP FUNCTION {_JSON_STRING}")
