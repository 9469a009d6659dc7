"""Import every domain's tables so `metadata` holds the whole schema (for migrations and tests)."""

from __future__ import annotations

from paycore.audit import models as _audit  # noqa: F401
from paycore.credits import models as _credits  # noqa: F401
from paycore.db.metadata import metadata
from paycore.disputes import models as _disputes  # noqa: F401
from paycore.idempotency import models as _idempotency  # noqa: F401
from paycore.inbound import models as _inbound  # noqa: F401
from paycore.invariants import models as _invariants  # noqa: F401
from paycore.ledger import models as _ledger  # noqa: F401
from paycore.lifecycle import models as _lifecycle  # noqa: F401
from paycore.manual_resolutions import models as _resolutions  # noqa: F401
from paycore.operators import models as _operators  # noqa: F401
from paycore.payments import models as _payments  # noqa: F401
from paycore.payouts import models as _payouts  # noqa: F401
from paycore.reconciliation import models as _reconciliation  # noqa: F401
from paycore.refunds import models as _refunds  # noqa: F401
from paycore.tenants import models as _tenants  # noqa: F401
from paycore.webhooks import models as _webhooks  # noqa: F401

__all__ = ["metadata"]
