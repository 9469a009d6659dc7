"""The one SQLAlchemy MetaData every domain's tables are declared on.

Constraint names follow a fixed convention so that migrations and models compare equal
on both databases.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import BigInteger, Column, MetaData, String

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TENANT_ID_LENGTH = 64
ID_LENGTH = 64
# The tenant id of a row that belongs to no one tenant (a reconciliation run, a platform
# operator): no tenant can have it (SPEC §3.2), and every table's key still leads with it.
ALL_TENANTS: Final = "*"


def tenant_id_column() -> Column[str]:
    """Every table leads with tenant_id in its keys, so it can be distributed by tenant."""
    return Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False)


def created_at_column() -> Column[int]:
    """Epoch microseconds: one integer type that orders and compares alike on both databases."""
    return Column("created_at_us", BigInteger, nullable=False)
