"""Futures, and the two drivers that run the plane's protocols: one blocking, one asyncio.

The protocols are written once, as coroutines (``async def``) that await what an engine
returns for a read or a commit: a :class:`Future`, shaped like the FoundationDB bindings'
futures (a read is issued when it is asked for and waited on later, so a protocol that
asks for five keys before awaiting any pays one round trip, not five). A coroutine does no
I/O of its own; a *driver* runs it:

* :func:`drive` runs it on the calling thread and, at each future that is not ready yet,
  blocks until it is (the blocking :class:`~persistence.plane.Plane`);
* :func:`drive_async` runs it from an asyncio event loop and, at each such future, awaits
  it there: a FoundationDB future wakes the loop from the client's network thread, work
  that can only block (:class:`Blocking`: a SQLite transaction, an object-store call) runs
  in an executor, a pause (:class:`Sleep`) is an asyncio sleep. One thread keeps many
  transactions in flight.

A future that is ready when it is awaited is not handed to the driver at all: on engines
whose reads complete at once (memory, SQLite) a protocol runs straight through, with no
more than a generator's cost per read (h11's "one protocol, any I/O", psycopg's one
code base for both calling styles, done at run time instead of by code generation).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Final, Generic, TypeVar, cast

T = TypeVar("T")
U = TypeVar("U")


class Future(ABC, Generic[T]):
    """A value that an engine delivers now or later.

    ``await`` it in a protocol; :meth:`wait` blocks for it outside one. A driver that meets
    it unready calls :meth:`block` (blocking) or :meth:`settle_async` (asyncio), then polls
    again: a future may need several waits (a range read of several batches)."""

    __slots__ = ()

    @abstractmethod
    def poll(self) -> bool:
        """Make what progress can be made without waiting; whether :meth:`result` is known."""

    @abstractmethod
    def result(self) -> T:
        """The value, or the error raised; only once :meth:`poll` is true."""

    @abstractmethod
    def block(self) -> None:
        """Wait on this thread until :meth:`poll` can make progress."""

    def notify(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (on any thread) once :meth:`poll` can make progress; at once if
        it can already. Futures that cannot notify (work that blocks, pauses) override
        :meth:`settle_async` instead."""
        raise NotImplementedError(f"{type(self).__name__} cannot notify")

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        """Return once :meth:`poll` can make progress, without blocking the running event
        loop (``executor`` runs what can only block)."""
        wakeups = _wakeups()
        waiter = wakeups.waiter()
        self.notify(functools.partial(wakeups.wake, waiter))
        await waiter

    def wait(self) -> T:
        """Block until the value is known; return it (or raise its error)."""
        while not self.poll():
            self.block()
        return self.result()

    def __await__(self) -> Generator[Future[Any], None, T]:
        while not self.poll():
            yield self
        return self.result()

    # A future used as its value is a mistake the type checker does not always see
    # (``tr.get(key) is None``, ``if tr.get(key):``): it fails at once instead.

    def __bool__(self) -> bool:
        raise TypeError(_MISUSED.format(type(self).__name__))

    def __eq__(self, other: object) -> bool:
        raise TypeError(_MISUSED.format(type(self).__name__))

    __hash__ = object.__hash__


_MISUSED: Final = "a {} is a future, not its value: await it, or .wait() for it"


class _Wakeups:
    """How other threads wake one event loop for the futures it awaits, coalesced: a
    waiter woken is queued, and the loop is woken (``call_soon_threadsafe``: a write to its
    self-pipe) only if no wake-up is on its way already; the loop then sets every queued
    waiter at once. With many transactions in flight, one wake-up serves many futures."""

    __slots__ = ("_loop", "_queued", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: collections.deque[asyncio.Future[None]] = collections.deque()
        self._scheduled = False

    def waiter(self) -> asyncio.Future[None]:
        """A new waiter of this loop, for :meth:`wake`."""
        return self._loop.create_future()

    def wake(self, waiter: asyncio.Future[None]) -> None:
        """Set ``waiter`` on its loop soon (from any thread). Queued before the check, so a
        wake-up that finds one scheduled is run by it: :meth:`_run` clears the flag before it
        takes the queue."""
        self._queued.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._run)
            except RuntimeError:  # a closed loop: nothing waits on it any more
                pass
            except BaseException:  # an interrupt (a signal handler's): no run is on its way
                self._scheduled = False
                raise

    def _run(self) -> None:
        self._scheduled = False
        queued = self._queued
        while queued:
            waiter = queued.popleft()
            if not waiter.done():  # not cancelled
                waiter.set_result(None)


_loop_wakeups = threading.local()
"""The :class:`_Wakeups` of the loop that ran last on each thread."""


def _wakeups() -> _Wakeups:
    """The :class:`_Wakeups` of the running event loop."""
    loop = asyncio.get_running_loop()
    wakeups: _Wakeups | None = getattr(_loop_wakeups, "current", None)
    if wakeups is None or wakeups._loop is not loop:
        wakeups = _loop_wakeups.current = _Wakeups(loop)
    return wakeups


class Ready(Future[T]):
    """A value known already (engines whose reads complete at once)."""

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def poll(self) -> bool:
        return True

    def result(self) -> T:
        return self._value

    def block(self) -> None:
        pass

    def notify(self, callback: Callable[[], object]) -> None:
        callback()

    def __await__(self) -> Generator[Future[Any], None, T]:
        return self._value
        yield  # a generator that never yields


class Failed(Future[T]):
    """An error known already."""

    __slots__ = ("_error",)

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def poll(self) -> bool:
        return True

    def result(self) -> T:
        raise self._error

    def block(self) -> None:
        pass

    def notify(self, callback: Callable[[], object]) -> None:
        callback()


def settled(call: Callable[[], T]) -> Future[T]:
    """``call()`` made now: a ready future of its value, or a failed one of its error."""
    try:
        return Ready(call())
    except Exception as exc:
        return Failed(exc)


class Mapped(Future[U], Generic[T, U]):
    """``convert`` of another future's value, computed once, when it is first asked for."""

    __slots__ = ("_convert", "_inner", "_outcome")

    def __init__(self, inner: Future[T], convert: Callable[[T], U]) -> None:
        self._inner = inner
        self._convert = convert
        self._outcome: Future[U] | None = None

    def poll(self) -> bool:
        return self._inner.poll()

    def result(self) -> U:
        if self._outcome is None:
            self._outcome = settled(lambda: self._convert(self._inner.result()))
        return self._outcome.result()

    def block(self) -> None:
        self._inner.block()

    def notify(self, callback: Callable[[], object]) -> None:
        self._inner.notify(callback)

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        await self._inner.settle_async(executor)


class Gathered(Future[list[T]]):
    """The values of several futures, in order; their reads are all in flight at once."""

    __slots__ = ("_futures", "_next")

    def __init__(self, futures: Sequence[Future[T]]) -> None:
        self._futures = futures
        self._next = 0  # the futures before it are known

    def _pending(self) -> Future[T] | None:
        while self._next < len(self._futures):
            future = self._futures[self._next]
            if not future.poll():
                return future
            self._next += 1
        return None

    def poll(self) -> bool:
        return self._pending() is None

    def result(self) -> list[T]:
        return [future.result() for future in self._futures]

    def block(self) -> None:
        pending = self._pending()
        if pending is not None:
            pending.block()

    def notify(self, callback: Callable[[], object]) -> None:
        pending = self._pending()
        if pending is None:
            callback()
        else:
            pending.notify(callback)

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        pending = self._pending()
        if pending is not None:
            await pending.settle_async(executor)


class Latch(Future[bool]):
    """A future the caller's own code settles, once (:meth:`open`): whether what a protocol
    run :func:`concurrently` waits for went well. Nothing else settles it: open it in a
    ``finally``, or whatever awaits it waits for ever."""

    __slots__ = ("_callbacks", "_lock", "_opened", "_passed")

    def __init__(self) -> None:
        self._passed = False
        self._opened = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def open(self, passed: bool) -> None:
        """Settle it with ``passed``; a latch already open stays as it is."""
        with self._lock:
            if self._opened.is_set():
                return
            self._passed = passed
            self._opened.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def poll(self) -> bool:
        return self._opened.is_set()

    def result(self) -> bool:
        return self._passed

    def block(self) -> None:
        self._opened.wait()

    def notify(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if not self._opened.is_set():
                self._callbacks.append(callback)
                return
        callback()


class _Either(Future[None]):
    """Ready once one of ``futures`` (not ready when made) can make progress: what
    :func:`concurrently` waits on while every coroutine it runs waits. A future that cannot
    notify (work that blocks, a pause) is waited on alone, so that its work runs once; the
    others' are waited on together (a callback each, the first one wakes)."""

    __slots__ = ("_futures",)

    def __init__(self, futures: Sequence[Future[Any]]) -> None:
        self._futures = futures

    def poll(self) -> bool:
        return any(future.poll() for future in self._futures)

    def result(self) -> None:
        return None

    def block(self) -> None:
        woken = threading.Event()
        for future in self._futures:
            try:
                future.notify(woken.set)
            except NotImplementedError:
                future.block()
                return
        woken.wait()

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        wakeups = _wakeups()
        waiter = wakeups.waiter()
        wake = functools.partial(wakeups.wake, waiter)
        for future in self._futures:
            try:
                future.notify(wake)
            except NotImplementedError:
                await future.settle_async(executor)
                return
        await waiter


async def concurrently(*awaitables: Awaitable[Any]) -> list[Any]:
    """Run ``awaitables`` (protocol coroutines) together, under whichever driver runs the
    caller: each goes on as far as it can, then all wait until one of their futures is
    ready -- their round trips overlap instead of adding up. Returns their values in order
    once all have ended; if any raised, raises the first error (by position) once all have
    ended, so none is left in flight. An interrupt -- thrown into the caller while it waits
    (Ctrl-C, a cancellation), or raised inside one of them (a ``BaseException`` that is not
    an ``Exception``) -- is thrown at once into each one still running (one not started yet
    never starts), and is what the caller raises at the end, before any error."""
    steps = [awaitable.__await__() for awaitable in awaitables]
    waiting: list[Future[Any] | None] = [None] * len(steps)
    thrown: list[BaseException | None] = [None] * len(steps)
    values: list[Any] = [None] * len(steps)
    errors: list[BaseException | None] = [None] * len(steps)
    running = list(range(len(steps)))
    ended: set[int] = set()
    interrupt: BaseException | None = None
    while True:
        for index in running:
            while True:
                waited, error = waiting[index], thrown[index]
                if error is None and waited is not None and not waited.poll():
                    break
                try:
                    if error is not None:
                        thrown[index] = None
                        waited = steps[index].throw(error)
                    else:
                        waited = steps[index].send(None)
                except StopIteration as done:
                    values[index], waiting[index] = done.value, None
                    ended.add(index)
                    break
                except Exception as exc:  # reported once every one has ended
                    errors[index], waiting[index] = exc, None
                    ended.add(index)
                    break
                except BaseException as exc:  # an interrupt inside one: to all the others
                    errors[index], waiting[index] = exc, None
                    ended.add(index)
                    if interrupt is None:
                        interrupt = exc
                        for other in running:
                            if other not in ended:
                                thrown[other] = exc
                    break
                if isinstance(waited, Future):
                    waiting[index] = waited
                else:
                    waiting[index], thrown[index] = None, _foreign(waited)
        running = [i for i in running if waiting[i] is not None or thrown[i] is not None]
        if not running:
            break
        if any(thrown[i] is not None for i in running):
            continue  # throw in what is due before waiting
        pending = [future for i in running if (future := waiting[i]) is not None]
        try:
            await _Either(pending)
        except BaseException as exc:  # thrown in by the driver: to every one still running
            interrupt = interrupt or exc
            for index in running:
                thrown[index] = exc
    if interrupt is not None:
        raise interrupt
    for error in errors:
        if error is not None:
            raise error
    return values


class Blocking(Future[T]):
    """Work that can only block (a SQLite transaction, an object-store call): run on the
    waiting thread by :func:`drive`, in an executor by :func:`drive_async`."""

    __slots__ = ("_call", "_outcome")

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._outcome: Future[T] | None = None

    def poll(self) -> bool:
        return self._outcome is not None

    def result(self) -> T:
        assert self._outcome is not None, "poll() first"
        return self._outcome.result()

    def block(self) -> None:
        self._run()

    def _run(self) -> None:
        if self._outcome is None:
            self._outcome = settled(self._call)

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        await asyncio.get_running_loop().run_in_executor(executor, self._run)


class Sleep(Future[T]):
    """A pause of ``seconds``, then ``value`` (a retry's backoff)."""

    __slots__ = ("_slept", "_value", "seconds")

    def __init__(self, seconds: float, value: T) -> None:
        self.seconds = seconds
        self._value = value
        self._slept = seconds <= 0

    def poll(self) -> bool:
        return self._slept

    def result(self) -> T:
        return self._value

    def block(self) -> None:
        time.sleep(self.seconds)
        self._slept = True

    async def settle_async(self, executor: concurrent.futures.Executor | None) -> None:
        await asyncio.sleep(self.seconds)
        self._slept = True


def drive(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` (a protocol coroutine, or a future) to its end on this thread,
    blocking at each future that is not ready; return its value or raise its error."""
    steps = awaitable.__await__()
    try:
        waited = steps.send(None)
        while True:
            if not isinstance(waited, Future):
                waited = steps.throw(_foreign(waited))
                continue
            try:
                waited.block()
            except BaseException as exc:  # an interrupt while waiting: to the coroutine
                waited = steps.throw(exc)
            else:
                waited = steps.send(None)
    except StopIteration as done:
        return cast(T, done.value)


def _foreign(waited: object) -> TypeError:
    return TypeError(
        f"a protocol awaited {type(waited).__name__}: the plane's drivers wait on engine "
        "futures only"
    )


async def drive_async(
    awaitable: Awaitable[T], executor: concurrent.futures.Executor | None = None
) -> T:
    """Run ``awaitable`` from the running asyncio event loop, awaiting each future that is
    not ready there (blocking work in ``executor``, the loop's default if ``None``)."""
    steps = awaitable.__await__()
    try:
        waited = steps.send(None)
        while True:
            if not isinstance(waited, Future):
                waited = steps.throw(_foreign(waited))
                continue
            try:
                await waited.settle_async(executor)
            except BaseException as exc:  # cancelled while waiting: to the coroutine
                waited = steps.throw(exc)
            else:
                waited = steps.send(None)
    except StopIteration as done:
        return cast(T, done.value)
