from __future__ import annotations

from paycore.kit.errors import BusinessRefusal, Conflict, NotFound


class PaymentNotFound(NotFound):
    code = "payment_not_found"


class CurrencyNotAccepted(BusinessRefusal):
    code = "currency_mismatch"


class PaymentNotCapturable(Conflict):
    """Only a payment in `requires_capture` can be captured (details: the current payment)."""

    code = "payment_not_capturable"
    recorded = True  # a business refusal: the key replays it


class PaymentNotCancelable(Conflict):
    """Only a payment in `requires_capture` can be canceled (details: the current payment)."""

    code = "payment_not_cancelable"
    recorded = True


class AmountTooLarge(BusinessRefusal):
    """A capture of more than is capturable."""

    code = "amount_too_large"
