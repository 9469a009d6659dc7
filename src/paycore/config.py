"""Settings, read once from the environment. Every bound is named `*_max`, `*_ms`, `*_days`.

| variable                                 | default                 |
|------------------------------------------|-------------------------|
| PAYCORE_DATABASE_URL                     | sqlite:///./paycore.db  |
| PAYCORE_BODY_BYTES_MAX                   | 1048576                 |
| PAYCORE_IDEMPOTENCY_WAIT_MS              | 10000                   |
| PAYCORE_IDEMPOTENCY_RETENTION_DAYS       | 30                      |
| PAYCORE_STATEMENT_TIMEOUT_MS             | 30000                   |
| PAYCORE_DB_POOL_SIZE                     | 20                      |
| PAYCORE_TRANSACTION_ATTEMPTS_MAX         | 5                       |
| PAYCORE_CREDIT_LINES_MAX                 | 100                     |
| PAYCORE_TRANSFER_ENTRIES_MAX             | 64                      |
| PAYCORE_BATCH_TRANSFERS_MAX              | 100                     |
| PAYCORE_METADATA_BYTES_MAX               | 4096                    |
| PAYCORE_METADATA_KEYS_MAX                | 50                      |
| PAYCORE_PAGE_LIMIT_MAX                   | 100                     |
| PAYCORE_WORKER_INTERVAL_MS               | 1000                    |
| PAYCORE_WORKER_BATCH_MAX                 | 100                     |
| PAYCORE_PROCESSOR_URL                    | http://127.0.0.1:8100   |
| PAYCORE_PROCESSOR_TIMEOUT_MS             | 10000                   |
| PAYCORE_PROCESSOR_WEBHOOK_SECRET         | whsec_sandbox_dev       |
| PAYCORE_PROCESSING_STALE_MS              | 60000                   |
| PAYCORE_RESOLVER_ATTEMPTS_MAX            | 10                      |
| PAYCORE_RESOLVER_BACKOFF_MS              | 1000                    |
| PAYCORE_RESOLVER_BACKOFF_MAX_MS          | 300000                  |
| PAYCORE_RESOLVER_BATCH_MAX               | 10                      |
| PAYCORE_CLAIM_LEASE_MS                   | 300000                  |
| PAYCORE_SANDBOX_DATABASE_URL             | sqlite:///./paycore-sandbox.db |
| PAYCORE_HTTP_HEADER_BYTES_MAX            | 65536                   |
| PAYCORE_HTTP_REQUEST_RECEIVE_TIMEOUT_MS  | 10000                   |
| PAYCORE_HTTP_KEEPALIVE_IDLE_MS           | 5000                    |
| PAYCORE_HTTP_CONNECTIONS_MAX             | 1000                    |
| PAYCORE_SERVE_WORKERS                    | (PostgreSQL: one per core; SQLite: 1) |
| PAYCORE_FORWARDED_ALLOW_IPS              | (empty: trust no proxy) |
| PAYCORE_LOG_FORMAT                       | json                    |
| PAYCORE_LOG_LEVEL                        | INFO                    |
| PAYCORE_INVARIANTS_INTERVAL_MS           | 300000                  |
| PAYCORE_INVARIANTS_ROWS_MAX              | 1000                    |
| PAYCORE_RECONCILE_DELAY_MS               | 7200000                 |
| PAYCORE_RECONCILE_GRACE_MS               | 3600000                 |
| PAYCORE_RECONCILE_LOOKBACK_DAYS          | 7                       |
| PAYCORE_RECONCILE_INTERVAL_MS            | 300000                  |
| PAYCORE_RECONCILE_LEASE_MS               | 300000                  |
| PAYCORE_WEBHOOK_TIMEOUT_MS               | 10000                   |
| PAYCORE_WEBHOOK_CONCURRENCY_MAX          | 4                       |
| PAYCORE_WEBHOOK_BATCH_MAX                | 50                      |
| PAYCORE_WEBHOOK_LEASE_MS                 | 60000                   |
| PAYCORE_WEBHOOK_POLL_MS                  | 250                     |
| PAYCORE_WEBHOOK_BACKOFF_MS               | 20000                   |
| PAYCORE_WEBHOOK_BACKOFF_MAX_MS           | 3600000                 |
| PAYCORE_WEBHOOK_RETRY_WINDOW_MS          | 259200000               |
| PAYCORE_WEBHOOK_DISABLE_AFTER_MS         | 259200000               |
| PAYCORE_WEBHOOK_SECRET_OVERLAP_MS        | 86400000                |
| PAYCORE_OPS_SESSION_IDLE_MS              | 1800000                 |
| PAYCORE_OPS_SESSION_MAX_MS               | 43200000                |
| PAYCORE_OPS_SIGN_IN_FAILURES_MAX         | 5                       |
| PAYCORE_OPS_SIGN_IN_WINDOW_MS            | 60000                   |
| PAYCORE_SECRETS_KEY                      | (local mode: a key file) |

The documentation of each lives in docs/configuration.md.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field, replace
from typing import Final

from paycore.kit.logs import FORMATS as LOG_FORMATS
from paycore.kit.logs import LEVELS as LOG_LEVELS
from paycore.kit.numbers import InvalidNumber, parse_digits

DEFAULT_DATABASE_URL: Final = "sqlite:///./paycore.db"
IDEMPOTENCY_KEY_LENGTH_MAX: Final = 255
TENANT_ID_LENGTH_MAX: Final = 64
DEV_WEBHOOK_SECRET: Final = "whsec_sandbox_dev"  # the sandbox's default; refused off loopback
# While the database cannot be reached a worker thread waits between tries, doubling from the
# first to the largest, with jitter (docs/runbooks/operations.md, "The database went away").
DATABASE_RETRY_BACKOFF_MS: Final = 500
DATABASE_RETRY_BACKOFF_MAX_MS: Final = 5000
# `paycore serve --workers N` (ADR 0028): at most this many API processes; a child that dies
# is started again, but more than `SERVE_RESTARTS_MAX` restarts within the window stops them all
# (the give-up rule); on a stop each child has this long to finish its requests.
SERVE_WORKERS_MAX: Final = 64
SERVE_RESTARTS_MAX: Final = 5
SERVE_RESTART_WINDOW_MS: Final = 60_000
SERVE_STOP_TIMEOUT_MS: Final = 30_000
# SQLite's default: measured by bench/serve_workers_bench.py (docs/benchmarks.md): one writer at a
# time whatever the processes, and a second process only adds lock waits.
SQLITE_SERVE_WORKERS_DEFAULT: Final = 1
SECRETS_KEY_BYTES: Final = 32  # an AES-256 key (ADR 0018)
SECRETS_KEYS_MAX: Final = 8  # keys in PAYCORE_SECRETS_KEY: the current one and those it replaced
SECRETS_KEY_HOWTO: Final = (
    "make one with: python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())'"
)


def _int(name: str, default: int, *, minimum: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_digits(raw, minimum=minimum)
    except InvalidNumber as error:
        raise SystemExit(f"{name} {error.message}, got {raw!r}") from error


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.upper() if choices == LOG_LEVELS else raw.lower()
    if value not in choices:
        raise SystemExit(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def decode_secrets_key(text: str) -> bytes | None:
    """A key as written in PAYCORE_SECRETS_KEY or the local key file: 32 bytes in URL-safe base64
    (padding optional); None for anything else."""
    text = text.strip()
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) == SECRETS_KEY_BYTES else None


def _secrets_keys(name: str) -> tuple[bytes, ...]:
    """Comma-separated keys, the newest first: the first encrypts, every one decrypts (a
    rotation's old keys stay until `paycore secrets rotate` has re-encrypted everything). A
    refusal says which key is wrong, never what it holds."""
    texts = [text.strip() for text in os.environ.get(name, "").split(",") if text.strip()]
    if len(texts) > SECRETS_KEYS_MAX:
        raise SystemExit(f"{name} holds {len(texts)} keys; at most {SECRETS_KEYS_MAX}")
    keys = []
    for position, text in enumerate(texts, start=1):
        key = decode_secrets_key(text)
        if key is None:
            raise SystemExit(
                f"{name}: key {position} of {len(texts)} is not {SECRETS_KEY_BYTES} bytes in URL-safe base64; "
                + SECRETS_KEY_HOWTO
            )
        keys.append(key)
    return tuple(keys)


def cores_usable() -> int:
    """The cores this process may run on (its affinity, where the system has one: Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def log_options_from_env() -> tuple[str, str]:
    """(format, level) of the logs: read on their own, before the rest of the settings, so
    that a refusal to start over any other setting is already a log line."""
    return _choice("PAYCORE_LOG_FORMAT", "json", LOG_FORMATS), _choice("PAYCORE_LOG_LEVEL", "INFO", LOG_LEVELS)


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    body_bytes_max: int = 1_048_576
    idempotency_wait_ms: int = 10_000
    idempotency_retention_days: int = 30
    statement_timeout_ms: int = 30_000
    db_pool_size: int = 20
    transaction_attempts_max: int = 5
    credit_lines_max: int = 100
    transfer_entries_max: int = 64
    batch_transfers_max: int = 100
    metadata_bytes_max: int = 4096
    metadata_keys_max: int = 50
    page_limit_max: int = 100
    worker_interval_ms: int = 1000
    worker_batch_max: int = 100
    enabled_credit_currencies: frozenset[str] = field(default=frozenset({"USD"}))
    processor_url: str = "http://127.0.0.1:8100"
    processor_timeout_ms: int = 10_000
    processor_webhook_secret: str = DEV_WEBHOOK_SECRET
    # Must exceed processor_timeout_ms: a `processing` payment older than this is the resolver's.
    processing_stale_ms: int = 60_000
    resolver_attempts_max: int = 10
    resolver_backoff_ms: int = 1_000
    resolver_backoff_max_ms: int = 300_000
    resolver_batch_max: int = 10
    # A worker's claim on an item lapses after this; must exceed resolver_batch_max processor calls.
    claim_lease_ms: int = 300_000
    sandbox_database_url: str = "sqlite:///./paycore-sandbox.db"
    # The HTTP server's own bounds (SPEC §13, ADR 0013), applied by paycore.http.server.
    http_header_bytes_max: int = 65_536
    http_request_receive_timeout_ms: int = 10_000
    http_keepalive_idle_ms: int = 5_000
    http_connections_max: int = 1_000
    # Peers whose X-Forwarded-For/-Proto are believed (comma-separated addresses or networks,
    # or "*"); empty: nobody's.
    forwarded_allow_ips: str = ""
    # API processes of `paycore serve` (ADR 0028); None: the database's default (`serve_workers_for`).
    serve_workers: int | None = None
    log_format: str = "json"
    log_level: str = "INFO"
    # The invariant checks (paycore.invariants): each runs at most this often, over at most
    # this many subjects (accounts, transfers, payments, payouts) per run.
    invariants_interval_ms: int = 300_000
    invariants_rows_max: int = 1_000
    # Reconciliation (docs/reconciliation.md): the worker reconciles a closed UTC day this long
    # after its end, looking back at most this many days; an item created in the last
    # `reconcile_grace_ms` of a day waits for the next day's report (at most an hour).
    reconcile_delay_ms: int = 7_200_000
    reconcile_grace_ms: int = 3_600_000
    reconcile_lookback_days: int = 7
    # How often a worker looks for days to reconcile (at once again while some are due).
    reconcile_interval_ms: int = 300_000
    # A run's lease on its day, renewed by every transaction the run writes in: a run that has
    # not renewed it for this long (killed, hung) is abandoned by the next run of its day or by a
    # worker, and its breaks are rolled back (docs/reconciliation.md).
    reconcile_lease_ms: int = 300_000
    # Outgoing webhooks (docs/webhooks.md): one POST's bound; delivery threads per worker
    # process; deliveries per endpoint per turn; a worker's hold on an endpoint; how often an
    # idle delivery thread looks for work; the first retry's delay (with jitter: half to all of
    # it) and the cap; how long a delivery is retried; how long an endpoint may fail before it
    # is disabled; how long a rotated secret keeps signing beside the new one.
    webhook_timeout_ms: int = 10_000
    webhook_concurrency_max: int = 4
    webhook_batch_max: int = 50
    webhook_lease_ms: int = 60_000
    webhook_poll_ms: int = 250
    webhook_backoff_ms: int = 20_000
    webhook_backoff_max_ms: int = 3_600_000
    webhook_retry_window_ms: int = 259_200_000
    webhook_disable_after_ms: int = 259_200_000
    webhook_secret_overlap_ms: int = 86_400_000
    # The operations console (/ops, docs/operations-console.md): a session ends after this long
    # without a request, or this long after it began. Failed sign-ins within the window: this
    # many for one operator name from one address block that name there, this many from one
    # address over every name block the address, each for the window.
    ops_session_idle_ms: int = 1_800_000
    ops_session_max_ms: int = 43_200_000
    ops_sign_in_failures_max: int = 5
    ops_sign_in_address_failures_max: int = 50
    ops_sign_in_window_ms: int = 60_000
    # Secrets at rest (ADR 0018): the keys that encrypt webhook signing secrets, the newest
    # first. Empty: in local mode a key file beside the database is used (generated on first
    # start); outside it every entry point refuses to start (paycore.keyring). Never shown.
    secrets_keys: tuple[bytes, ...] = field(default=(), repr=False)

    @classmethod
    def from_env(cls) -> Settings:
        log_format, log_level = log_options_from_env()
        return cls(
            database_url=os.environ.get("PAYCORE_DATABASE_URL") or DEFAULT_DATABASE_URL,
            body_bytes_max=_int("PAYCORE_BODY_BYTES_MAX", 1_048_576),
            idempotency_wait_ms=_int("PAYCORE_IDEMPOTENCY_WAIT_MS", 10_000),
            idempotency_retention_days=_int("PAYCORE_IDEMPOTENCY_RETENTION_DAYS", 30, minimum=30),  # §3.1: >= 30
            statement_timeout_ms=_int("PAYCORE_STATEMENT_TIMEOUT_MS", 30_000),
            db_pool_size=_int("PAYCORE_DB_POOL_SIZE", 20),
            transaction_attempts_max=_int("PAYCORE_TRANSACTION_ATTEMPTS_MAX", 5),
            credit_lines_max=_int("PAYCORE_CREDIT_LINES_MAX", 100),
            transfer_entries_max=_int("PAYCORE_TRANSFER_ENTRIES_MAX", 64, minimum=2),
            batch_transfers_max=_int("PAYCORE_BATCH_TRANSFERS_MAX", 100),
            metadata_bytes_max=_int("PAYCORE_METADATA_BYTES_MAX", 4096),
            metadata_keys_max=_int("PAYCORE_METADATA_KEYS_MAX", 50),
            page_limit_max=_int("PAYCORE_PAGE_LIMIT_MAX", 100),
            worker_interval_ms=_int("PAYCORE_WORKER_INTERVAL_MS", 1000),
            worker_batch_max=_int("PAYCORE_WORKER_BATCH_MAX", 100),
            processor_url=os.environ.get("PAYCORE_PROCESSOR_URL") or "http://127.0.0.1:8100",
            processor_timeout_ms=_int("PAYCORE_PROCESSOR_TIMEOUT_MS", 10_000),
            processor_webhook_secret=os.environ.get("PAYCORE_PROCESSOR_WEBHOOK_SECRET") or DEV_WEBHOOK_SECRET,
            processing_stale_ms=_int("PAYCORE_PROCESSING_STALE_MS", 60_000),
            resolver_attempts_max=_int("PAYCORE_RESOLVER_ATTEMPTS_MAX", 10),
            resolver_backoff_ms=_int("PAYCORE_RESOLVER_BACKOFF_MS", 1_000),
            resolver_backoff_max_ms=_int("PAYCORE_RESOLVER_BACKOFF_MAX_MS", 300_000),
            resolver_batch_max=_int("PAYCORE_RESOLVER_BATCH_MAX", 10),
            claim_lease_ms=_int("PAYCORE_CLAIM_LEASE_MS", 300_000),
            sandbox_database_url=os.environ.get("PAYCORE_SANDBOX_DATABASE_URL") or "sqlite:///./paycore-sandbox.db",
            http_header_bytes_max=_int("PAYCORE_HTTP_HEADER_BYTES_MAX", 65_536, minimum=1024),
            http_request_receive_timeout_ms=_int("PAYCORE_HTTP_REQUEST_RECEIVE_TIMEOUT_MS", 10_000),
            http_keepalive_idle_ms=_int("PAYCORE_HTTP_KEEPALIVE_IDLE_MS", 5_000),
            http_connections_max=_int("PAYCORE_HTTP_CONNECTIONS_MAX", 1_000),
            forwarded_allow_ips=os.environ.get("PAYCORE_FORWARDED_ALLOW_IPS", "").strip(),
            serve_workers=_int("PAYCORE_SERVE_WORKERS", 0) or None,
            log_format=log_format,
            log_level=log_level,
            invariants_interval_ms=_int("PAYCORE_INVARIANTS_INTERVAL_MS", 300_000),
            invariants_rows_max=_int("PAYCORE_INVARIANTS_ROWS_MAX", 1_000),
            reconcile_delay_ms=_int("PAYCORE_RECONCILE_DELAY_MS", 7_200_000, minimum=0),
            reconcile_grace_ms=_int("PAYCORE_RECONCILE_GRACE_MS", 3_600_000, minimum=0),
            reconcile_lookback_days=_int("PAYCORE_RECONCILE_LOOKBACK_DAYS", 7),
            reconcile_interval_ms=_int("PAYCORE_RECONCILE_INTERVAL_MS", 300_000),
            reconcile_lease_ms=_int("PAYCORE_RECONCILE_LEASE_MS", 300_000),
            webhook_timeout_ms=_int("PAYCORE_WEBHOOK_TIMEOUT_MS", 10_000),
            webhook_concurrency_max=_int("PAYCORE_WEBHOOK_CONCURRENCY_MAX", 4),
            webhook_batch_max=_int("PAYCORE_WEBHOOK_BATCH_MAX", 50),
            webhook_lease_ms=_int("PAYCORE_WEBHOOK_LEASE_MS", 60_000),
            webhook_poll_ms=_int("PAYCORE_WEBHOOK_POLL_MS", 250),
            webhook_backoff_ms=_int("PAYCORE_WEBHOOK_BACKOFF_MS", 20_000),
            webhook_backoff_max_ms=_int("PAYCORE_WEBHOOK_BACKOFF_MAX_MS", 3_600_000),
            webhook_retry_window_ms=_int("PAYCORE_WEBHOOK_RETRY_WINDOW_MS", 259_200_000),
            webhook_disable_after_ms=_int("PAYCORE_WEBHOOK_DISABLE_AFTER_MS", 259_200_000),
            webhook_secret_overlap_ms=_int("PAYCORE_WEBHOOK_SECRET_OVERLAP_MS", 86_400_000, minimum=0),
            ops_session_idle_ms=_int("PAYCORE_OPS_SESSION_IDLE_MS", 1_800_000),
            ops_session_max_ms=_int("PAYCORE_OPS_SESSION_MAX_MS", 43_200_000),
            ops_sign_in_failures_max=_int("PAYCORE_OPS_SIGN_IN_FAILURES_MAX", 5),
            ops_sign_in_address_failures_max=_int("PAYCORE_OPS_SIGN_IN_ADDRESS_FAILURES_MAX", 50),
            ops_sign_in_window_ms=_int("PAYCORE_OPS_SIGN_IN_WINDOW_MS", 60_000),
            secrets_keys=_secrets_keys("PAYCORE_SECRETS_KEY"),
        )._checked()

    def _checked(self) -> Settings:
        # A delivery thread makes a call only while its lease on the endpoint has room for the
        # call's whole exchange (twice the timeout, and a second): else it would never send.
        if self.webhook_lease_ms <= 2 * self.webhook_timeout_ms + 1_000:
            raise SystemExit(
                "PAYCORE_WEBHOOK_LEASE_MS must exceed twice PAYCORE_WEBHOOK_TIMEOUT_MS plus 1000, "
                f"got {self.webhook_lease_ms} with a timeout of {self.webhook_timeout_ms}"
            )
        if self.serve_workers is not None and self.serve_workers > SERVE_WORKERS_MAX:
            raise SystemExit(f"PAYCORE_SERVE_WORKERS must be at most {SERVE_WORKERS_MAX}, got {self.serve_workers}")
        if self.ops_sign_in_address_failures_max < self.ops_sign_in_failures_max:
            raise SystemExit(
                "PAYCORE_OPS_SIGN_IN_ADDRESS_FAILURES_MAX (every name from one address) must be at least "
                f"PAYCORE_OPS_SIGN_IN_FAILURES_MAX (one name), got {self.ops_sign_in_address_failures_max} "
                f"and {self.ops_sign_in_failures_max}"
            )
        return self

    def serve_workers_for(self, *, is_postgres: bool) -> int:
        """API processes for `paycore serve` without `--workers`: the setting, else one per core
        this process may run on (PostgreSQL), else SQLite's measured default."""
        if self.serve_workers is not None:
            return self.serve_workers
        if not is_postgres:
            return SQLITE_SERVE_WORKERS_DEFAULT
        return max(1, min(cores_usable(), SERVE_WORKERS_MAX))

    def with_database(self, database_url: str) -> Settings:
        return replace(self, database_url=database_url)
