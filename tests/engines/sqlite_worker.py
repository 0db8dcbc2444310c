"""A separate OS process that writes to an SQLite store (driven by test_sqlite_engine.py).

Usage: python sqlite_worker.py PATH MODE WORKER_ID COUNT
  commit  -- COUNT transactions, each adding a versionstamped key, its own key and a counter;
             prints the versionstamps it was given, as JSON hex strings, in order.
  read-write -- COUNT transactions, each reading the worker's last key and writing the next
             (1 KB): writers that read before they write, as the plane's do.
  torture -- transactions of 50 keys of 2 KB plus a marker key, until killed; prints
             ``committed`` once COUNT transactions have committed.
"""

from __future__ import annotations

import json
import sys

from backends.kv.sqlite import SqliteEngine
from persistence import fdbtuple, kv
from persistence.fdbtuple import Versionstamp


def main() -> None:
    path, mode, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    engine = SqliteEngine(path)
    if mode == "commit":
        stamps = []
        for i in range(count):

            def body(tr: kv.Transaction, i: int = i) -> kv.VersionstampFuture:
                tr.set_versionstamped_key(
                    fdbtuple.pack_with_versionstamp(("vs", Versionstamp(None, 0))),
                    fdbtuple.pack((worker, i)),
                )
                tr.set(fdbtuple.pack(("w", worker, i)), b"")
                tr.add(fdbtuple.pack(("counter",)), (1).to_bytes(8, "little"))
                return tr.get_versionstamp()

            stamps.append(kv.run_sync(engine, body).wait().hex())
        print(json.dumps(stamps))
    elif mode == "read-write":
        for i in range(count):

            def step(tr: kv.Transaction, i: int = i) -> None:
                tr.get(fdbtuple.pack(("rw", worker, i - 1))).wait()
                tr.set(fdbtuple.pack(("rw", worker, i)), b"v" * 1000)

            kv.run_sync(engine, step)
    elif mode == "torture":
        txid = worker * 1_000_000
        print("ready", flush=True)
        while True:
            txid += 1

            def batch(tr: kv.Transaction, txid: int = txid) -> None:
                for j in range(50):
                    tr.set(fdbtuple.pack(("batch", txid, j)), bytes([j]) * 2048)
                tr.set(fdbtuple.pack(("tx", txid)), b"")

            kv.run_sync(engine, batch)
            if txid == worker * 1_000_000 + count:
                print("committed", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
