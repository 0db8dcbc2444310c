"""SQLite range reads fetch a page of rows per statement, the first sized by the read's
limit: what a read returns, and the conflict it records, are the memory engine's, whatever
the transaction's own writes hide or add; and a small limit fetches only its rows first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.kv.sqlite_transaction import _PAGE
from persistence import fdb_errors, kv
from persistence.errors import EngineError

KEYS = [b"k%05d" % i for i in range(3 * _PAGE)]


E = TypeVar("E", bound=kv.Engine)


def _filled(engine: E) -> E:
    kv.run_sync(engine, lambda tr: [tr.set(key, key[1:]) for key in KEYS])
    return engine


Writes = Callable[[kv.Transaction], object]

WRITES: dict[str, Writes] = {
    "none": lambda tr: None,
    "first page cleared": lambda tr: tr.clear_range(KEYS[0], KEYS[_PAGE + 3]),
    "first keys cleared one by one": lambda tr: [tr.clear(k) for k in KEYS[:5]],
    "last pages cleared": lambda tr: tr.clear_range(KEYS[-2 * _PAGE - 3], b"l"),
    "keys added in between": lambda tr: [tr.set(k + b"+", b"new") for k in KEYS[:4]],
    "first key replaced": lambda tr: tr.set(KEYS[0], b"changed"),
}


@pytest.mark.parametrize("writes", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize("limit", [0, 1, 2, 7, _PAGE - 1, _PAGE, _PAGE + 1, 2 * _PAGE + 5])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_reads_under_the_transactions_writes_match_the_memory_engine(
    tmp_path: Path, writes: Writes, limit: int, reverse: bool
) -> None:
    seen = []
    for engine in (_filled(MemoryEngine()), _filled(SqliteEngine(tmp_path / "kv.db"))):
        tr = engine.create_transaction()
        writes(tr)
        rows = tr.get_range(b"k", b"l", limit=limit, reverse=reverse).wait()
        again = tr.get_range(b"k", b"l", limit=limit, reverse=reverse, snapshot=True).wait()
        assert rows == again
        seen.append(rows)
        engine.close()
    assert seen[0] == seen[1]


@pytest.mark.parametrize("limit", [1, 2, _PAGE + 1])
def test_a_limited_read_conflicts_with_a_write_to_what_it_returned(
    tmp_path: Path, limit: int
) -> None:
    engine = _filled(SqliteEngine(tmp_path / "kv.db"))
    reader = engine.create_transaction()
    rows = reader.get_range(b"k", b"l", limit=limit).wait()
    kv.run_sync(engine, lambda tr: tr.set(rows[-1][0], b"moved"))
    reader.set(b"z", b"after")
    with pytest.raises(EngineError) as err:
        reader.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED
    engine.close()


def test_a_limited_read_ignores_a_write_past_what_it_returned(tmp_path: Path) -> None:
    engine = _filled(SqliteEngine(tmp_path / "kv.db"))
    reader = engine.create_transaction()
    reader.get_range(b"k", b"l", limit=2).wait()
    kv.run_sync(engine, lambda tr: tr.set(KEYS[2], b"moved"))
    reader.set(b"z", b"after")
    reader.commit().wait()
    engine.close()


def test_a_small_limit_fetches_only_its_rows_first(tmp_path: Path) -> None:
    engine = _filled(SqliteEngine(tmp_path / "kv.db"))
    tr = engine.create_transaction()
    statements: list[str] = []
    tr._connection().set_trace_callback(statements.append)
    assert tr.get_range(b"k", b"l", limit=2).wait() == [(k, k[1:]) for k in KEYS[:2]]
    assert len(tr.get_range(b"k", b"l").wait()) == len(KEYS)
    limits = [s.rsplit("LIMIT", 1)[1].strip() for s in statements if "FROM kv WHERE key >=" in s]
    assert limits == ["2", str(_PAGE), str(_PAGE), str(_PAGE), str(_PAGE)]
    tr._connection().set_trace_callback(None)
    engine.close()
