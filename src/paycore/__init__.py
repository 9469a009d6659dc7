"""paycore: a payments core built on an append-only double-entry ledger."""

__version__ = "0.1.0"
