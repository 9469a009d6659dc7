"""TigerBeetle's batched rate, for bench/_peers.py: run by the throwaway virtualenv's Python that
holds `tigerbeetle==0.17.8` (never paycore's venv). Prints one JSON line.

    python _tb_client.py 127.0.0.1:PORT BATCH DURATION_S

Two fresh accounts, then batches of BATCH transfers of 1 from one to the other for DURATION_S
(at least one batch, at most BATCHES_MAX); every transfer's result is checked, and the accounts'
posted totals must equal the transfers counted.
"""

from __future__ import annotations

import json
import sys
import time

import tigerbeetle as tb

BATCHES_MAX = 100_000
LEDGER, CODE = 1, 1


def failures(results: list[object]) -> list[str]:
    """0.17 answers every event with a status; older clients list only the failures."""
    bad = []
    for result in results:
        status = getattr(result, "status", None) or getattr(result, "result", None)
        if status is not None and getattr(status, "name", str(status)).lower() not in ("created", "ok"):
            bad.append(str(result))
    return bad


def main() -> int:
    address, batch, duration_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with tb.ClientSync(cluster_id=0, replica_addresses=address) as client:
        debit, credit = tb.id(), tb.id()
        made = client.create_accounts([tb.Account(id=i, ledger=LEDGER, code=CODE) for i in (debit, credit)])
        if failures(made):
            print(json.dumps({"per_s": None, "problems": failures(made)[:3]}))
            return 1

        def transfers() -> list[tb.Transfer]:
            return [
                tb.Transfer(
                    id=tb.id(), debit_account_id=debit, credit_account_id=credit, amount=1, ledger=LEDGER, code=CODE
                )
                for _ in range(batch)
            ]

        client.create_transfers(transfers())  # warm: connected, registered
        sent, started = batch, time.perf_counter()
        batches, problems = 0, []
        while batches == 0 or (time.perf_counter() - started < duration_s and batches < BATCHES_MAX):
            problems += failures(client.create_transfers(transfers()))[:3]
            batches += 1
        elapsed = time.perf_counter() - started
        sent += batches * batch
        accounts = client.lookup_accounts([debit, credit])
        posted = [account.debits_posted for account in accounts if account.id == debit]
        if posted != [sent] and not problems:
            problems.append(f"debit account posted {posted}, client counted {sent}")
    print(json.dumps({"per_s": batches * batch / elapsed, "batches": batches, "problems": problems}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
