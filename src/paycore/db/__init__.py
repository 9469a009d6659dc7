"""Engines, transactions and migrations for SQLite (embedded default) and PostgreSQL."""

from paycore.db.engine import Database, DatabaseBusy

__all__ = ["Database", "DatabaseBusy"]
