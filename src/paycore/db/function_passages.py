"""A migration's change to PL/pgSQL functions already defined: named passages of their bodies
replaced, the rest of each definition read back from the database as it is.

Each `Passage` names a function (name, count of arguments) and a passage of its body that must be
found there exactly once, else the migration stops (a passage edited since would otherwise be
left as it was, silently). The definition is executed on the driver's connection without
parameters, as the body's `%` and `:` are neither the driver's nor SQLAlchemy's.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import sqlalchemy as sa
from alembic import op


class Passage(NamedTuple):
    """`old`, found exactly once in the body of the PL/pgSQL function `function` (name, count
    of arguments), replaced by `new`."""

    function: tuple[str, int]
    old: str
    new: str

    def reversed(self) -> Passage:
        return Passage(self.function, self.new, self.old)


_DEFINITION: Final = sa.text(
    "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = :name AND p.pronargs = :arguments"
    " AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')"
)


def replace_passages(bind: sa.Connection, passages: tuple[Passage, ...]) -> None:
    """Each function named by `passages` read from the database, its passages replaced, then
    created again; a passage not found exactly once stops the migration."""
    for function in dict.fromkeys(passage.function for passage in passages):
        name, arguments = function
        found = bind.execute(_DEFINITION, {"name": name, "arguments": arguments})
        definitions = found.scalars().all()
        assert len(definitions) == 1, (name, arguments, len(definitions))
        definition = definitions[0]
        for passage in passages:
            if passage.function == function:
                assert definition.count(passage.old) == 1, (name, passage.old)
                definition = definition.replace(passage.old, passage.new)
        bind.connection.driver_connection.execute(definition)  # type: ignore[union-attr]


def migrate_passages(passages: tuple[Passage, ...], *, back: bool = False) -> None:
    """A migration's upgrade (`back=False`) or downgrade (`back=True`) of `passages`, on
    PostgreSQL only: SQLite has no server functions."""
    if op.get_bind().dialect.name != "postgresql":
        return
    replace_passages(op.get_bind(), tuple(passage.reversed() for passage in passages) if back else passages)
