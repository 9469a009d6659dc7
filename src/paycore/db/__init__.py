"""Engines, transactions and migrations for SQLite (embedded default) and PostgreSQL."""

from paycore.db.availability import CommitOutcomeUnknown, DatabaseUnavailable
from paycore.db.engine import Database, DatabaseBusy

__all__ = ["CommitOutcomeUnknown", "Database", "DatabaseBusy", "DatabaseUnavailable"]
