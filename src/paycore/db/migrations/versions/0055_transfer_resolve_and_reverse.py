"""PostgreSQL only: a ledger hold's post or void, and a transfer's reversal, in one call each.

`POST /v1/transfers/{id}/post`, `/void` and `/reverse` ran on the reference path alone
(`idempotency.run` around `ledger.post_pending`, `void_pending`, `reverse_transfer`): the key's
claim, the hold read with its resolution and entries, the resolution (or reversal), each
account's totals, the entries, the transfer read back, the key's answer, the commit. On the data
plane (ADR 0026) they are planned by `paycore.ledger.resolve_plan` from the transfer as read and
written by one call:

- `paycore_ledger_move`, new: a transfer's accounts moved in id order (every transfer's lock
  order) under the ledger's range, balance limit (only where entries are added: releasing a
  hold is never refused by it) and overdraft checks (PC001-PC003, the checks of
  `paycore_create_transfer`, 0010), then its entries numbered by each account's entry count and
  inserted. Returns each entry's sequence number, in entry order. Its deltas may be negative
  (a hold released); a total is bounded before a positive addition only.
- `paycore_transfer_resolve`, new: the key queued on and claimed (0020's advisory lock; FALSE,
  having written nothing, when it exists), the hold checked (the tenant's own, pending; a post
  before its expiry: PC004), the resolution inserted from the hold (unique per hold: PC004 when
  resolved already), `paycore_ledger_move`, the answer the caller planned stored.
- `paycore_transfer_reverse`, new: the key claimed as above (NULL when it exists), the transfer
  reversed checked (the tenant's own, a `transfer` or a `post`: PC004), the reversal inserted
  (unique per transfer: PC004 when reversed already), `paycore_ledger_move`, the answer stored,
  its body joined with the entries' sequence numbers as `paycore_create_transfer` joins them.

A refusal undoes the whole call; the caller then runs the reference path, which decides and
records it. Every statement filters by `p_tenant_id`, each function's first argument, so
`paycore db distribute` delegates them by it (ADR 0031).

New functions only: the release before never calls them, and this release falls back to the
reference path where they do not exist yet (SQLSTATE 42883), so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade drops them. SQLite: nothing (its lists are `paycore.ledger.resolve_repository`'s).

Revision ID: 0055
Revises: 0054
Create Date: 2026-12-07 14:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0055"
down_revision = "0054"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history.
_KEY_QUEUE_CLASS = 0x6B6579

_MOVE = (
    "paycore_ledger_move(text, text, bigint, text[], bigint[], bigint[], bigint[], bigint[], bigint[], text[],"
    " text[], text[], text[], bigint[], text[], bigint[])"
)
_RESOLVE = (
    "paycore_transfer_resolve(text, text, text, bigint, text, text, text, bigint, text[], bigint[], bigint[],"
    " bigint[], bigint[], bigint[], text[], text[], text[], text[], bigint[], text[], bigint[], integer, text)"
)
_REVERSE = (
    "paycore_transfer_reverse(text, text, text, bigint, text, text, text, text, text, bigint, text[], bigint[],"
    " bigint[], bigint[], bigint[], bigint[], text[], text[], text[], text[], bigint[], text[], bigint[], integer,"
    " text[])"
)

_CREATE_MOVE = """
CREATE FUNCTION paycore_ledger_move(
    p_tenant_id text,
    p_transfer_id text,  -- the entries' transfer, inserted already
    p_now_us bigint,
    -- one element per account, in account-id order
    p_account_ids text[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added bigint[],
    p_guard text[],  -- the account's normal balance where no overdraft is allowed, else NULL
    -- one element per entry, in the transfer's order
    p_entry_ids text[],
    p_entry_account_ids text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    p_entry_currencies text[],
    p_entry_account_index bigint[]  -- the entry's account's position in p_account_ids
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    total_max constant bigint := 9223372036854775807;  -- paycore.kit.money.BALANCE_MINOR_MAX
    balance_max constant numeric := 9007199254740991;  -- paycore.kit.money.AMOUNT_MINOR_MAX (2^53 - 1)
    accounts_count constant integer := cardinality(p_account_ids);
    entry_total constant integer := cardinality(p_entry_ids);
    next_sequence bigint[] := array_fill(0::bigint, ARRAY[accounts_count]);
    sequences bigint[] := array_fill(0::bigint, ARRAY[entry_total]);
    debits_posted bigint;
    credits_posted bigint;
    debits_pending bigint;
    credits_pending bigint;
    count_after bigint;
    normal text;
    figures_after numeric[];
    figures_before numeric[];
    account_index bigint;
BEGIN
    FOR i IN 1 .. accounts_count LOOP
        -- Each total is checked against its bound before a positive addition
        -- (paycore.ledger.limits.bound_before_adding); a release only lowers a total.
        UPDATE ledger_accounts SET
            debits_posted_minor = debits_posted_minor + p_debits_posted[i],
            credits_posted_minor = credits_posted_minor + p_credits_posted[i],
            debits_pending_minor = debits_pending_minor + p_debits_pending[i],
            credits_pending_minor = credits_pending_minor + p_credits_pending[i],
            entries_count = ledger_accounts.entries_count + p_entries_added[i]
        WHERE tenant_id = p_tenant_id AND id = p_account_ids[i]
            AND debits_posted_minor <= total_max - greatest(p_debits_posted[i], 0)
            AND credits_posted_minor <= total_max - greatest(p_credits_posted[i], 0)
            AND debits_pending_minor <= total_max - greatest(p_debits_pending[i], 0)
            AND credits_pending_minor <= total_max - greatest(p_credits_pending[i], 0)
        RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,
            ledger_accounts.entries_count, normal_balance
        INTO debits_posted, credits_posted, debits_pending, credits_pending, count_after, normal;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'account % would leave its balance range, or does not exist', p_account_ids[i]
                USING ERRCODE = 'PC001', DETAIL = p_account_ids[i];
        END IF;
        IF p_entries_added[i] > 0 THEN  -- only entries move money (paycore.ledger.postings.apply_account)
            figures_after := paycore_balance_figures(normal, debits_posted, credits_posted, debits_pending,
                credits_pending);
            figures_before := paycore_balance_figures(normal, debits_posted - p_debits_posted[i],
                credits_posted - p_credits_posted[i], debits_pending - p_debits_pending[i],
                credits_pending - p_credits_pending[i]);
            FOR k IN 1 .. 4 LOOP
                IF abs(figures_after[k]) > balance_max AND abs(figures_after[k]) > abs(figures_before[k]) THEN
                    RAISE EXCEPTION 'account % would pass the balance limit', p_account_ids[i]
                        USING ERRCODE = 'PC003', DETAIL = p_account_ids[i];
                END IF;
            END LOOP;
        END IF;
        IF (p_guard[i] = 'credit' AND credits_posted - debits_posted - debits_pending < 0)
            OR (p_guard[i] = 'debit' AND debits_posted - credits_posted - credits_pending < 0) THEN
            RAISE EXCEPTION 'account % has insufficient available funds', p_account_ids[i]
                USING ERRCODE = 'PC002', DETAIL = p_account_ids[i];
        END IF;
        next_sequence[i] := count_after - p_entries_added[i] + 1;
    END LOOP;

    FOR j IN 1 .. entry_total LOOP
        account_index := p_entry_account_index[j];
        sequences[j] := next_sequence[account_index];
        next_sequence[account_index] := next_sequence[account_index] + 1;
    END LOOP;
    IF entry_total > 0 THEN
        INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
            account_sequence, created_at_us)
        SELECT p_tenant_id, e.id, p_transfer_id, e.account_id, e.direction, e.amount_minor, e.currency,
            e.account_sequence, p_now_us
        FROM unnest(p_entry_ids, p_entry_account_ids, p_entry_directions, p_entry_amounts, p_entry_currencies,
            sequences) AS e(id, account_id, direction, amount_minor, currency, account_sequence);
    END IF;
    RETURN sequences;
END $$
"""

_CREATE_RESOLVE = f"""
CREATE FUNCTION paycore_transfer_resolve(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_expires_at_us bigint,
    p_transfer_id text,  -- the hold
    p_kind text,  -- post or void
    p_resolution_id text,
    p_now_us bigint,
    -- paycore_ledger_move's accounts and entries
    p_account_ids text[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added bigint[],
    p_guard text[],
    p_entry_ids text[],
    p_entry_account_ids text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    p_entry_currencies text[],
    p_entry_account_index bigint[],
    p_response_status integer,
    p_response_body text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    hold record;
BEGIN
    IF p_kind NOT IN ('post', 'void') THEN
        RAISE EXCEPTION 'a hold is posted or voided, not %', p_kind USING ERRCODE = 'PC004';
    END IF;
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_now_us, p_key_expires_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- the key exists: the caller replays it
    END IF;

    SELECT t.kind, t.owner_id, t.expires_at_us, t.reference_type, t.reference_id INTO hold
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_transfer_id;
    IF NOT FOUND OR hold.kind <> 'pending' OR hold.owner_id IS NOT NULL
        OR (p_kind = 'post' AND hold.expires_at_us IS NOT NULL AND p_now_us >= hold.expires_at_us) THEN
        RAISE EXCEPTION 'the transfer % is not the tenant''s hold to %', p_transfer_id, p_kind
            USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_resolution_id, p_kind, p_transfer_id, NULL, NULL, NULL, hold.reference_type,
        hold.reference_id, NULL, '{{}}', NULL, p_now_us)
    ON CONFLICT (tenant_id, pending_id) WHERE pending_id IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the hold % is resolved already', p_transfer_id USING ERRCODE = 'PC004';
    END IF;

    PERFORM paycore_ledger_move(p_tenant_id, p_resolution_id, p_now_us, p_account_ids, p_debits_posted,
        p_credits_posted, p_debits_pending, p_credits_pending, p_entries_added, p_guard, p_entry_ids,
        p_entry_account_ids, p_entry_directions, p_entry_amounts, p_entry_currencies, p_entry_account_index);

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key;
    RETURN true;
END $$
"""

_CREATE_REVERSE = f"""
CREATE FUNCTION paycore_transfer_reverse(
    p_tenant_id text,
    p_key text,
    p_fingerprint text,
    p_key_expires_at_us bigint,
    p_transfer_id text,  -- the reversal
    p_reverses_id text,  -- the transfer it reverses
    p_reference_type text,
    p_reference_id text,
    p_metadata text,
    p_now_us bigint,
    -- paycore_ledger_move's accounts and entries
    p_account_ids text[],
    p_debits_posted bigint[],
    p_credits_posted bigint[],
    p_debits_pending bigint[],
    p_credits_pending bigint[],
    p_entries_added bigint[],
    p_guard text[],
    p_entry_ids text[],
    p_entry_account_ids text[],
    p_entry_directions text[],
    p_entry_amounts bigint[],
    p_entry_currencies text[],
    p_entry_account_index bigint[],
    p_response_status integer,
    p_response_parts text[]  -- the body, cut where each entry's sequence number goes
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    original record;
    sequences bigint[];
    body text := p_response_parts[1];
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us)
    VALUES (p_tenant_id, p_key, p_fingerprint, NULL, NULL, p_now_us, p_key_expires_at_us)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;  -- the key exists: the caller replays it
    END IF;

    SELECT t.kind, t.owner_id INTO original
    FROM ledger_transfers t WHERE t.tenant_id = p_tenant_id AND t.id = p_reverses_id;
    IF NOT FOUND OR original.kind NOT IN ('transfer', 'post') OR original.owner_id IS NOT NULL THEN
        RAISE EXCEPTION 'the transfer % is not the tenant''s to reverse', p_reverses_id USING ERRCODE = 'PC004';
    END IF;
    INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,
        reference_type, reference_id, owner_id, metadata, expires_at_us, created_at_us)
    VALUES (p_tenant_id, p_transfer_id, 'transfer', NULL, p_reverses_id, NULL, NULL, p_reference_type,
        p_reference_id, NULL, p_metadata, NULL, p_now_us)
    ON CONFLICT (tenant_id, reverses_id) WHERE reverses_id IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the transfer % is reversed already', p_reverses_id USING ERRCODE = 'PC004';
    END IF;

    sequences := paycore_ledger_move(p_tenant_id, p_transfer_id, p_now_us, p_account_ids, p_debits_posted,
        p_credits_posted, p_debits_pending, p_credits_pending, p_entries_added, p_guard, p_entry_ids,
        p_entry_account_ids, p_entry_directions, p_entry_amounts, p_entry_currencies, p_entry_account_index);
    FOR j IN 1 .. cardinality(sequences) LOOP
        body := body || sequences[j]::text || p_response_parts[j + 1];
    END LOOP;

    UPDATE idempotency_keys SET response_status = p_response_status, response_body = body
    WHERE tenant_id = p_tenant_id AND key = p_key;
    RETURN sequences;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE_MOVE)
        op.execute(_CREATE_RESOLVE)
        op.execute(_CREATE_REVERSE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_REVERSE}")
        op.execute(f"DROP FUNCTION {_RESOLVE}")
        op.execute(f"DROP FUNCTION {_MOVE}")
