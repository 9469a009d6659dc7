from __future__ import annotations

from paycore.kit.errors import BusinessRefusal, Conflict, NotFound


class OverRefund(BusinessRefusal):
    """Pending, in-flight, in-doubt and succeeded refunds plus this one exceed the payment."""

    code = "over_refund"


class PaymentNotRefundable(Conflict):
    code = "payment_not_refundable"


class PaymentNotCaptured(Conflict):
    """A manual payment's authorization not captured (SPEC §6.1): nothing to refund yet (or
    ever, once canceled)."""

    code = "payment_not_captured"


class RefundNotFound(NotFound):
    code = "refund_not_found"


class RefundStateConflict(Conflict):
    """The refund is not in a state this change can start from (details: status)."""

    code = "refund_state_conflict"
