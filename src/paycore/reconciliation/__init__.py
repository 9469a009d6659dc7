"""Reconciliation against the processor's settlement report (SPEC §10, issue 20, ADR 0014)."""
