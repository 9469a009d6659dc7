"""PostgreSQL only: an authorization's settle without its call or its answer, for a resolver
round (ADR 0026 step 3, ADR 0029).

A worker round that asks the processor about a manual-capture payment still `processing` or
`in_doubt` and hears `requires_capture` moves it as the creating request's settle would: the
compare-and-set `-> requires_capture` with the authorization's figures, the hold kept pending,
the state event. But the round's calls are its attempts (recorded before, in its transaction)
and the creating request was answered, so `paycore_payments_authorize` (0036, its state event
rewritten by 0048) writing the call's event and the key's answer unconditionally left the round
on the reference path. This revision makes both optional, as 0039 did for
`paycore_payments_settle`: the call's event is written only when its id (`p_event_ids[1]`) is
not NULL, the key's answer only when `p_response_status` is not NULL. The creating request's
settle gives both, and writes exactly what it wrote.

The definition is read from the database and only those two passages are replaced (each must
be found exactly once, else the migration stops), as 0052 does (`paycore.db.function_passages`); the
signature, its placement (every statement still filters by `p_tenant_id`, the first argument:
a delegated function stays delegated) and the result are unchanged. On a schema before this
revision the round's call writes a NULL event id (refused, SQLSTATE 23502): its transaction
rolls back and runs again careful, on the reference path; so OLDEST_COMPATIBLE_REVISION does
not move. Downgrade writes the old passages back. SQLite: nothing (its statements are
`paycore.payments.settle_repository`'s).

Revision ID: 0053
Revises: 0052
Create Date: 2026-12-07 04:00:00
"""

from __future__ import annotations

from paycore.db.function_passages import Passage, migrate_passages

revision = "0053"
down_revision = "0052"
branch_labels = None
depends_on = None

AUTHORIZE = ("paycore_payments_authorize", 18)  # 0036's signature

_CALL_EVENT_OLD = """\
    INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,
        data, created_at_us)
    VALUES (p_tenant_id, p_event_ids[1], 'processor_call', p_event_types[1], 'payment', p_payment_id, NULL, NULL,
        p_event_causes[1], p_actor, p_call_data, p_now_us);
"""
_ANSWER_OLD = """\
    UPDATE idempotency_keys SET response_status = p_response_status, response_body = p_response_body
    WHERE tenant_id = p_tenant_id AND key = p_key AND response_status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the answer of % was recorded already', p_key USING ERRCODE = 'PC004';
    END IF;
"""


def _indented(block: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in block.splitlines(keepends=True))


_CALL_EVENT_NEW = (
    "    IF p_event_ids[1] IS NOT NULL THEN  -- a worker round's calls are its attempts (0053)\n"
    f"{_indented(_CALL_EVENT_OLD)}    END IF;\n"
)
_ANSWER_NEW = (
    "    IF p_response_status IS NOT NULL THEN  -- a worker round's payment was answered before (0053)\n"
    f"{_indented(_ANSWER_OLD)}    END IF;\n"
)


PASSAGES = (Passage(AUTHORIZE, _CALL_EVENT_OLD, _CALL_EVENT_NEW), Passage(AUTHORIZE, _ANSWER_OLD, _ANSWER_NEW))


def upgrade() -> None:
    migrate_passages(PASSAGES)


def downgrade() -> None:
    migrate_passages(PASSAGES, back=True)
