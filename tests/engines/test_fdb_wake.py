"""Futures of a real FoundationDB cluster awaited from asyncio, woken from C through the
loop's pipe (``backends/kv/fdb_wake.py``): values as read, a channel per loop (left to the
next one when a loop closes), cancelled waits that free their slot, and the Python callback
where the C part is missing or the pipe is full."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import signal
import sys
import sysconfig
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from backends.kv import fdb as fdb_engine
from backends.kv import fdb_wake
from backends.kv.fdb import FdbEngine
from persistence import kv
from persistence.futures import drive_async
from persistence.ids import UniverseId, WorldId
from tests.fdb_cluster import FdbCluster, clear_keyspace

KEYS = 200


@pytest.fixture(scope="module")
def cluster(fdb_cluster: FdbCluster) -> FdbEngine:
    """An engine on the session's cluster."""
    return fdb_cluster.engine()


@pytest.fixture
def prefix(cluster: FdbEngine) -> Iterator[bytes]:
    """A fresh key prefix holding ``KEYS // 2`` keys (the even ones), cleared afterwards."""
    key_prefix = b"aosp-wake/" + uuid.uuid4().hex.encode() + b"/"

    def fill(tr: kv.Transaction) -> None:
        for n in range(0, KEYS, 2):
            tr.set(key_prefix + b"%03d" % n, b"v%d" % n)

    kv.run_sync(cluster, fill)
    yield key_prefix
    kv.run_sync(cluster, lambda tr: tr.clear_range(key_prefix, key_prefix + b"\xff"))


class _PythonWakes:
    """Counts the futures woken through the Python callback (``fdb._notify``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        notify = fdb_engine._notify

        def counted(future: Any, callback: Any) -> None:
            self.count += 1
            notify(future, callback)

        monkeypatch.setattr(fdb_engine, "_notify", counted)


async def _read_all(cluster: FdbEngine, prefix: bytes) -> list[bytes | None]:
    """Every key's value, all reads in flight in one transaction, each awaited in turn."""

    async def body(tr: kv.Transaction) -> list[bytes | None]:
        reads = [tr.get(prefix + b"%03d" % n) for n in range(KEYS)]
        return [await read for read in reads]

    return await drive_async(kv.transact(cluster, body))


def _expected() -> list[bytes | None]:
    return [b"v%d" % n if n % 2 == 0 else None for n in range(KEYS)]


def _channel_of(loop: asyncio.AbstractEventLoop) -> fdb_wake._Channel:
    """``loop``'s channel: the one its waits went through, or the one they would have (a
    read whose reply is in when it is awaited waits for nothing)."""
    channel = fdb_wake._channel(loop)
    assert channel is not None
    return channel


def test_the_c_wake_up_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) here: the optional extension is not built")
    assert fdb_wake.available(), "reinstall the package (pip install -e .) to build it"


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_reads_awaited_from_a_loop_are_woken_through_its_pipe(
    cluster: FdbEngine, prefix: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _PythonWakes(monkeypatch)

    async def main() -> tuple[list[bytes | None], int]:
        values = await _read_all(cluster, prefix)
        return values, _channel_of(asyncio.get_running_loop()).registered

    values, registered = asyncio.run(main())
    assert values == _expected()
    assert python.count == 0  # every wait went through the pipe
    assert registered == 0  # every slot freed once its future was seen ready


async def _read_all_on(
    cluster: FdbEngine, prefix: bytes, used: list[fdb_wake._Channel]
) -> list[bytes | None]:
    """:func:`_read_all`, noting the channel of the running loop in ``used``."""
    values = await _read_all(cluster, prefix)
    used.append(_channel_of(asyncio.get_running_loop()))
    return values


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_closed_loop_leaves_its_channel_to_the_next_and_threads_have_their_own(
    cluster: FdbEngine, prefix: bytes
) -> None:
    used: list[fdb_wake._Channel] = []
    for _ in range(4):  # each loop closed before the next starts: the same pipe
        assert asyncio.run(_read_all_on(cluster, prefix, used)) == _expected()
    assert len(set(map(id, used))) == 1

    both = threading.Barrier(2, timeout=60)
    seen: list[list[bytes | None]] = []
    other_used: list[fdb_wake._Channel] = []

    async def together(into: list[fdb_wake._Channel]) -> list[bytes | None]:
        await asyncio.to_thread(both.wait)  # both loops run at once
        values = await _read_all_on(cluster, prefix, into)
        await asyncio.to_thread(both.wait)  # neither loop closes before the other has read
        return values

    other = threading.Thread(target=lambda: seen.append(asyncio.run(together(other_used))))
    other.start()
    mine_used: list[fdb_wake._Channel] = []
    mine = asyncio.run(together(mine_used))
    other.join()
    assert mine == seen[0] == _expected()
    assert mine_used[0] is not other_used[0]


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_loops_never_closed_hold_no_pipe_once_collected_and_past_the_bound_wake_from_python(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """A loop made per call and never closed (``new_event_loop().run_until_complete``):
    its channel goes to the next loop once it is collected; while ``MAX_CHANNELS`` loops
    hold theirs, the next ones get none (they are woken from Python), and read the same."""
    held: list[asyncio.AbstractEventLoop] = []
    channels: list[fdb_wake._Channel | None] = []

    async def reads() -> list[bytes | None]:
        channels.append(fdb_wake._channel(asyncio.get_running_loop()))  # as a first wait
        return await _read_all(cluster, prefix)

    def call() -> list[bytes | None]:
        loop = asyncio.new_event_loop()
        held.append(loop)
        return loop.run_until_complete(reads())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the loops left unclosed
        for _ in range(fdb_wake.MAX_CHANNELS + 2):
            assert call() == _expected()
        assert len(fdb_wake._channels) == fdb_wake.MAX_CHANNELS
        assert channels[-2:] == [None, None]  # every pipe held by a loop still alive
        ours = [channel for channel in channels if channel is not None]
        assert len(set(map(id, ours))) == len(ours)  # a pipe each
        del held[:], channels[:]
        gc.collect()  # the loops, never closed, are collected
        assert all(channel.free for channel in ours)
        assert call() == _expected()
        assert channels[0] is not None  # a collected loop's pipe, taken over
        held[0].close()


def _watch(cluster: FdbEngine, key: bytes) -> Any:
    """The bindings' watch of ``key``: a future ready only once the key changes."""
    tr = cluster._db.create_transaction()
    future = tr.watch(key)
    tr.commit().wait()
    return future


def _waited(cluster: FdbEngine, future: Any) -> Coroutine[Any, Any, None]:
    """The engine's wait for the bindings' ``future`` from the running loop (as the asyncio
    driver waits for a read)."""
    return fdb_engine._FdbFuture(cluster._fdb, future, lambda f: None, "").settle_async(None)


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Let the running loop turn until ``condition`` holds (libfdb_c answers on its own
    thread); fail after 30 s."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_cancelled_wait_frees_its_slot_when_its_future_fires(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """A task cancelled while it waits on a watch: its slot keeps the watch's future (not
    the waiter) until the key changes, then is freed."""
    key = prefix + b"000"
    watch = _watch(cluster, key)

    async def main() -> None:
        channel = fdb_wake._channel(asyncio.get_running_loop())
        assert channel is not None
        before = channel.registered
        task = asyncio.create_task(_waited(cluster, watch))
        await asyncio.sleep(0)  # the task registers its slot
        assert channel.registered == before + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [w for f, w in channel._slots.values() if f is watch] == [None]
        await asyncio.to_thread(kv.run_sync, cluster, lambda t: t.set(key, b"changed"))
        await _until(lambda: channel.registered == before, "the watch to fire")

    asyncio.run(main())


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_loop_left_unclosed_after_a_cancelled_wait_is_collected_and_its_pipe_taken_over(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """``new_event_loop().run_until_complete(wait_for(...))``, its wait timed out and the
    loop never closed: the pipe does not keep the loop alive; the next loop takes the pipe
    over, and frees the slot once the watch fires."""
    key = prefix + b"000"
    watch = _watch(cluster, key)

    def abandoned() -> tuple[fdb_wake._Channel, weakref.ref[asyncio.AbstractEventLoop]]:
        loop = asyncio.new_event_loop()

        async def times_out() -> fdb_wake._Channel:
            with pytest.raises(TimeoutError):  # the watch cannot fire before the key changes
                await asyncio.wait_for(_waited(cluster, watch), 0.05)
            return _channel_of(asyncio.get_running_loop())

        return loop.run_until_complete(times_out()), weakref.ref(loop)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the loop left unclosed
        channel, loop = abandoned()
        gc.collect()
    assert loop() is None and channel.free
    pending = channel.registered

    async def next_loop() -> None:
        assert await _read_all(cluster, prefix) == _expected()
        assert _channel_of(asyncio.get_running_loop()) is channel
        await asyncio.to_thread(kv.run_sync, cluster, lambda t: t.set(key, b"changed"))
        await _until(lambda: channel.registered == pending - 1, "the watch to fire")

    asyncio.run(next_loop())


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_the_waiters_of_a_closed_loop_are_left_alone_by_the_loop_that_takes_its_pipe(
    cluster: FdbEngine, prefix: bytes
) -> None:
    key = prefix + b"watched"  # not one of the keys read
    watch = _watch(cluster, key)
    left: list[asyncio.Future[None]] = []

    async def registers() -> fdb_wake._Channel:
        loop = asyncio.get_running_loop()
        channel = fdb_wake._channel(loop)
        assert channel is not None
        registered = channel.register(loop, watch)
        assert registered is not None
        registered[1].add_done_callback(lambda _: None)  # setting it would call its loop
        left.append(registered[1])
        return channel

    channel = asyncio.run(registers())  # closed with the waiter pending

    async def takes_over() -> None:
        assert await _read_all(cluster, prefix) == _expected()
        assert _channel_of(asyncio.get_running_loop()) is channel
        pending = channel.registered
        await asyncio.to_thread(kv.run_sync, cluster, lambda t: t.set(key, b"changed"))
        await _until(lambda: channel.registered == pending - 1, "the watch to fire")
        assert await _read_all(cluster, prefix) == _expected()  # the pipe still read

    asyncio.run(takes_over())
    assert not left[0].done()


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_past_the_pipe_s_capacity_waits_go_through_the_python_callback(
    cluster: FdbEngine, prefix: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five waits on watches (ready only once their keys change) with room for three in the
    pipe: three through it, two through the Python callback; all five woken."""
    python = _PythonWakes(monkeypatch)
    keys = [prefix + b"w%d" % n for n in range(5)]
    watches = [_watch(cluster, key) for key in keys]

    async def main() -> tuple[int, int]:
        channel = _channel_of(asyncio.get_running_loop())
        before = channel.registered
        monkeypatch.setattr(channel, "capacity", before + 3)
        waits = [asyncio.create_task(_waited(cluster, watch)) for watch in watches]
        await asyncio.sleep(0)  # each task registers its wait
        registered = channel.registered - before

        def change(tr: kv.Transaction) -> None:
            for key in keys:
                tr.set(key, b"changed")

        await asyncio.to_thread(kv.run_sync, cluster, change)
        await asyncio.wait_for(asyncio.gather(*waits), 30)
        return registered, channel.registered - before

    assert asyncio.run(main()) == (3, 0)
    assert python.count == 2


def test_without_the_c_part_the_async_plane_is_woken_from_python(
    cluster: FdbEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backends.objects.memory import MemoryObjectStore
    from persistence.plane import Plane

    monkeypatch.setattr(fdb_wake, "_WAKE", None)
    python = _PythonWakes(monkeypatch)
    clear_keyspace(cluster)  # a store: whatever earlier tests of the session left is gone
    door = Plane(cluster, MemoryObjectStore()).asyncio()
    universe, world = UniverseId.new(), WorldId.new()

    async def main() -> list[tuple[int, bytes]]:
        await door.create_world(universe, world)
        firsts = await asyncio.gather(
            door.append_batch(universe, world, 0, [b"a"]),
            door.append_batch(universe, world, 0, [b"b"]),
            return_exceptions=True,
        )
        assert sorted(type(f).__name__ for f in firsts) == ["HeadAdvanced", "int"]
        return await door.read_range(universe, world, 1, 10)

    (entry,) = asyncio.run(main())
    assert entry[0] == 1 and entry[1] in (b"a", b"b")
    assert python.count > 0


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_an_interrupt_once_registered_keeps_the_slot_until_its_future_fires(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """A signal handler's interrupt raised just after libfdb_c took the callback: the slot
    stays registered (libfdb_c will write it), so the next wait gets another slot and is
    woken by its own future only."""

    class Interrupted:
        """The bindings' future, its registration interrupted once it returned."""

        def __init__(self, real: Any) -> None:
            self.fpointer = real.fpointer

            class Capi:
                def fdb_future_set_callback(self, *args: Any) -> None:
                    real.capi.fdb_future_set_callback(*args)
                    raise KeyboardInterrupt

            self.capi = Capi()

    async def main() -> None:
        first, second = _watch(cluster, prefix + b"000"), _watch(cluster, prefix + b"002")
        channel = fdb_wake._channel(asyncio.get_running_loop())
        assert channel is not None
        before = channel.registered
        with pytest.raises(KeyboardInterrupt):
            await _waited(cluster, Interrupted(first))
        assert channel.registered == before + 1
        waits = asyncio.create_task(_waited(cluster, second))
        await asyncio.sleep(0)  # the task registers its slot
        assert channel.registered == before + 2
        await asyncio.to_thread(kv.run_sync, cluster, lambda t: t.set(prefix + b"000", b"x"))
        await _until(lambda: channel.registered == before + 1, "the first watch to fire")
        assert not waits.done()
        await asyncio.to_thread(kv.run_sync, cluster, lambda t: t.set(prefix + b"002", b"y"))
        await asyncio.wait_for(waits, 30)
        assert second.is_ready() and channel.registered == before

    asyncio.run(main())


def _main_thread_reads_its_pipe() -> bool:
    """Whether the main thread is in its blocking wait's read of its pipe (its slot
    registered with libfdb_c)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    return frame is not None and frame.f_code is fdb_wake._Pipe._take.__code__


class _Stuck(Exception):
    """Raised in the main thread by :func:`_unstuck` when a wait there never ends."""


@contextlib.contextmanager
def _unstuck(seconds: float, what: str) -> Iterator[None]:
    """Fail, rather than hang, a main thread still inside the block after ``seconds``: a
    helper thread then signals it (SIGUSR2) until a handler raises :class:`_Stuck`
    there (a wait that never ends could not fail otherwise)."""
    left = threading.Event()

    def rescue() -> None:
        if left.wait(seconds):
            return
        while not left.wait(0.1):  # again: a wait may be between two reads
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR2)

    def stuck(signum: int, frame: Any) -> None:
        raise _Stuck(f"still waiting after {seconds} s: {what}")

    previous = signal.signal(signal.SIGUSR2, stuck)
    rescuer = threading.Thread(target=rescue, daemon=True)
    rescuer.start()
    try:
        yield
    finally:
        left.set()
        rescuer.join()
        signal.signal(signal.SIGUSR2, previous)


def _ready(cluster: FdbEngine) -> Any:
    """A bindings' future that is ready, no callback ever set on it (a read version)."""
    future = cluster._db.create_transaction().get_read_version()
    deadline = time.monotonic() + 30
    while not future.is_ready():
        assert time.monotonic() < deadline, "a read version never came"
        time.sleep(0.001)
    return future


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_ctrl_c_ends_a_main_thread_wait_and_the_next_wait_ends_on_its_own_future(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """Ctrl-C while the main thread waits on a watch (ready only once its key changes)
    raises ``KeyboardInterrupt`` there. The interrupted wait's slot keeps its future until
    the watch fires; the next wait reads that write and goes on waiting for its own."""
    assert threading.current_thread() is threading.main_thread()
    first, second = _watch(cluster, prefix + b"000"), _watch(cluster, prefix + b"002")
    interrupted = threading.Event()
    handled: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if not handled:  # the first only: the signals sent after it are dropped
            handled.append(signum)
            raise KeyboardInterrupt

    def press_ctrl_c() -> None:
        while not interrupted.wait(0.05):
            if _main_thread_reads_its_pipe():
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, handler)
    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    try:
        presser.start()
        with _unstuck(30, "a wait Ctrl-C was pressed in"), pytest.raises(KeyboardInterrupt):
            fdb_engine._block(cluster._fdb, first, "watch")
    finally:
        interrupted.set()
        presser.join()
        signal.signal(signal.SIGINT, previous)
    main_wait = fdb_wake._main_wait
    assert main_wait is not None and handled == [signal.SIGINT]
    assert not first.is_ready() and [f for f in main_wait._slots.values() if f is first] == [first]

    def change_keys() -> None:
        try:
            kv.run_sync(cluster, lambda t: t.set(prefix + b"000", b"x"))  # the first fires
            deadline = time.monotonic() + 30
            while any(f is first for f in main_wait._slots.values()):  # until read
                assert time.monotonic() < deadline, "the first watch's write was never read"
                time.sleep(0.01)
        finally:  # the main thread's wait ends, whatever happened here
            kv.run_sync(cluster, lambda t: t.set(prefix + b"002", b"y"))

    changer = threading.Thread(target=change_keys)
    changer.start()
    with _unstuck(60, "the wait on the second watch"):
        fdb_engine._block(cluster._fdb, second, "watch")
    ready_on_return = second.is_ready()
    changer.join()
    assert ready_on_return and first.is_ready()
    assert not any(f is first or f is second for f in main_wait._slots.values())


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_signal_handler_that_waits_itself_does_not_strand_the_wait_it_interrupted(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """A handler that does not raise but runs transactions on the main thread, during its
    wait on a watch: the handler changes the watched key and waits on the engine again,
    so its own waits read the interrupted wait's slot. That wait ends when the handler
    returns (it once read on for a write already read: for ever)."""
    key = prefix + b"000"
    watch = _watch(cluster, key)
    handled: list[int] = []
    done = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if handled:
            return
        handled.append(signum)
        kv.run_sync(cluster, lambda t: t.set(key, b"changed"))  # the watch fires
        deadline = time.monotonic() + 30
        while not watch.is_ready():
            assert time.monotonic() < deadline, "the watch never fired"
            time.sleep(0.01)
        kv.run_sync(cluster, lambda t: t.get(prefix + b"002"))  # one more wait of its own

    def signal_once_waiting() -> None:
        while not done.wait(0.01):
            if _main_thread_reads_its_pipe():
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
                return

    previous = signal.signal(signal.SIGUSR1, handler)
    sender = threading.Thread(target=signal_once_waiting, daemon=True)
    try:
        sender.start()
        with _unstuck(60, "the wait the handler interrupted"):
            fdb_engine._block(cluster._fdb, watch, "watch")
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
    assert handled == [signal.SIGUSR1] and watch.is_ready()


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
@pytest.mark.parametrize("where", ["after the read", "while letting go"])
def test_slots_read_by_an_interrupted_wait_are_let_go_of_by_the_next(
    cluster: FdbEngine, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An interrupt raised just after the read of the pipe returned, or while the slots it
    read are let go of, loses none: they are kept where the read put them, and the next
    wait lets go of them -- their futures are not kept for ever."""
    main_wait = fdb_wake._MainWait()
    interrupts = [KeyboardInterrupt()]
    if where == "after the read":
        read = fdb_wake._READ
        assert read is not None

        def read_then_interrupt(*args: Any) -> int:
            got: int = read(*args)
            if got > 0 and interrupts:
                raise interrupts.pop()
            return got

        monkeypatch.setattr(fdb_wake, "_READ", read_then_interrupt)
    else:

        def interrupted(self: fdb_wake._Pipe, held: Any) -> None:
            if interrupts:
                raise interrupts.pop()

        monkeypatch.setattr(fdb_wake._MainWait, "_woken", interrupted)
    first, second = _ready(cluster), _ready(cluster)
    with pytest.raises(KeyboardInterrupt):
        main_wait.wait(first)  # a ready future's callback is called at once
    assert list(main_wait._slots.values()) == [first] and main_wait._count.value == 1
    assert main_wait.wait(second)
    assert main_wait._slots == {} and main_wait._count.value == 0


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_main_wait_whose_slots_are_all_held_first_lets_go_of_those_written(
    cluster: FdbEngine,
) -> None:
    """Every slot held by waits that were interrupted: once their futures are ready, the
    next wait lets go of them and waits through the pipe (it once gave up for good)."""
    main_wait = fdb_wake._MainWait()
    main_wait.capacity = 1  # as if the pipe held one slot
    held = _ready(cluster)
    main_wait._register(held, held)  # an interrupted wait's: written, never read
    assert main_wait.registered == 1
    assert main_wait.wait(_ready(cluster))
    assert main_wait.registered == 0


@pytest.mark.skipif(not fdb_wake.available(), reason="the C wake-up was not built here")
def test_a_forked_child_closes_the_main_thread_s_pipe(cluster: FdbEngine) -> None:
    """The parent's pipe and slots are not the child's: a forked child closes the pipe of
    the main thread's waits (no descriptor of it left open there)."""
    fdb_engine._block(cluster._fdb, cluster._db.create_transaction().get_read_version(), "")
    main_wait = fdb_wake._main_wait
    assert main_wait is not None
    descriptors = (main_wait._read, main_wait._write)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        child = os.fork()
    if child == 0:  # the child: only system calls, then exit
        still_open = 0
        for fd in descriptors:
            try:
                os.fstat(fd)
                still_open += 1
            except OSError:
                pass
        os._exit(10 + still_open if fdb_wake._main_wait is None else 2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 10
