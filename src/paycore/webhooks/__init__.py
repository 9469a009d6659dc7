"""Outgoing webhooks (SPEC §10.1, docs/webhooks.md)."""
