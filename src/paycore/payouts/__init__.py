"""Payouts (SPEC §11): scheduled credit transfers to bank accounts over ACH or SEPA."""
