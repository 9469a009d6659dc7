"""`paycore secrets rotate`: seal every secret at rest under the newest key (ADR 0018).

PAYCORE_SECRETS_KEY lists its keys newest first: the first seals, every one opens. Once a new
key is first (the old ones after it) in every process, this seals each webhook signing secret
under it: the endpoints' `secret` and `previous_secret`, and the secret in the stored answers of
the requests that made them, those still in clear included. It goes in batches of
`ROTATE_BATCH_MAX` rows, one short transaction each, with a progress bar on standard error and a
summary at the end. Each row is rewritten only if unchanged since read, so the API and the
workers may run meanwhile; running it again changes nothing. When it reports every secret under
the newest key, the old keys can be dropped.

Exit 0 when every secret is under the newest key; 1 when some are not (sealed under a key
PAYCORE_SECRETS_KEY lacks, or changed by a request while it ran: run it again), or the schema is
behind; 2 when it must not start (no key outside local mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy import Connection

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.keyring import Keyring, SecretsKeyRefused
from paycore.keyring import load as load_keyring
from paycore.operators import service as operators
from paycore.webhooks import service as webhooks

ROTATE_BATCH_MAX: Final = 100  # rows per transaction: short, whatever the table's size

app = typer.Typer(help="Secrets at rest (ADR 0018): the keys of PAYCORE_SECRETS_KEY.", no_args_is_help=True)
errors = Console(stderr=True)

Batch = Callable[..., webhooks.Resealed]


def keyring_or_exit(settings: Settings, *, local_mode: Callable[[], bool], dev_key_file: bool = False) -> Keyring:
    """The keys of secrets at rest (paycore.keyring, `dev_key_file` for `serve --dev` on
    loopback); without one outside local mode (logged as `start_refused` there), exit status 2,
    as for the other start-up refusals."""
    try:
        return load_keyring(settings, local_mode=local_mode, dev_key_file=dev_key_file)
    except SecretsKeyRefused:
        raise typer.Exit(2) from None


@dataclass
class Tally:
    examined: int = 0
    resealed: int = 0
    in_clear: int = 0
    unreadable: int = 0
    changed: int = 0

    def add(self, batch: webhooks.Resealed) -> None:
        self.examined += batch.examined
        self.resealed += batch.resealed
        self.in_clear += batch.in_clear
        self.unreadable += batch.unreadable
        self.changed += batch.changed


@app.command()
def rotate() -> None:
    """Seal every webhook signing secret (those in clear too) under the newest key: the first
    of PAYCORE_SECRETS_KEY. Safe while paycore runs; running it again changes nothing."""
    settings = Settings.from_env()
    database = Database(settings)
    try:
        if not migrate.is_usable(database):
            errors.print("[red]the database schema is behind: run `paycore db upgrade` first[/red]")
            raise typer.Exit(1)
        keyring = keyring_or_exit(settings, local_mode=lambda: operators.local_mode_now(database))
        with database.read() as connection:
            total = webhooks.count_endpoints(connection) + idempotency.count_keys(connection)
        with _progress(total) as advance:
            endpoints = _all_batches(database, partial(webhooks.reseal_endpoints, keyring=keyring), advance)
            answers = _all_batches(database, partial(webhooks.reseal_answers, keyring=keyring), advance)
    finally:
        database.dispose()
    _print_summary(keyring, endpoints, answers)
    if endpoints.unreadable + answers.unreadable + endpoints.changed + answers.changed:
        raise typer.Exit(1)


def _all_batches(database: Database, batch: Batch, advance: Callable[[int], None]) -> Tally:
    """Every batch in turn, each in its own transaction, until one says it was the last."""
    tally = Tally()
    after: tuple[str, str] | None = None
    while True:
        done = database.transaction(partial(_one_batch, batch, after))
        tally.add(done)
        advance(done.examined)
        if done.after is None:
            return tally
        after = done.after


def _one_batch(batch: Batch, after: tuple[str, str] | None, connection: Connection) -> webhooks.Resealed:
    return batch(connection, after=after, limit=ROTATE_BATCH_MAX)


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int], None]]:
    columns = (SpinnerColumn(), TextColumn("re-encrypting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=errors, transient=True) as progress:
        task = progress.add_task("rows", total=total)
        yield lambda rows: progress.advance(task, rows)


def _print_summary(keyring: Keyring, endpoints: Tally, answers: Tally) -> None:
    for name, tally in (("endpoints", endpoints), ("stored answers", answers)):
        print(
            f"{name}: {tally.examined} rows examined, {tally.resealed} secrets re-encrypted "
            f"({tally.in_clear} of them were in clear)"
        )
    unreadable = endpoints.unreadable + answers.unreadable
    changed = endpoints.changed + answers.changed
    if unreadable:
        print(
            f"{unreadable} secrets are sealed under a key PAYCORE_SECRETS_KEY lacks: left as they are. "
            "Add that key back (after the first) and run this again."
        )
    if changed:
        print(f"{changed} rows changed while this ran: run this again to check them.")
    if not unreadable and not changed:
        print(
            f"every secret is sealed under key {keyring.current_key_id} (the first of PAYCORE_SECRETS_KEY): "
            "the keys after it can be removed."
        )
