"""Alembic environment: migrations run on the connection paycore hands in (`paycore db upgrade`),
or, for a developer's `alembic` command, on PAYCORE_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from paycore.config import Settings
from paycore.tables import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite alters tables by copy; the same script runs on both
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from paycore.db.engine import Database

    database = Database(Settings.from_env())
    with database.engine.connect() as fresh:
        _run(fresh)
        fresh.commit()
