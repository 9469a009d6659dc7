"""Disputes and chargebacks (SPEC §6.2): money a cardholder's bank pulls back after a payment succeeded."""
