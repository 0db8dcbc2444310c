"""How the futures of libfdb_c wake the asyncio event loop that awaits them, with no Python
on the client's network thread.

libfdb_c calls a future's callback on its network thread. A callback written in Python
(ctypes) must take the GIL there: with many transactions in flight each reply waits for
the event loop's thread to let go of it, and every call the loop makes into libfdb_c
(each ``set``, each ``get``) hands it over and back. ``_fdb_wake.c`` is the callback in C:
it writes the number of the waiting registration (its *slot*) to a pipe of the loop, which
reads the pipe when it is readable and sets the waiter of every slot it finds -- the replies
that arrived since it last looked, in one wake-up.

One pipe (:class:`_Channel`) per event loop, made on the loop's first wait and kept for the
process: a loop that is closed, or collected, leaves its channel to the next loop, which
takes over the slots still registered (the waiters of a closed loop are not set). A channel
holds its loop weakly, and a cancelled wait lets go of its waiter (its slot keeps only the
future, until libfdb_c writes it), so a loop left unclosed is not kept alive by its pipe;
at most :data:`MAX_CHANNELS` exist. A channel never has more slots registered than its pipe
holds, so the C callback never blocks on a full pipe. Past either bound, where a pipe cannot
be made, and wherever the C part is missing, :func:`register` returns ``None`` and the
engine wakes the loop from a Python callback instead (``fdb._notify``).

The main thread's blocking waits (:func:`block`) go through a pipe of their own
(:class:`_MainWait`) for the same reason: Python handles signals on the main thread only,
so its wait must be one that a signal (Ctrl-C) interrupts, which libfdb_c's own
``fdb_future_block_until_ready`` is not; the bindings' wait is, but has the network thread
run Python to release a semaphore.

Both read their pipe through the C part too (``aos_fdb_wake_read``, the GIL released): the
slots it reads are stored, and counted, in memory of the pipe's before it returns, and they
are let go of only once what they wake is done -- a signal's handler that raises in
between (Ctrl-C's ``KeyboardInterrupt``) loses none, and the next read finishes the work.

The C part is built when the package is installed where a C compiler is found
(``pyproject.toml``: an optional extension, a plain shared library loaded with ctypes, not
imported); :func:`available` says whether this process has it.
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import importlib.util
import logging
import os
import threading
import weakref
from typing import Any, Final

CALLBACK: Final = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
"""libfdb_c's ``FDBCallback``: ``void (*)(FDBFuture* future, void* parameter)``."""

_SMALLEST_PIPE: Final = 512
"""What a pipe holds where its size cannot be asked (POSIX's ``PIPE_BUF``, at least)."""
_SLOT_MASK: Final = 0xFFFFFFFF
MAX_CHANNELS: Final = 16
"""Pipes a process keeps for its event loops (each 64 KiB of the user's pipe quota on
Linux); loops past them are woken from Python."""
MAIN_POLL_MS: Final = 200
"""How long the main thread's wait reads its pipe before it looks again whether its own
slot came: a signal sent to another thread, or just before the read began, does not
interrupt the read, and a signal's handler may have waited too (and read that slot)."""

_log = logging.getLogger(__name__)


def _load() -> tuple[Any, Any] | None:
    """The C callback and the C read of a pipe, or ``None`` if they were not built (or
    cannot be loaded here)."""
    spec = importlib.util.find_spec(f"{__package__}._fdb_wake")
    if spec is None or spec.origin is None:
        return None
    try:
        library = ctypes.CDLL(spec.origin)
        read = library.aos_fdb_wake_read
        wake = ctypes.cast(library.aos_fdb_wake, CALLBACK)
    except (OSError, AttributeError) as exc:
        _log.warning("the C wake-up of FoundationDB futures was not loaded: %s", exc)
        return None
    slots = ctypes.POINTER(ctypes.c_uint32)
    read.argtypes = [ctypes.c_int, slots, slots, ctypes.c_uint32, ctypes.c_int]
    read.restype = ctypes.c_int
    return wake, read


_loaded = _load()
_WAKE: Any | None = None if _loaded is None else _loaded[0]
_READ: Any | None = None if _loaded is None else _loaded[1]


def available() -> bool:
    """Whether this process wakes event loops from C (the optional extension was built)."""
    return _WAKE is not None


class _Pipe:
    """A pipe the C callback writes slots to, and the registrations whose slots it writes:
    each holds what its wait keeps (the bindings' future, kept alive until its slot is
    read). Read by one thread at a time.

    Slots are numbered by a counter that skips those in use, and one is let go of only
    once its write is read and what it wakes is done: an interrupt (a signal handler's)
    anywhere in between leaves at most a slot counted that is never written, never two
    registrations on one slot, and the count never under the writes the pipe holds, so the
    C callback's write never blocks."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # not inherited by programs a child executes
        os.set_blocking(self._read, False)
        size = _SMALLEST_PIPE
        if hasattr(fcntl, "F_GETPIPE_SZ"):  # Linux: 64 KiB unless the user's quota is spent
            size = fcntl.fcntl(self._write, fcntl.F_GETPIPE_SZ)
        self.capacity = size // 4
        """Slots registered at most: as many as the pipe holds."""
        self._slots: dict[int, Any] = {}
        self._next = 0
        self._seen = (ctypes.c_uint32 * self.capacity)()
        """The slots read and not yet let go of (``_count`` of them), in the C read's
        memory: a read's result is never only in Python's hands."""
        self._count = ctypes.c_uint32(0)

    @property
    def registered(self) -> int:
        """Slots whose future has not been seen ready yet."""
        return len(self._slots)

    def _register(self, future: Any, held: Any) -> int | None:
        """A slot the C callback writes once the bindings' ``future`` is ready, holding
        ``held``; ``None`` if every slot is taken."""
        slots = self._slots
        if len(slots) >= self.capacity:
            return None
        slot = self._next
        while slot in slots:
            slot = (slot + 1) & _SLOT_MASK
        self._next = (slot + 1) & _SLOT_MASK
        slots[slot] = held
        try:
            future.capi.fdb_future_set_callback(future.fpointer, _WAKE, (self._write << 32) | slot)
        except Exception:  # refused (the bindings' FDBError): libfdb_c will not write it
            del slots[slot]
            raise
        return slot

    def _take(self, timeout_ms: int) -> None:
        """Read the slots written (waiting up to ``timeout_ms`` for the first), let
        :meth:`_woken` have what each holds, then let go of them."""
        assert _READ is not None
        got = _READ(self._read, self._seen, ctypes.byref(self._count), self.capacity, timeout_ms)
        if got < 0:
            raise OSError(-got, os.strerror(-got))
        slots = self._slots
        written = self._seen[: self._count.value]
        for slot in written:  # again after an interrupt: each step may be repeated
            if slot in slots:
                self._woken(slots[slot])
        for slot in written:
            slots.pop(slot, None)
        self._count.value = 0

    def _woken(self, held: Any) -> None:
        """What a slot read does with what it holds (may run twice for one slot)."""


class _Channel(_Pipe):
    """The pipe of an event loop (one at a time): a slot holds the bindings' future and its
    waiter, ``None`` once the wait was cancelled; only the loop's thread touches them."""

    def __init__(self) -> None:
        super().__init__()
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop that reads this pipe, while it exists."""
        return None if self._loop is None else self._loop()

    @property
    def free(self) -> bool:
        """Whether no open loop reads this pipe (none ever did, it closed, or it was
        collected): the next loop may take it over."""
        loop = self.loop
        return loop is None or loop.is_closed()

    def attach(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Read this pipe from ``loop``; false if the loop cannot watch a file descriptor."""
        try:
            loop.add_reader(self._read, self._take, 0)
        except NotImplementedError:  # a loop without add_reader
            return False
        self._loop = weakref.ref(loop)
        return True

    def register(
        self, loop: asyncio.AbstractEventLoop, future: Any
    ) -> tuple[int, asyncio.Future[None]] | None:
        """A slot and a waiter of ``loop`` (this channel's), set once the bindings'
        ``future`` is ready; ``None`` if every slot is taken."""
        waiter = loop.create_future()
        slot = self._register(future, (future, waiter))
        return None if slot is None else (slot, waiter)

    def forget(self, slot: int, waiter: asyncio.Future[None]) -> None:
        """Let go of ``waiter`` (its wait was cancelled); the slot stays until written."""
        registered = self._slots.get(slot)
        if registered is not None and registered[1] is waiter:
            self._slots[slot] = (registered[0], None)

    def _woken(self, held: Any) -> None:
        waiter = held[1]  # a closed loop's (a channel taken over) is left alone
        if waiter is not None and not waiter.done() and not waiter.get_loop().is_closed():
            waiter.set_result(None)


_channels: list[_Channel] = []
"""Every channel of the process: each read by a loop, or left by a closed one."""
_channels_lock = threading.Lock()
_current = threading.local()
"""The channel of the loop that waited last on each thread."""


def _channel(loop: asyncio.AbstractEventLoop) -> _Channel | None:
    """``loop``'s channel: its own, or one a closed or collected loop left, or a new one
    (``None`` past :data:`MAX_CHANNELS`, or if the loop cannot read a pipe)."""
    with _channels_lock:
        for channel in _channels:
            if channel.loop is loop:
                return channel
        for channel in _channels:
            if channel.free:
                break
        else:
            if len(_channels) >= MAX_CHANNELS:
                return None
            try:
                channel = _Channel()
            except OSError as exc:  # no file descriptor left, or the user's pipe quota
                _log.warning("no pipe for an event loop's FoundationDB wake-ups: %s", exc)
                return None
            _channels.append(channel)
        if not channel.attach(loop):
            return None
        return channel


def register(future: Any) -> tuple[_Channel, int, asyncio.Future[None]] | None:
    """The running loop's channel, the slot and the waiter set (from the C callback,
    through the loop's pipe) once the bindings' ``future`` is ready; ``None`` where the C
    part is missing, the loop cannot watch a pipe, or a bound is reached: then wait another
    way. A wait cancelled must :meth:`_Channel.forget` its waiter (the slot stays until
    written), so that a loop left unclosed is not kept alive by its pipe."""
    if _WAKE is None:
        return None
    loop = asyncio.get_running_loop()
    channel: _Channel | None = getattr(_current, "channel", None)
    if channel is None or channel.loop is not loop:
        channel = _channel(loop)
        if channel is None:
            return None
        _current.channel = channel
    registered = channel.register(loop, future)
    if registered is None:
        return None
    return channel, registered[0], registered[1]


class _MainWait(_Pipe):
    """The main thread's blocking waits: each registers a slot holding its future, then
    reads the pipe (the GIL released) until that slot has been read -- by itself, or by a
    wait that a signal's handler made meanwhile. A handler's error (Ctrl-C's
    ``KeyboardInterrupt``) ends the wait; the slot stays registered, with its future,
    until a later wait reads its write."""

    def wait(self, future: Any) -> bool:
        """Wait until ``future`` is ready; false at once if every slot is still taken."""
        if len(self._slots) >= self.capacity:
            self._take(0)  # let go of the slots of interrupted waits written since
        slot = self._register(future, future)
        if slot is None:
            return False
        while slot in self._slots:
            self._take(MAIN_POLL_MS)
        return True


_main_wait: _MainWait | None = None


def _forget_main_wait() -> None:
    """In a forked child: the parent's slots are not the child's (nor is its client)."""
    global _main_wait
    if _main_wait is not None:
        os.close(_main_wait._read)
        os.close(_main_wait._write)
    _main_wait = None


os.register_at_fork(after_in_child=_forget_main_wait)


def block(future: Any) -> bool:
    """Wait, on the main thread, until the bindings' ``future`` is ready, woken from C
    through the main thread's pipe; false at once (nothing waited) where the C part is
    missing, no pipe can be made, or as many waits were interrupted as the pipe holds."""
    global _main_wait
    if _WAKE is None:
        return False
    if _main_wait is None:
        try:
            _main_wait = _MainWait()
        except OSError as exc:  # no file descriptor left, or the user's pipe quota
            _log.warning("no pipe for the main thread's FoundationDB waits: %s", exc)
            return False
    return _main_wait.wait(future)
