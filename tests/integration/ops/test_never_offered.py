"""An approver is never offered what they may not do: the Approve button of a refund they asked
for, the Confirm and Reject buttons of a manual resolution they proposed (on the item's page,
the approvals queue, the in-doubt queue). The page says another approver gives that word; the
service still refuses it if it is sent anyway (403 same_person), and a second approver is
offered it."""

from __future__ import annotations

from tests.integration.ops.conftest import Console, act
from tests.integration.ops.test_four_eyes import paid, refund_from_the_console, refund_id_of
from tests.integration.ops.test_manual_resolution import in_doubt_payment, propose, window


def test_the_requester_of_a_refund_is_not_offered_its_approval(console: Console) -> None:
    env = console.env
    _, payment_id = paid(console)
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 100}).status_code == 200
    bob, asked = refund_from_the_console(console, "bob", payment_id, 400, "bob-asks")
    refund_id = refund_id_of(asked)
    page = f"/ops/refunds/{refund_id}"

    mine = bob.get(page).text
    assert f"/ops/refunds/{refund_id}/approve" not in mine and ">Approve<" not in mine
    assert 'id="not-yours"' in mine and "another approver approves it" in mine
    assert f"/ops/refunds/{refund_id}/cancel" in mine  # who asked may still cancel
    assert f"/ops/refunds/{refund_id}/approve" not in bob.get("/ops/approvals").text
    refused = act(bob, f"{page}/approve", page=page)  # sent anyway: refused by the service
    assert refused.status_code == 403 and "cannot also approve" in refused.text
    assert env.client.get(f"/v1/refunds/{refund_id}").json()["status"] == "requires_approval"

    carol = console.signed_in("carol")
    theirs = carol.get(page).text
    assert f"/ops/refunds/{refund_id}/approve" in theirs and 'id="not-yours"' not in theirs
    assert f"/ops/refunds/{refund_id}/approve" in carol.get("/ops/approvals").text
    assert act(carol, f"{page}/approve", page=page).status_code == 303


def test_the_proposer_of_a_manual_resolution_is_not_offered_its_confirmation(console: Console) -> None:
    _, payment_id = in_doubt_payment(console)
    window(console, 0)
    bob, proposed = propose(console, "bob", payment_id, "succeeded")
    assert proposed.status_code == 303
    page = f"/ops/payments/{payment_id}"
    confirm, reject = (f"/ops/in-doubt/payment/{payment_id}/{verb}" for verb in ("confirm", "reject"))

    mine = bob.get(page).text
    assert confirm not in mine and reject not in mine
    assert "You proposed it: another approver confirms or rejects it." in mine
    assert confirm not in bob.get("/ops/in-doubt").text
    assert act(bob, confirm, page=page).status_code == 403  # sent anyway: refused by the service
    assert act(bob, reject, page=page).status_code == 403

    carol = console.signed_in("carol")
    theirs = carol.get(page).text
    assert confirm in theirs and reject in theirs and "You proposed it" not in theirs
    assert confirm in carol.get("/ops/in-doubt").text
    assert act(carol, confirm, page=page).status_code == 303
