"""SQLite engine throughput: single-key and 100-key transactions of 1 KB values.

The baseline is plain ``sqlite3`` doing the same inserts into the same table layout with the
same durability (WAL, ``synchronous=FULL``): the ratio is what the transaction layer
(buffering, conflict validation, commit counter) costs over the raw database.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aos_bench import Figure
from backends.kv.sqlite import PAGE_SIZE, SqliteEngine
from persistence import fdbtuple, kv

VALUE = b"v" * 1000
ROUNDS = 5


_ids = itertools.count()


def _rate(count: int, fn: Callable[[int], None], seconds: float) -> float:
    """Operations per second of ``fn(unique id)`` over at least ``seconds`` and ``count`` calls."""
    start = time.perf_counter()
    done = 0
    while done < count or time.perf_counter() - start < seconds:
        fn(next(_ids))
        done += 1
    return done / (time.perf_counter() - start)


def _raw_sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
    return conn


def run(seconds: float = 2.0, progress: Callable[[str], None] = lambda _: None) -> list[Figure]:
    """Measure and return the engine figures."""
    figures = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-") as tmp:
        engine = SqliteEngine(os.path.join(tmp, "engine.db"), synchronous="FULL")
        raw = _raw_sqlite(Path(tmp) / "raw.db")

        for batch in (1, 100):
            progress(f"engine: {batch}-key transactions")

            def ours(i: int, batch: int = batch) -> None:
                def body(tr: kv.Transaction) -> None:
                    for j in range(batch):
                        tr.set(fdbtuple.pack(("b", batch, i, j)), VALUE)

                kv.run_sync(engine, body)

            def theirs(i: int, batch: int = batch) -> None:
                raw.execute("BEGIN")
                raw.executemany(
                    "INSERT INTO kv VALUES (?, ?)",
                    [(fdbtuple.pack(("b", batch, i, j)), VALUE) for j in range(batch)],
                )
                raw.execute("COMMIT")

            # Alternate short rounds and keep the median, so drift in fsync latency hits
            # both sides alike.
            ours_rates, theirs_rates = [], []
            for _ in range(ROUNDS):
                theirs_rates.append(_rate(10, theirs, seconds / ROUNDS))
                ours_rates.append(_rate(10, ours, seconds / ROUNDS))
            theirs_rate = statistics.median(theirs_rates)
            ours_rate = statistics.median(ours_rates)
            figures.append(
                Figure(
                    name=f"sqlite engine: {batch}-key transactions (1 KB values)",
                    value=round(ours_rate, 1),
                    unit="commits/s",
                    baseline="raw sqlite3, same rows, WAL + synchronous=FULL",
                    baseline_value=round(theirs_rate, 1),
                    target=None,
                    better="higher",
                )
            )
        engine.close()
        raw.close()
    return figures
