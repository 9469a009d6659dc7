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

A delegated call runs in the worker's session, not in paycore's: the `lock_timeout` paycore
sets on its own connections (`idempotency_wait_ms`) does not reach it, and a call waiting on a
row another request holds would wait until `statement_timeout`. So each function carries the
bound itself, as a function-level setting (`ALTER FUNCTION ... SET lock_timeout = N`, which
Citus propagates to the workers and PostgreSQL applies for the call's duration, on whichever
node runs it): the `idempotency_wait_ms` of the `paycore db distribute` run. A SET LOCAL inside
the function could only use a value passed by the caller (a new argument for every function) or
one in the worker's own session settings (which paycore does not reach). A migration that
replaces a function with `CREATE OR REPLACE` drops its setting: the next `paycore db distribute`
sets it again, as it delegates a new function.
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
                  AND d.distribution_argument_index = 0),
       (SELECT substr(c, length('lock_timeout=') + 1) FROM unnest(p.proconfig) AS c
         WHERE c LIKE 'lock\\_timeout=%')
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
    lock_timeout: str | None = None  # the function's own setting (`ALTER FUNCTION ... SET`), if any


def read_functions(connection: Connection) -> list[Function]:
    rows = connection.execute(
        text(_FUNCTIONS),
        {"prefix": PREFIX.replace("_", r"\_") + "%", "argument": TENANT_ARGUMENT, "limit": FUNCTIONS_MAX},
    )
    return [
        Function(str(signature), bool(delegated), None if bound is None else str(bound))
        for signature, delegated, bound in rows
    ]


def delegate(connection: Connection, function: Function, colocate_with: str) -> None:
    """Distribute `function` by its first argument, in `colocate_with`'s colocation group."""
    connection.execute(
        text("SELECT create_distributed_function(:signature, '$1', colocate_with => :colocate)"),
        {"signature": function.signature, "colocate": colocate_with},
    )


def bound_lock_waits(connection: Connection, function: Function, lock_timeout_ms: int) -> None:
    """Give `function` its own `lock_timeout` (see the module's docstring). The signature comes
    from the catalogue (`regprocedure`), never from a user."""
    assert function.signature.startswith(PREFIX) and lock_timeout_ms >= 0
    connection.execute(text(f"ALTER FUNCTION {function.signature} SET lock_timeout = {int(lock_timeout_ms)}"))
