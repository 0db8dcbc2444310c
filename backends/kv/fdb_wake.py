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

The main thread's blocking waits (:func:`block`) go through a pipe of their own, read with
the GIL released, for the same reason: Python handles signals on the main thread only, so
its wait must be one that a signal (Ctrl-C) interrupts, which libfdb_c's own
``fdb_future_block_until_ready`` is not; the bindings' wait is, but has the network thread
run Python to release a semaphore.

The C part is built when the package is installed where a C compiler is found
(``pyproject.toml``: an optional extension, a plain shared library loaded with ctypes, not
imported); :func:`available` says whether this process has it.
"""

from __future__ import annotations

import array
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

_SLOT: Final = "I" if array.array("I").itemsize == 4 else "L"
"""The array code of the C part's ``uint32_t`` (native byte order, as it writes them)."""
_SMALLEST_PIPE: Final = 512
"""What a pipe holds where its size cannot be asked (POSIX's ``PIPE_BUF``, at least)."""
_READ_BYTES: Final = 1 << 16
_SLOT_MASK: Final = 0xFFFFFFFF
MAX_CHANNELS: Final = 16
"""Pipes a process keeps for its event loops (each 64 KiB of the user's pipe quota on
Linux); loops past them are woken from Python."""

_log = logging.getLogger(__name__)


def _load() -> Any | None:
    """The C callback, or ``None`` if it was not built (or cannot be loaded here)."""
    if array.array(_SLOT).itemsize != 4:
        return None
    spec = importlib.util.find_spec(f"{__package__}._fdb_wake")
    if spec is None or spec.origin is None:
        return None
    try:
        library = ctypes.CDLL(spec.origin)
        return ctypes.cast(library.aos_fdb_wake, CALLBACK)
    except (OSError, AttributeError) as exc:
        _log.warning("the C wake-up of FoundationDB futures was not loaded: %s", exc)
        return None


_WAKE: Any | None = _load()


def available() -> bool:
    """Whether this process wakes event loops from C (the optional extension was built)."""
    return _WAKE is not None


def _slots_held(write: int) -> int:
    """How many slots the pipe written to through ``write`` holds unread."""
    size = _SMALLEST_PIPE
    if hasattr(fcntl, "F_GETPIPE_SZ"):  # Linux: 64 KiB unless the user's quota is spent
        size = fcntl.fcntl(write, fcntl.F_GETPIPE_SZ)
    return size // 4


def _slots_written(partial: bytes, data: bytes) -> tuple[array.array[int], bytes]:
    """The slots in ``data`` read from a pipe (after ``partial``, what an earlier read left
    of a slot), and what is left of one at its end."""
    if partial:  # writes of 4 bytes are atomic: never, but never lose one
        data = partial + data
    whole = len(data) - len(data) % 4
    return array.array(_SLOT, data[:whole]), data[whole:]


def _free_slot(slots: dict[int, Any], start: int) -> int:
    """The first slot from ``start`` on (the one after the slot taken last) not in
    ``slots``."""
    slot = start
    while slot in slots:
        slot = (slot + 1) & _SLOT_MASK
    return slot


class _Channel:
    """A pipe, and the registrations whose slots the C callback writes to it; read by one
    event loop at a time (only that loop's thread touches the slots)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # not inherited by child processes
        os.set_blocking(self._read, False)
        self.capacity = _slots_held(self._write)
        """Slots registered at most: as many as the pipe holds, so a write never blocks."""
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._slots: dict[int, tuple[Any, asyncio.Future[None] | None]] = {}
        """Slots registered, or whose write is not read yet: the bindings' future (kept
        alive until then) and its waiter (``None`` once the wait was cancelled)."""
        self._next = 0
        self._partial = b""

    @property
    def registered(self) -> int:
        """Slots whose future has not been seen ready yet."""
        return len(self._slots)

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
            loop.add_reader(self._read, self._drain)
        except NotImplementedError:  # a loop without add_reader
            return False
        self._loop = weakref.ref(loop)
        return True

    def register(
        self, loop: asyncio.AbstractEventLoop, future: Any
    ) -> tuple[int, asyncio.Future[None]] | None:
        """A slot and a waiter of ``loop`` (this channel's), set once the bindings'
        ``future`` is ready; ``None`` if every slot is taken.

        Slots are numbered by a counter that skips those in use, and one leaves
        ``_slots`` only when its write is read: an interrupt (a signal handler's) anywhere
        in between leaves at most a slot counted that is never written, never two
        registrations on one slot, and the count never under the writes the pipe holds."""
        slots = self._slots
        if len(slots) >= self.capacity:
            return None
        slot = _free_slot(slots, self._next)
        self._next = (slot + 1) & _SLOT_MASK
        waiter = loop.create_future()
        slots[slot] = (future, waiter)
        try:
            future.capi.fdb_future_set_callback(future.fpointer, _WAKE, (self._write << 32) | slot)
        except Exception:  # refused (the bindings' FDBError): libfdb_c will not write it
            del slots[slot]
            raise
        return slot, waiter

    def forget(self, slot: int, waiter: asyncio.Future[None]) -> None:
        """Let go of ``waiter`` (its wait was cancelled); the slot stays until written."""
        registered = self._slots.get(slot)
        if registered is not None and registered[1] is waiter:
            self._slots[slot] = (registered[0], None)

    def _drain(self) -> None:
        try:
            data = os.read(self._read, _READ_BYTES)
        except BlockingIOError:
            return
        written, self._partial = _slots_written(self._partial, data)
        slots = self._slots
        for slot in written:
            registered = slots.pop(slot, None)
            if registered is None:  # libfdb_c calls a callback at most once
                _log.error("a FoundationDB future woke slot %d, which nothing waits on", slot)
                continue
            waiter = registered[1]  # a closed loop's (a channel taken over) is left alone
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


class _MainWait:
    """The main thread's blocking waits: a pipe the C callback writes a wait's slot to, read
    (blocking, the GIL released) until that slot comes. A signal's handler runs during the
    read, and its error (Ctrl-C's ``KeyboardInterrupt``) ends the wait; the slot stays
    registered, with its future, until a later wait reads its write."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self.capacity = _slots_held(self._write)
        """Slots registered at most (interrupted waits' stay until written and read)."""
        self._slots: dict[int, Any] = {}
        """Slots registered, or whose write is not read yet: the bindings' future."""
        self._next = 0
        self._partial = b""

    def wait(self, future: Any) -> bool:
        """Wait until ``future`` is ready; false at once if every slot is taken."""
        slots = self._slots
        if len(slots) >= self.capacity:
            return False
        slot = _free_slot(slots, self._next)
        self._next = (slot + 1) & _SLOT_MASK
        slots[slot] = future
        try:
            future.capi.fdb_future_set_callback(future.fpointer, _WAKE, (self._write << 32) | slot)
        except Exception:  # refused: libfdb_c will not write it
            del slots[slot]
            raise
        while slot in slots:
            written, self._partial = _slots_written(self._partial, os.read(self._read, _READ_BYTES))
            for done in written:
                slots.pop(done, None)
        return True


_main_wait: _MainWait | None = None


def _forget_main_wait() -> None:
    global _main_wait
    _main_wait = None


os.register_at_fork(after_in_child=_forget_main_wait)  # the parent's slots are not the child's


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
