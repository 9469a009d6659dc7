"""Reconciliation against the processor's settlement report (SPEC §10, ADR 0014)."""
