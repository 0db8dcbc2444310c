"""The futures and the two drivers every protocol runs under (``persistence/futures.py``):
the blocking driver and the asyncio driver give the same values, errors and clean-ups."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from persistence import futures, kv
from persistence.errors import EngineError
from persistence.futures import (
    Blocking,
    Failed,
    Future,
    Gathered,
    Latch,
    Mapped,
    Ready,
    Sleep,
    concurrently,
    drive,
    drive_async,
)

T = TypeVar("T")


class Later(Future[T]):
    """A future settled by another thread (as a FoundationDB future is by the client's
    network thread): ``notify`` callbacks run on that thread."""

    def __init__(self) -> None:
        self._value: T | None = None
        self._set = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def settle(self, value: T) -> None:
        with self._lock:
            self._value = value
            self._set.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def poll(self) -> bool:
        return self._set.is_set()

    def result(self) -> T:
        assert self._value is not None
        return self._value

    def block(self) -> None:
        self._set.wait()

    def notify(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if not self._set.is_set():
                self._callbacks.append(callback)
                return
        callback()


def both(make: Callable[[], Awaitable[T]]) -> tuple[T, T]:
    """What the blocking and the asyncio driver give for the same work."""
    blocking = drive(make())
    asynchronous = asyncio.run(drive_async(make()))
    return blocking, asynchronous


def settle_soon(future: Later[int], value: int) -> threading.Thread:
    thread = threading.Thread(target=future.settle, args=(value,))
    thread.start()
    return thread


def test_both_drivers_give_a_protocols_value() -> None:
    async def protocol() -> int:
        a = Ready(1)
        b = Blocking(lambda: 2)
        c = Sleep(0.001, 3)
        both_ = Gathered([Ready(4), Mapped(Ready(2), lambda n: n + 3)])
        return await a + await b + await c + sum(await both_)

    assert both(protocol) == (15, 15)


def test_both_drivers_raise_a_futures_error_where_it_is_awaited() -> None:
    cleaned: list[str] = []

    async def protocol() -> int:
        try:
            return await Failed(EngineError(1020, "conflict"))
        finally:
            cleaned.append("finally")

    for run in (drive, lambda c: asyncio.run(drive_async(c))):
        with pytest.raises(EngineError) as error:
            run(protocol())
        assert error.value.code == 1020
    assert cleaned == ["finally", "finally"]


def test_a_future_settled_by_another_thread_wakes_either_driver() -> None:
    def make() -> Coroutine[Any, Any, int]:
        future: Later[int] = Later()

        async def protocol() -> int:
            thread = settle_soon(future, 7)
            value = await future
            thread.join()
            return value + 1

        return protocol()

    assert both(make) == (8, 8)


def test_futures_settled_together_by_another_thread_wake_the_loop_once() -> None:
    """Replies that arrive together (the client's network thread settling many futures
    while the loop is busy) wake the loop with one write to its self-pipe, not one each;
    every protocol still gets its own value. A protocol cancelled meanwhile stays
    cancelled, and its future's settling harms no one."""
    futures: list[Later[int]] = [Later() for _ in range(20)]

    async def protocol(future: Later[int]) -> int:
        return await future + 1

    async def main() -> tuple[list[int], int, bool]:
        loop = asyncio.get_running_loop()
        woken_from_other_threads = 0
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counted(callback: Callable[..., object], *args: Any) -> Any:
            nonlocal woken_from_other_threads
            woken_from_other_threads += 1
            return call_soon_threadsafe(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        tasks = [asyncio.ensure_future(drive_async(protocol(f))) for f in futures]
        cancelled = asyncio.ensure_future(drive_async(protocol(Later())))
        while not all(f._callbacks for f in futures):  # every protocol waits on its future
            await asyncio.sleep(0)
        cancelled.cancel()

        def settle_all() -> None:
            for value, future in enumerate(futures):
                future.settle(value)

        settled = threading.Thread(target=settle_all)
        settled.start()
        settled.join()  # the loop is held here: every reply arrives before it runs again
        values = await asyncio.gather(*tasks)
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return values, woken_from_other_threads, cancelled.cancelled()

    values, woken, cancelled = asyncio.run(main())
    assert values == list(range(1, 21))
    assert woken == 1
    assert cancelled


def test_an_interrupt_while_waking_the_loop_leaves_later_wake_ups_working() -> None:
    """A signal handler's exception raised while a wake-up is being scheduled (Ctrl-C on
    the loop's thread) does not leave the loop believing one is on its way: the next
    wake-up, from another thread, still wakes it, and the waiter queued before the
    interrupt is set with it."""

    class Interrupt(BaseException):
        pass

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        wakeups = futures._wakeups()
        call_soon_threadsafe = loop.call_soon_threadsafe
        interrupted: list[bool] = []

        def interrupted_once(callback: Callable[..., object], *args: Any) -> Any:
            if not interrupted:
                interrupted.append(True)
                raise Interrupt
            return call_soon_threadsafe(callback, *args)

        loop.call_soon_threadsafe = interrupted_once  # type: ignore[method-assign,assignment]
        first, second = wakeups.waiter(), wakeups.waiter()
        with pytest.raises(Interrupt):
            wakeups.wake(first)
        waking = threading.Thread(target=wakeups.wake, args=(second,))
        waking.start()
        waking.join()
        await asyncio.wait_for(second, 10)  # a lost wake-up fails here instead of hanging
        return first.done(), second.done()

    assert asyncio.run(main()) == (True, True)


def test_a_future_settled_after_its_loop_closed_raises_nothing() -> None:
    """A protocol given up with its loop (the loop closed while it waited): the thread
    that settles its future later is not the one to pay for it."""
    late: Later[int] = Later()

    async def main() -> None:
        task = asyncio.ensure_future(drive_async(late))
        while not late._callbacks:
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(main())
    errors: list[BaseException | None] = []
    settling = threading.Thread(target=late.settle, args=(1,))
    threading.excepthook, hook = (lambda args: errors.append(args.exc_value)), threading.excepthook
    try:
        settling.start()
        settling.join()
    finally:
        threading.excepthook = hook
    assert errors == []


def test_the_asyncio_driver_runs_blocking_work_in_the_executor_and_keeps_the_loop_free() -> None:
    loop_thread: list[int] = []
    work_thread: list[int] = []
    ticks: list[int] = []
    release = threading.Event()

    def work() -> int:
        work_thread.append(threading.get_ident())
        assert release.wait(10)  # the loop must run the ticker meanwhile
        return 5

    async def ticker() -> None:
        for n in range(3):
            ticks.append(n)
            await asyncio.sleep(0)
        release.set()

    async def main() -> int:
        loop_thread.append(threading.get_ident())
        _, value = await asyncio.gather(ticker(), drive_async(Blocking(work)))
        return value

    assert asyncio.run(main()) == 5
    assert ticks == [0, 1, 2] and work_thread[0] != loop_thread[0]


def test_the_asyncio_driver_sleeps_without_blocking_the_loop() -> None:
    order: list[str] = []

    async def pausing() -> None:
        await Sleep(0.05, None)
        order.append("slept")

    async def other() -> None:
        order.append("other ran")

    async def main() -> None:
        await asyncio.gather(drive_async(pausing()), other())

    asyncio.run(main())
    assert order == ["other ran", "slept"]


def test_a_cancelled_task_is_cancelled_inside_the_protocol() -> None:
    seen: list[str] = []
    never: Later[int] = Later()

    async def protocol() -> int:
        try:
            return await never
        except asyncio.CancelledError:
            seen.append("cancelled at its await")
            raise

    async def main() -> None:
        task = asyncio.ensure_future(drive_async(protocol()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled at its await"]


def test_an_interrupt_while_blocking_reaches_the_protocol() -> None:
    seen: list[str] = []

    class Interrupted(Future[int]):
        def poll(self) -> bool:
            return False

        def result(self) -> int:
            raise AssertionError("never ready")

        def block(self) -> None:
            raise KeyboardInterrupt

    async def protocol() -> int:
        try:
            return await Interrupted()
        finally:
            seen.append("finally")

    with pytest.raises(KeyboardInterrupt):
        drive(protocol())
    assert seen == ["finally"]


def test_awaiting_something_else_than_a_future_is_a_type_error_in_the_protocol() -> None:
    async def protocol() -> None:
        await asyncio.sleep(0)  # not an engine future

    with pytest.raises(TypeError, match="engine futures only"):
        drive(protocol())


def test_a_future_used_as_its_value_fails_at_once() -> None:
    future = Ready(b"value")
    with pytest.raises(TypeError, match="not its value"):
        bool(future)
    with pytest.raises(TypeError, match="not its value"):
        assert future == b"value"
    assert future.wait() == b"value" and hash(future) == hash(future)


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> kv.Engine:
    if request.param == "memory":
        return MemoryEngine()
    return SqliteEngine(tmp_path / "kv.db")


def test_the_retry_loop_retries_a_conflict_under_the_asyncio_driver(engine: kv.Engine) -> None:
    """A transaction that conflicts once is retried (the backoff awaited, not slept on the
    loop's thread for a blocking engine's attempts: those run in the executor) and returns
    its committed attempt's value."""
    kv.run_sync(engine, lambda tr: tr.set(b"n", b"0"))
    attempts = 0

    async def increment(tr: kv.Transaction) -> int:
        nonlocal attempts
        attempts += 1
        n = int(await tr.get(b"n") or b"0")
        if attempts == 1:  # another writer commits between the read and the commit
            kv.run_sync(engine, lambda other: other.set(b"n", b"10"))
        tr.set(b"n", b"%d" % (n + 1))
        return n + 1

    assert asyncio.run(drive_async(kv.transact(engine, increment))) == 11
    assert attempts == 2
    assert kv.run(engine, lambda tr: tr.get(b"n")) == b"11"


# ---------------------------------------------------------------- concurrently


def test_coroutines_run_concurrently_wait_together_under_either_driver() -> None:
    """Two protocols, each waiting on a future only the other's progress settles: run one
    after the other they would wait for ever; run concurrently, each goes on as far as it
    can, both end, and their values come back in order."""

    def make() -> Coroutine[Any, Any, list[Any]]:
        first: Later[int] = Bounded()
        second: Later[int] = Bounded()
        order: list[str] = []

        async def one() -> int:
            order.append("one waits")
            value = await first
            order.append("one settles two")
            settle_soon(second, value + 1).join()
            return value

        async def two() -> str:
            order.append("two settles one")
            settle_soon(first, 1).join()
            value = await second
            order.append("two ends")
            return f"two saw {value}"

        async def protocol() -> list[Any]:
            values = await concurrently(one(), two())
            assert order == ["one waits", "two settles one", "one settles two", "two ends"]
            return values

        return protocol()

    assert both_bounded(make) == ([1, "two saw 2"], [1, "two saw 2"])


def both_bounded(make: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, T]:
    """:func:`both`, the asyncio run failing after 10 s (with :class:`Bounded` futures, a
    protocol left waiting fails the test instead of hanging it)."""
    return drive(make()), asyncio.run(asyncio.wait_for(drive_async(make()), 10))


class Bounded(Later[T]):
    """A :class:`Later` whose blocking wait fails after 10 s instead of waiting for ever:
    what a driver that does not run protocols concurrently would meet."""

    def block(self) -> None:
        assert self._set.wait(10), "waited 10 s for a future nothing else could settle"


def test_concurrent_blocking_work_runs_once_each() -> None:
    """Work that can only block is waited on alone (its work run once, not once per wake),
    beside a future another thread settles."""
    runs: list[str] = []

    def make() -> Coroutine[Any, Any, list[Any]]:
        later: Later[int] = Bounded()

        def work() -> int:
            runs.append("work")
            return 3

        async def blocking() -> int:
            value = await Blocking(work)
            settle_soon(later, 4).join()
            return value

        async def waiting() -> int:
            return await later + await Sleep(0.001, 1)

        return concurrently(waiting(), blocking())

    assert both_bounded(make) == ([5, 3], [5, 3])
    assert runs == ["work", "work"]  # once per driver


def test_an_error_waits_for_the_others_then_the_first_is_raised() -> None:
    """One protocol fails at once, another ends later: the failure is raised only once the
    other has ended (none left in flight), the first by position when two fail."""
    ended: list[str] = []

    def make() -> Coroutine[Any, Any, list[Any]]:
        later: Later[int] = Bounded()

        async def failing(code: int) -> int:
            return await Failed(EngineError(code, "failed"))

        async def slow() -> int:
            settle_soon(later, 1)
            value = await later
            ended.append("slow")
            return value

        return concurrently(failing(1020), slow(), failing(1007))

    for run in (drive, lambda c: asyncio.run(asyncio.wait_for(drive_async(c), 10))):
        with pytest.raises(EngineError) as error:
            run(make())
        assert error.value.code == 1020
    assert ended == ["slow", "slow"]


def test_an_interrupt_while_waiting_reaches_every_running_protocol() -> None:
    """A cancellation of the task that waits on two protocols is thrown into both, each
    at its own await, and the cancellation is what the task raises."""
    seen: list[str] = []

    async def waiting(name: str) -> int:
        try:
            return await Later[int]()
        except asyncio.CancelledError:
            seen.append(name)
            raise

    async def main() -> None:
        task = asyncio.ensure_future(drive_async(concurrently(waiting("a"), waiting("b"))))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["a", "b"]


def test_a_foreign_awaitable_in_one_concurrent_protocol_is_its_type_error() -> None:
    async def foreign() -> None:
        await asyncio.sleep(0)  # not an engine future

    async def fine() -> int:
        return await Ready(1)

    with pytest.raises(TypeError, match="engine futures only"):
        drive(concurrently(fine(), foreign()))


def test_a_latch_is_settled_once_by_the_callers_own_code() -> None:
    """A protocol waits on a latch another protocol run beside it opens; the first opening
    stands (a later one, from a ``finally``, changes nothing)."""

    def make() -> Coroutine[Any, Any, list[Any]]:
        latch = Latch()
        later: Later[int] = Bounded()

        async def opener() -> int:
            try:
                settle_soon(later, 2)
                value = await later
                latch.open(True)
                return value
            finally:
                latch.open(False)

        async def waiter() -> bool:
            return await latch

        return concurrently(waiter(), opener())

    assert both_bounded(make) == ([True, 2], [True, 2])


@pytest.mark.parametrize("door", ["sync", "asyncio"])
def test_an_interrupt_inside_one_protocol_is_raised_and_the_others_never_start(door: str) -> None:
    """An interrupt (a ``BaseException`` that is not an ``Exception``) raised inside one
    protocol, not while it waits, is what the caller raises, before an earlier protocol's
    ordinary error; one not started yet never starts. (A test's own interrupt class:
    asyncio lets a KeyboardInterrupt raised in a task out of its event loop itself.)"""
    started: list[str] = []

    async def fails() -> int:
        return await Failed(ValueError("an ordinary error"))

    async def interrupted() -> int:
        await Ready(None)
        raise Interrupt

    async def later() -> int:
        started.append("later")
        return await Ready(1)

    def run(c: Coroutine[Any, Any, list[Any]]) -> list[Any]:
        if door == "sync":
            return drive(c)
        return asyncio.run(asyncio.wait_for(drive_async(c), 10))

    with pytest.raises(Interrupt):
        run(concurrently(fails(), interrupted(), later()))
    assert started == []


class Interrupt(BaseException):
    """An interrupt of the tests' own (see above)."""
