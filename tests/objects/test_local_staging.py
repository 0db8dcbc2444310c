"""The local store's staging files: what a killed writer leaves behind is swept, and nothing a
live writer stages ever is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from backends.objects.local import STAGING_SWEEP_SECONDS, LocalObjectStore
from persistence.errors import Backend, NotFound, OddObject, Validation

ROOT = Path(__file__).resolve().parents[2]


def staging_files(root: Path) -> set[Path]:
    return {p for p in root.iterdir() if p.name.startswith(".tmp-")}


def age(path: Path, seconds: float = 2 * STAGING_SWEEP_SECONDS) -> None:
    """Date the file's last change ``seconds`` back."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def next_sweep_due(store: LocalObjectStore) -> None:
    """Let the store's next staging write sweep, as it does once the interval has passed."""
    store._next_sweep = time.monotonic()


def kill_a_writer_mid_stage(root: Path) -> Path:
    """Run a process that stages a body in the store at ``root`` and is SIGKILLed before
    publishing it; return the staging file it left."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from backends.objects.local import LocalObjectStore
        staged = LocalObjectStore({str(root)!r}).stage(b"x" * 100_000)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    (left,) = staging_files(root)
    return left


def test_a_killed_writers_staging_file_is_swept_once_old(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = LocalObjectStore(root)
    left = kill_a_writer_mid_stage(root)
    assert left.stat().st_size == 100_000 and list(store.list()) == []
    with store.stage(b"y") as staged:  # the first staging write sweeps: too young yet
        assert staged.publish("k/1")
    assert staging_files(root) == {left}
    age(left)
    with store.stage(b"z") as staged:  # within the interval: no sweep
        assert staging_files(root) == {left, staged.path}  # type: ignore[attr-defined]
    next_sweep_due(store)
    with store.stage(b"z") as staged:
        assert staging_files(root) == {staged.path}  # type: ignore[attr-defined]
        assert staged.publish("k/2")
    assert staging_files(root) == set()
    assert [(o.key, store.get(o.key)) for o in store.list()] == [("k/1", b"y"), ("k/2", b"z")]


def test_a_live_writers_staging_file_is_never_swept(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    writer = LocalObjectStore(root)
    with writer.stage(b"in use") as staged:
        age(staged.path)  # type: ignore[attr-defined]
        other = LocalObjectStore(root)  # another store (another open file): its sweep runs
        with other.stage(b"other") as mine:
            assert mine.publish("k/other")
        assert staging_files(root) == {staged.path}  # type: ignore[attr-defined]
        assert staged.publish("k/in-use")
    assert staging_files(root) == set()
    assert writer.get("k/in-use") == b"in use"


def test_failed_puts_and_stages_leave_no_staging_file(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = LocalObjectStore(root)

    class Failing:
        def __init__(self) -> None:
            self.reads = 0

        def read(self, n: int = -1) -> bytes:
            self.reads += 1
            if self.reads > 2:
                raise OSError("the source broke")
            return b"x" * 1000

    with pytest.raises(Backend, match="the source broke"):
        store.stage(Failing())  # type: ignore[arg-type]
    with pytest.raises(Validation, match="sha256"):
        store.put("k", b"body", sha256=bytes(32))
    staged = store.stage(b"discarded")
    staged.discard()
    staged.discard()  # idempotent
    assert staging_files(root) == set() and list(store.list()) == []


def test_a_fifo_where_an_object_would_be_is_refused_at_once(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: fsck and ``segments verify`` hung on
    one planted in place of an object. Only a regular file is an object; a directory is
    none (``NotFound``)."""
    store = LocalObjectStore(tmp_path / "objects")
    store.put("a/fifo", b"body")
    path = tmp_path / "objects" / "a" / "fifo"
    path.unlink()
    os.mkfifo(path)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            store.open("a/fifo").read()
        except BaseException as exc:  # carried to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # unblock it: a writer end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a FIFO object blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], OddObject), outcome
    assert "is not a regular file" in str(outcome[0])
    (tmp_path / "objects" / "b").mkdir()
    with pytest.raises(NotFound):
        store.open("b")
    store.close()
