"""The data plane's server functions delegated to the tenant's node on Citus (ADR 0031).

Each of paycore's functions that takes the tenant first (`p_tenant_id text`, ADR 0026) is
distributed by that argument and colocated with the tenant tables: called outside a
transaction block, as paycore calls them (ADR 0011), Citus sends the whole call to the worker
that holds the tenant's shards, one round trip, and its statements run there on local shards.
Not forced (`force_delegation`): a call inside a transaction block, which paycore does not make,
runs on the coordinator statement by statement, as before, rather than tying the rest of that
transaction to one node.

A function added by a later migration is delegated by the next `paycore db distribute`; one
already delegated keeps its placement when a migration replaces its body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, text

PREFIX: Final = "paycore_"
TENANT_ARGUMENT: Final = "p_tenant_id"
FUNCTIONS_MAX: Final = 200  # a bound on the catalogue's answer; paycore has ~20 such functions

# paycore's functions whose first argument is the tenant (text, named p_tenant_id), and whether
# Citus already delegates each by it.
_FUNCTIONS = """
SELECT p.oid::regprocedure::text,
       EXISTS (SELECT FROM pg_dist_object d
                WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                  AND d.distribution_argument_index = 0)
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
   AND p.proname LIKE :prefix AND p.pronargs > 0
   AND p.proargtypes[0] = 'text'::regtype AND p.proargnames[1] = :argument
 ORDER BY 1 LIMIT :limit
"""


@dataclass(frozen=True)
class Function:
    signature: str  # e.g. paycore_credits_create(text,text,...)
    delegated: bool


def read_functions(connection: Connection) -> list[Function]:
    rows = connection.execute(
        text(_FUNCTIONS),
        {"prefix": PREFIX.replace("_", r"\_") + "%", "argument": TENANT_ARGUMENT, "limit": FUNCTIONS_MAX},
    )
    return [Function(str(signature), bool(delegated)) for signature, delegated in rows]


def delegate(connection: Connection, function: Function, colocate_with: str) -> None:
    """Distribute `function` by its first argument, in `colocate_with`'s colocation group."""
    connection.execute(
        text("SELECT create_distributed_function(:signature, '$1', colocate_with => :colocate)"),
        {"signature": function.signature, "colocate": colocate_with},
    )
