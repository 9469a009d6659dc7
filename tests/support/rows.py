"""What "a refused request changes nothing" means in a test: every table's row count, unchanged.

The one row a refusal adds is the audit log's record of it (issue 29: every refused money
request is in the audit log, findable by its idempotency key; tests/integration/http/
test_refusals_audited.py checks those records). That row is not a change of anything: it is
counted apart, so a refusal that moved money, made a key, or wrote any other event still fails.
"""

from __future__ import annotations

from sqlalchemy import and_, func, select

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.tables import metadata

_REFUSAL_RECORDS = and_(events.c.kind == "api_call", events.c.cause == "refused")


def row_counts(database: Database) -> dict[str, int]:
    """Rows per table, the audit log's records of refused requests apart (`refusals`)."""
    with database.read() as connection:
        counts = {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in metadata.tables.items()
        }
        refusals = connection.execute(select(func.count()).select_from(events).where(_REFUSAL_RECORDS)).scalar_one()
    counts["events"] -= refusals
    return counts
