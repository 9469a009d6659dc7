"""One OS process booking one processor fee in one transaction, for
test_processor_fees.py: nothing is shared with the test or another booker but the database.

Argument: a JSON object with `url`, `tenant`, `keys`, `fee_minor`, `start_at_ns` (the booking
starts then, so that several bookers start together) and `hold` (after booking, wait for a
line on stdin, `commit` or `rollback`, with the transaction open). One key is booked with
`book_processor_fee`, several in one `book_processor_fees` call. Prints JSON lines:
{"pid": <PostgreSQL backend pid or 0>}, then {"booked": [the keys booked]}, then
{"done": "commit"|"rollback"}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from sqlalchemy import Connection

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.ledger import service as ledger

HOLD_TIMEOUT_S = 60


class RolledBack(Exception):
    pass


RUN = "rcn_fee_booker"  # what books the fees: a reconciliation run owns their transfers


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def book(connection: Connection, config: dict[str, Any]) -> list[str]:
    now_us = time.time_ns() // 1000
    keys: list[str] = config["keys"]
    if len(keys) == 1:
        one = ledger.book_processor_fee(
            connection,
            config["tenant"],
            key=keys[0],
            currency="USD",
            fee_minor=config["fee_minor"],
            now_us=now_us,
            owner_id=RUN,
        )
        return keys if one else []
    fees = [ledger.ProcessorFee(key, "USD", config["fee_minor"]) for key in keys]
    return sorted(ledger.book_processor_fees(connection, config["tenant"], fees, now_us=now_us, owner_id=RUN).booked)


def main() -> None:
    config = json.loads(sys.argv[1])
    database = Database(Settings(database_url=config["url"], db_pool_size=1))

    def work(connection: Connection) -> list[str]:
        pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() if database.is_postgres else 0
        say(pid=pid)
        time.sleep(max(0, config["start_at_ns"] - time.time_ns()) / 1e9)
        booked = book(connection, config)
        say(booked=booked)
        if config["hold"] and sys.stdin.readline().strip() != "commit":
            raise RolledBack
        return booked

    try:
        database.transaction(work)
        say(done="commit")
    except RolledBack:
        say(done="rollback")
    finally:
        database.dispose()


if __name__ == "__main__":
    main()
