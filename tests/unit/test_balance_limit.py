"""The balance limit's answer (`limits.grows_past`) against its rule spelt out from the figures
(`limits.limited_figures`), over every small total: the quick answer it gives when every total
is within half the limit must be the rule's own."""

from __future__ import annotations

import itertools

import pytest

from paycore.ledger.limits import Totals, grows_past, limited_figures

_VALUES = (0, 1, 2, 3, 4, 6, 7)  # around half of each limit below, and past it


def _by_the_rule(before: Totals, after: Totals, normal_balance: str, limit: int) -> str | None:
    old, new = limited_figures(before, normal_balance), limited_figures(after, normal_balance)
    past = [name for name, value in new.items() if abs(value) > limit and abs(value) > abs(old[name])]
    return past[0] if past else None


@pytest.mark.parametrize("limit", [5, 6, 7])
@pytest.mark.parametrize("normal_balance", ["credit", "debit"])
def test_the_answer_is_the_rules_for_every_small_total(limit: int, normal_balance: str) -> None:
    before = Totals(0, 0, 0, 0)
    checked = 0
    for values in itertools.product(_VALUES, repeat=4):
        after = Totals(*values)
        assert grows_past(before, after, normal_balance, limit) == _by_the_rule(before, after, normal_balance, limit)
        checked += 1
    assert checked == len(_VALUES) ** 4
