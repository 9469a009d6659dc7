"""A manual resolution's state machine (ADR 0016): the transition table its one status change
(`Machine.move`, through `lifecycle.MACHINE`) checks.

    proposed -> confirmed   (a second person, an approver, confirms: the item moves)
    proposed -> rejected    (a second person rejects: nothing moves)

`confirmed` and `rejected` are terminal.
"""

from __future__ import annotations

from typing import Final

PROPOSED: Final = "proposed"
CONFIRMED: Final = "confirmed"
REJECTED: Final = "rejected"
STATUSES: Final = (PROPOSED, CONFIRMED, REJECTED)
TRANSITIONS: Final[frozenset[tuple[str, str]]] = frozenset({(PROPOSED, CONFIRMED), (PROPOSED, REJECTED)})
TERMINAL: Final = frozenset({CONFIRMED, REJECTED})
