"""Ledger accounts: create, find, list, and get-or-create the system accounts other domains use.

A tenant creates its own accounts (`create_account`); paycore's system accounts (the chart of
accounts) are created only by `ensure_account(s)`, flagged `system`, and their codes are
reserved: a tenant's request for one is refused (`SystemAccount`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import ids
from paycore.kit.errors import InvalidStartingAfter, UnsupportedCurrency
from paycore.kit.money import is_known_currency
from paycore.ledger import chart, repository
from paycore.ledger.balances import Balance
from paycore.ledger.errors import AccountExists, SystemAccount
from paycore.ledger.types import DIRECTIONS, Account, AccountTemplate, account_from_row


def create_account(
    connection: Connection,
    tenant_id: str,
    *,
    code: str,
    currency: str,
    normal_balance: str,
    no_overdraft: bool,
    metadata: dict[str, str],
    now_us: int,
) -> Account:
    """A new account of the tenant's; a code of the chart of accounts is refused (SystemAccount)."""
    if chart.is_reserved(code):
        raise SystemAccount(f"account code {code!r} is reserved for paycore's system accounts", param="code")
    return _insert(connection, tenant_id, code, currency, normal_balance, no_overdraft, metadata, now_us)


def _insert(
    connection: Connection,
    tenant_id: str,
    code: str,
    currency: str,
    normal_balance: str,
    no_overdraft: bool,
    metadata: dict[str, str],
    now_us: int,
) -> Account:
    assert normal_balance in DIRECTIONS, normal_balance
    if not is_known_currency(currency):
        raise UnsupportedCurrency(f"currency {currency!r} is not supported", param="currency")
    system = chart.is_reserved(code)
    values = {
        "tenant_id": tenant_id,
        "id": ids.new_id("acct"),
        "code": code,
        "currency": currency,
        "normal_balance": normal_balance,
        "no_overdraft": no_overdraft,
        "system": system,
        "metadata": json.dumps(metadata, sort_keys=True),
        "debits_posted_minor": 0,
        "credits_posted_minor": 0,
        "debits_pending_minor": 0,
        "credits_pending_minor": 0,
        "entries_count": 0,
        "created_at_us": now_us,
    }
    if not repository.insert_account(connection, values):
        raise AccountExists(f"an account with code {code!r} already exists", param="code")
    # The view of what was just written: a new account has no entries, so every balance is 0.
    return Account(
        id=str(values["id"]),
        code=code,
        currency=currency,
        normal_balance=normal_balance,
        no_overdraft=no_overdraft,
        metadata=dict(metadata),
        created_at_us=now_us,
        balance=Balance(posted_minor=0, pending_minor=0, available_minor=0),
        system=system,
    )


def ensure_account(
    connection: Connection,
    tenant_id: str,
    *,
    code: str,
    currency: str,
    normal_balance: str,
    no_overdraft: bool,
    now_us: int,
) -> Account:
    """Get the account with this code, creating it if it does not exist (safe under races:
    the unique (tenant_id, code) constraint picks one winner). A code of the chart of accounts
    is a system account (the flows' way to their accounts); any other code is the tenant's."""
    template = AccountTemplate(code, currency, normal_balance, no_overdraft)
    row = repository.get_account_by_code(connection, tenant_id, code)
    account = account_from_row(row) if row is not None else _create_or_find(connection, tenant_id, template, now_us)
    assert (account.currency, account.normal_balance, account.system) == (
        currency,
        normal_balance,
        chart.is_reserved(code),
    ), code
    return account


def _create_or_find(connection: Connection, tenant_id: str, template: AccountTemplate, now_us: int) -> Account:
    """Create an account known to be missing; if a concurrent transaction created it first, read theirs."""
    try:
        return _insert(
            connection,
            tenant_id,
            template.code,
            template.currency,
            template.normal_balance,
            template.no_overdraft,
            {},
            now_us,
        )
    except AccountExists:
        return account_from_row(repository.get_account_by_code(connection, tenant_id, template.code))


def ensure_accounts(
    connection: Connection, tenant_id: str, templates: Sequence[AccountTemplate], *, now_us: int
) -> dict[str, Account]:
    """The accounts with these codes, by code, created where missing: one SELECT when they
    all exist (the common case), so system accounts cost no extra round trips."""
    rows = repository.get_accounts_by_codes(connection, tenant_id, [t.code for t in templates])
    found = {code: account_from_row(row) for code, row in rows.items()}
    for template in templates:
        if template.code not in found:
            found[template.code] = _create_or_find(connection, tenant_id, template, now_us)
        account = found[template.code]
        assert (account.currency, account.normal_balance, account.system) == (
            template.currency,
            template.normal_balance,
            chart.is_reserved(template.code),
        ), template.code
    return found


def get_account(connection: Connection, tenant_id: str, account_id: str) -> Account:
    return account_from_row(repository.get_account(connection, tenant_id, account_id))


def find_account_by_code(connection: Connection, tenant_id: str, code: str) -> Account | None:
    row = repository.get_account_by_code(connection, tenant_id, code)
    return None if row is None else account_from_row(row)


def load_accounts(connection: Connection, tenant_id: str, account_ids: Iterable[str]) -> dict[str, Account]:
    return {
        account_id: account_from_row(row)
        for account_id, row in repository.get_accounts(connection, tenant_id, account_ids).items()
    }


class _FactsCache:
    """What never changes about an account once written (its id, tenant, currency, normal
    balance and flags: no statement updates them and none deletes an account), kept per
    process so a transfer between known accounts reads none.

    Its `balance` is whatever it was when first read: callers use only the facts. The cache
    never decides that an account exists: the transfer's own UPDATE of each account finds
    its row or refuses (see postings._apply), so an id cached from a transaction that rolled
    back, or from another database, cannot move money. Ids are random, so two databases never
    share one with different facts. Bounded: emptied when full."""

    def __init__(self, size_max: int) -> None:
        self._size_max = size_max
        self._accounts: dict[tuple[str, str], Account] = {}

    def get(self, tenant_id: str, account_id: str) -> Account | None:
        return self._accounts.get((tenant_id, account_id))

    def put(self, tenant_id: str, account: Account) -> None:
        if len(self._accounts) >= self._size_max:
            self._accounts = {}
        self._accounts[(tenant_id, account.id)] = account


ACCOUNT_FACTS_CACHED_MAX = 100_000
_FACTS = _FactsCache(ACCOUNT_FACTS_CACHED_MAX)


class SystemAccountIds:
    """The ids of the tenants' system accounts (the chart's: credits, processor clearing, ...)
    this process has written to, by (tenant, code): with an account's id known, a data-plane
    write (ADR 0026) on SQLite skips its creation. Never trusted to decide that an account
    exists: the totals' UPDATE finds its row or the write is refused (and the id forgotten
    here). Bounded: emptied when full."""

    def __init__(self, size_max: int) -> None:
        self._size_max = size_max
        self._ids: dict[tuple[str, str], str] = {}

    def get(self, tenant_id: str, code: str) -> str | None:
        return self._ids.get((tenant_id, code))

    def put(self, tenant_id: str, found: dict[str, str]) -> None:
        if len(self._ids) + len(found) > self._size_max:
            self._ids = {}
        for code, account_id in found.items():
            self._ids[(tenant_id, code)] = account_id

    def forget(self, tenant_id: str, codes: list[str]) -> None:
        for code in codes:
            self._ids.pop((tenant_id, code), None)


SYSTEM_ACCOUNTS_CACHED_MAX = 100_000  # per database
_SYSTEM_ACCOUNT_IDS: WeakKeyDictionary[Database, SystemAccountIds] = WeakKeyDictionary()


def system_account_ids(database: Database) -> SystemAccountIds:
    """This process's cache of `database`'s system account ids: one per database, so that a
    process that opens several in turn (the tests do) never plans with another's ids."""
    cache = _SYSTEM_ACCOUNT_IDS.get(database)
    if cache is None:  # two threads may both make one: one is dropped, nothing is wrong
        cache = _SYSTEM_ACCOUNT_IDS.setdefault(database, SystemAccountIds(SYSTEM_ACCOUNTS_CACHED_MAX))
    return cache


def load_account_facts(connection: Connection, tenant_id: str, account_ids: Iterable[str]) -> dict[str, Account]:
    """The accounts found, by id, for their immutable facts only (their balances may be
    stale): from this process's cache, reading only the ones it has not seen."""
    found: dict[str, Account] = {}
    missing = []
    for account_id in set(account_ids):
        cached = _FACTS.get(tenant_id, account_id)
        if cached is None:
            missing.append(account_id)
        else:
            found[account_id] = cached
    if missing:
        for account_id, account in load_accounts(connection, tenant_id, missing).items():
            _FACTS.put(tenant_id, account)
            found[account_id] = account
    return found


async def load_account_facts_on_loop(
    database: Database, tenant_id: str, account_ids: Iterable[str]
) -> dict[str, Account]:
    """`load_account_facts` from the event loop, no worker thread (a thin edge's, ADR 0026
    decision 4): from this process's cache; the accounts it has not seen read on PostgreSQL on
    the loop's connections (`db/loop_calls.py`), on SQLite by a read transaction (a WAL read of
    microseconds that never waits for the writer, as `http.context.authenticate` reads)."""
    wanted = set(account_ids)
    found = cached_account_facts(tenant_id, wanted)
    missing = wanted - found.keys()
    if not missing:
        return found
    if database.is_postgres:
        rows = await repository.get_accounts_on_loop(database, tenant_id, missing)
    else:
        with database.read() as connection:
            rows = list(repository.get_accounts(connection, tenant_id, missing).values())
    for row in rows:
        account = account_from_row(row)
        _FACTS.put(tenant_id, account)
        found[account.id] = account
    assert found.keys() <= wanted, (found.keys(), wanted)
    return found


def cached_account_facts(tenant_id: str, account_ids: Iterable[str]) -> dict[str, Account]:
    """The accounts among these that this process has cached, by id, for their immutable facts
    only: never a read (a data-plane planner's input, ADR 0026)."""
    found = {}
    for account_id in account_ids:
        cached = _FACTS.get(tenant_id, account_id)
        if cached is not None:
            found[account_id] = cached
    return found


def remember_accounts(tenant_id: str, rows: Iterable[Any]) -> None:
    """Put accounts a write returned whole (rows with the table's column names as attributes:
    a payment's settle phase returns its hold's two) into this process's cache of facts, as
    `load_account_facts` would have put them after reading them. One cached already is left as
    it is: its facts never change (a payment's settle returns the same two accounts each time)."""
    for row in rows:
        if _FACTS.get(tenant_id, row.id) is None:
            _FACTS.put(tenant_id, account_from_row(row))


@dataclass(frozen=True)
class ListedAccount:
    """An account with its tenant: a list across tenants (the console's) names both."""

    tenant_id: str
    account: Account


def list_accounts(
    connection: Connection,
    tenant_id: str | None,
    *,
    code_prefix: str | None,
    starting_after: tuple[str, str] | None,
    limit: int,
) -> list[ListedAccount]:
    """Accounts with their balances (posted, pending, available: from the cached totals), of
    one tenant or every one (None), in (tenant, id) order; `starting_after` is the (tenant,
    id) of the last account of the previous page, which must be one of the list's."""
    if starting_after is not None:
        after_tenant, after_id = starting_after
        found = repository.get_account(connection, after_tenant, after_id)
        if found is None or tenant_id not in (None, after_tenant):
            raise InvalidStartingAfter("starting_after is not an account of this list", param="starting_after")
    rows = repository.list_accounts(connection, tenant_id, code_prefix=code_prefix, after=starting_after, limit=limit)
    return [ListedAccount(row.tenant_id, account_from_row(row)) for row in rows]


def find_listed_account(connection: Connection, account_id: str, *, tenant_id: str | None) -> ListedAccount | None:
    """The account, of the tenant, or of any tenant when None (a scan: ids are not indexed
    without their tenant)."""
    if tenant_id is not None:
        row = repository.get_account(connection, tenant_id, account_id)
    else:
        row = repository.find_account_of_any(connection, account_id)
    return None if row is None else ListedAccount(row.tenant_id, account_from_row(row))
