"""Every payout adjustment kind is booked by exactly one rule: a bank's fee by ledger/fees.py,
a return by payouts/money.py's `_return`, the rest by payouts/money.py's ADJUSTMENT_LEGS."""

from __future__ import annotations

from paycore.ledger import chart
from paycore.ledger.fees import BANK_FEE_KINDS, BankFeeAccounts, bank_fee_spec
from paycore.payouts.models import ADJUSTMENT_KINDS
from paycore.payouts.money import ADJUSTMENT_LEGS


def test_each_adjustment_kind_has_one_booking_rule() -> None:
    homes = [set(BANK_FEE_KINDS), set(ADJUSTMENT_LEGS), {"return"}]
    for kind in ADJUSTMENT_KINDS:
        assert sum(kind in home for home in homes) == 1, kind
    assert set().union(*homes) == set(ADJUSTMENT_KINDS)


def test_a_bank_fee_debits_the_fees_account_and_its_reversal_credits_it() -> None:
    accounts = BankFeeAccounts(fees="acc_fees", bank_cash="acc_cash")
    for kind in ("fee", "return_fee"):
        spec = bank_fee_spec(kind, accounts, "USD", 25, "po_1")
        assert [(e.account_id, e.direction, e.amount_minor) for e in spec.entries] == [
            ("acc_fees", "debit", 25),
            ("acc_cash", "credit", 25),
        ]
        assert (spec.reference_type, spec.reference_id, spec.currency) == ("adjustment", "po_1", "USD")
    reversal = bank_fee_spec("fee_reversal", accounts, "USD", 25, "po_1")
    assert [(e.account_id, e.direction) for e in reversal.entries] == [("acc_cash", "debit"), ("acc_fees", "credit")]
    assert chart.NORMAL_BALANCE[chart.PAYOUTS_FEES] == "debit"
