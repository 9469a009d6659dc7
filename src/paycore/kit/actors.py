"""Who did something: the one vocabulary of the audit log's `actor` column.

Every state change and every audit record names its actor in one of these forms, and nothing
else (no bare `api`):

| actor               | who                                                          |
|---------------------|--------------------------------------------------------------|
| `operator:NAME`     | a person signed in to the console (`paycore operators`)      |
| `api_key:KEY_ID`    | a tenant's API key (its id, `key_...`, never the key itself) |
| `worker:JOB`        | a worker job (`worker:resolve_payments`, ...)                |
| `processor`         | the processor or its bank rail (a webhook, a call's answer)  |
| `reconcile:RUN_ID`  | a reconciliation run (`reconcile:rcn_...`)                   |
| `local`             | local mode (no API key, no operator) or an in-process caller |
| `anonymous`         | someone not identified: a failed console sign-in             |

An actor fits the audit log's column (64 characters): operator names are at most
`OPERATOR_NAME_CHARS_MAX` characters for that reason.
"""

from __future__ import annotations

import re
from typing import Final

LOCAL: Final = "local"
ANONYMOUS: Final = "anonymous"
PROCESSOR: Final = "processor"
ACTOR_CHARS_MAX: Final = 64  # the audit log's `actor` column
OPERATOR_NAME_CHARS_MAX: Final = 40
OPERATOR_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
PATTERN: Final = re.compile(
    r"operator:[a-z0-9][a-z0-9_.-]{0,39}"
    r"|api_key:key_[0-9A-Za-z]{1,40}"
    r"|worker:[a-z_]{1,40}"
    r"|processor"
    r"|reconcile:rcn_[0-9A-Za-z]{1,40}"
    r"|local"
    r"|anonymous"
)


def operator(name: str) -> str:
    assert OPERATOR_NAME.fullmatch(name), name
    return f"operator:{name}"


def api_key(key_id: str) -> str:
    assert key_id.startswith("key_"), key_id
    return f"api_key:{key_id}"


def worker(job: str) -> str:
    return f"worker:{job}"


def worker_job(actor: str) -> str | None:
    """The job a `worker:JOB` actor is; None for any other actor."""
    return actor.removeprefix("worker:") if actor.startswith("worker:") else None


def reconcile(run_id: str) -> str:
    assert run_id.startswith("rcn_"), run_id
    return f"reconcile:{run_id}"


def is_actor(value: str) -> bool:
    return len(value) <= ACTOR_CHARS_MAX and PATTERN.fullmatch(value) is not None


def operator_name(actor: str) -> str | None:
    """The name of the person an `operator:NAME` actor is; None for any other actor."""
    return actor.removeprefix("operator:") if actor.startswith("operator:") else None
