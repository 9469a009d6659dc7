"""Webhooks from the processor coming in (SPEC §10): the processor's inbound adapter, above the
domains it hands evidence to (payments, refunds, payouts, reconciliation). The processor's port,
what paycore asks of a processor, stays below them in `paycore.processor`."""
