from __future__ import annotations

from paycore.kit.errors import BusinessRefusal, NotFound


class PaymentNotFound(NotFound):
    code = "payment_not_found"


class CurrencyNotAccepted(BusinessRefusal):
    code = "currency_mismatch"
