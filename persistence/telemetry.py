"""Spans and per-operation statistics for plane operations.

Every public :class:`~persistence.plane.Plane` operation is wrapped by
:func:`traced_coroutine` (a coroutine that either driver runs; :func:`traced` wraps plain
functions). When
``opentelemetry-api`` is installed each call is an OpenTelemetry span named
``aos.<operation>`` carrying ``aos.universe``, ``aos.world``, input sizes
(``aos.entries``, ``aos.bytes``), result sizes (``aos.rows``) and, on failure,
``aos.error.kind`` (the :class:`~persistence.errors.PersistError` kind, or ``internal``).
Until the application installs a tracer provider (an SDK's, in code or through
``OTEL_PYTHON_TRACER_PROVIDER``, read when this module is imported) OpenTelemetry's spans
would be no-ops, so none is started: the wrapper then costs a read of OpenTelemetry's global,
which it repeats on every call, so a provider installed later is followed from its next call
on. Without the package the wrapper costs one flag check.

Independently, :func:`collect_stats` records count, errors and latencies per operation in
this process (what ``aosp --stats`` prints), and once a meter provider is installed each
call is measured too (:mod:`persistence.metrics`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
import time
import types
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from persistence import metrics
from persistence.errors import PersistError

_otel_trace: types.ModuleType | None
try:
    import opentelemetry.trace as _otel_trace
except ImportError:  # the optional extra is not installed: spans are off
    _otel_trace = None
_tracer: Any = None if _otel_trace is None else _otel_trace.get_tracer("aos-persistence")
"""A proxy: it follows whatever tracer provider the application installs, even later."""
_NO_OP_PROVIDERS: tuple[type, ...] = (
    () if _otel_trace is None else (_otel_trace.ProxyTracerProvider, _otel_trace.NoOpTracerProvider)
)
"""Global providers whose spans are no-ops: the default (none installed yet) and the no-op."""
_PROVIDER_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
"""Whether OpenTelemetry will load a tracer provider named by the environment."""
_UNKNOWN = object()

P = ParamSpec("P")
T = TypeVar("T")

SPAN_PREFIX = "aos."


@dataclass
class OperationStats:
    """Calls of one operation: how many, how many failed, and their latencies."""

    calls: int = 0
    errors: int = 0
    seconds: list[float] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the latencies in seconds (nearest rank; 0 when no calls)."""
        if not self.seconds:
            return 0.0
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def to_json(self) -> dict[str, Any]:
        """Counts and latency summary in milliseconds."""
        total = sum(self.seconds)
        return {
            "calls": self.calls,
            "errors": self.errors,
            "total_ms": round(total * 1e3, 3),
            "mean_ms": round(total / self.calls * 1e3, 3) if self.calls else 0.0,
            "p50_ms": round(self.quantile(0.5) * 1e3, 3),
            "p99_ms": round(self.quantile(0.99) * 1e3, 3),
            "max_ms": round(max(self.seconds, default=0.0) * 1e3, 3),
        }


class StatsRecorder:
    """Per-operation statistics of the calls made while it is active (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.operations: dict[str, OperationStats] = {}

    def record(self, operation: str, seconds: float, failed: bool) -> None:
        """Count one call."""
        with self._lock:
            stats = self.operations.setdefault(operation, OperationStats())
            stats.calls += 1
            stats.errors += failed
            stats.seconds.append(seconds)

    def to_json(self) -> dict[str, dict[str, Any]]:
        """``{operation: summary}`` sorted by operation name."""
        with self._lock:
            return {name: self.operations[name].to_json() for name in sorted(self.operations)}


_recorders: list[StatsRecorder] = []


@contextmanager
def collect_stats() -> Iterator[StatsRecorder]:
    """Record statistics of every traced call in this process until the block ends."""
    recorder = StatsRecorder()
    _recorders.append(recorder)
    try:
        yield recorder
    finally:
        _recorders.remove(recorder)


def _input_attributes(arguments: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for name in ("universe", "world"):
        if name in arguments:
            attributes[SPAN_PREFIX + name] = str(arguments[name])
    entries = arguments.get("entries")
    if isinstance(entries, Sequence):
        attributes[SPAN_PREFIX + "entries"] = len(entries)
        attributes[SPAN_PREFIX + "bytes"] = sum(len(e) for e in entries)
    data = arguments.get("data", arguments.get("state", arguments.get("snapshot_bytes")))
    if isinstance(data, bytes):
        attributes[SPAN_PREFIX + "bytes"] = len(data)
    return attributes


def _result_rows(result: object) -> int | None:
    if isinstance(result, list | tuple):
        return len(result)
    count = getattr(result, "count", None)
    return count if isinstance(count, int) else None


_measuring: contextvars.ContextVar[bool] = contextvars.ContextVar("aos_measuring", default=False)
"""Set while an operation is measured as a metric: an operation inside it is part of it."""


def _error_type(exc: BaseException) -> str:
    """``error.type`` of a call that raised ``exc``: the plane's kind, ``cancelled`` for a
    cancelled task or an interrupt, else ``internal``."""
    if isinstance(exc, PersistError):
        return exc.kind
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "cancelled"
    return "internal"


def _observed(
    operation: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    start: float,
    error: str | None,
    metering: bool,
) -> None:
    """Count a finished call: in the active stats recorders, and as metrics when
    ``metering`` (its duration, error kind, and the bytes it was given to write)."""
    elapsed = time.perf_counter() - start
    for recorder in _recorders:
        recorder.record(operation, elapsed, error is not None)
    if metering:
        try:
            attributes = _input_attributes(signature.bind_partial(*args, **kwargs).arguments)
        except (TypeError, ValueError):  # arguments the call refused: no sizes to report
            attributes = {}
        written = attributes.get(SPAN_PREFIX + "bytes")
        metrics.operation(SPAN_PREFIX + operation, elapsed, error, written)


def _tracing() -> bool:
    """Whether the application has installed a tracer provider whose spans are not no-ops."""
    if _otel_trace is None:
        return False
    # OpenTelemetry's global, unset until a provider is installed; asking for the provider
    # would also look in the environment, on every call.
    if (
        getattr(_otel_trace, "_TRACER_PROVIDER", _UNKNOWN) is None
        and not _PROVIDER_FROM_ENVIRONMENT
    ):
        return False
    return not isinstance(_otel_trace.get_tracer_provider(), _NO_OP_PROVIDERS)


def traced(operation: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Wrap a plane method: a span named ``aos.<operation>`` and a stats record per call."""

    def decorate(method: Callable[P, T]) -> Callable[P, T]:
        signature = inspect.signature(method)
        name = SPAN_PREFIX + operation

        @functools.wraps(method)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            tracing, metering = _tracing(), metrics.metering() and not _measuring.get()
            if not tracing and not metering and not _recorders:
                return method(*args, **kwargs)
            start = time.perf_counter()
            error: str | None = "internal"
            outermost = _measuring.set(True) if metering else None
            try:
                if tracing:
                    result = _call_in_span(name, signature, method, args, kwargs)
                else:
                    result = method(*args, **kwargs)
                error = None
                return result
            except BaseException as exc:
                error = _error_type(exc)
                raise
            finally:
                if outermost is not None:
                    _measuring.reset(outermost)
                _observed(operation, signature, args, kwargs, start, error, metering)

        return wrapper

    return decorate


def traced_coroutine(
    operation: str,
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """:func:`traced` for a coroutine function (a plane operation, which either driver
    runs): the span and the stats record cover the awaited call. Untraced, the call is the
    coroutine itself: no frame is added."""

    def decorate(
        method: Callable[P, Coroutine[Any, Any, T]],
    ) -> Callable[P, Coroutine[Any, Any, T]]:
        signature = inspect.signature(method)
        name = SPAN_PREFIX + operation

        async def observed(tracing: bool, metering: bool, args: Any, kwargs: Any) -> T:
            start = time.perf_counter()
            error: str | None = "internal"
            outermost = _measuring.set(True) if metering else None
            try:
                if tracing:
                    result = await _await_in_span(name, signature, method, args, kwargs)
                else:
                    result = await method(*args, **kwargs)
                error = None
                return result
            except BaseException as exc:
                error = _error_type(exc)
                raise
            finally:
                if outermost is not None:
                    _measuring.reset(outermost)
                _observed(operation, signature, args, kwargs, start, error, metering)

        @functools.wraps(method)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
            tracing, metering = _tracing(), metrics.metering() and not _measuring.get()
            if not tracing and not metering and not _recorders:
                return method(*args, **kwargs)
            return observed(tracing, metering, args, kwargs)

        return wrapper

    return decorate


async def _await_in_span(
    name: str,
    signature: inspect.Signature,
    method: Callable[..., Coroutine[Any, Any, T]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> T:
    assert _otel_trace is not None
    with _tracer.start_as_current_span(name, record_exception=False) as span:
        if span.is_recording():
            bound = signature.bind_partial(*args, **kwargs).arguments
            span.set_attributes(_input_attributes(bound))
        try:
            result = await method(*args, **kwargs)
        except PersistError as exc:
            span.set_attribute(SPAN_PREFIX + "error.kind", exc.kind)
            span.set_status(_otel_trace.StatusCode.ERROR, str(exc))
            raise
        except Exception as exc:
            span.set_attribute(SPAN_PREFIX + "error.kind", "internal")
            span.set_status(_otel_trace.StatusCode.ERROR, type(exc).__name__)
            raise
        rows = _result_rows(result)
        if rows is not None:
            span.set_attribute(SPAN_PREFIX + "rows", rows)
        return result


def _call_in_span(
    name: str,
    signature: inspect.Signature,
    method: Callable[..., T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> T:
    assert _otel_trace is not None
    with _tracer.start_as_current_span(name, record_exception=False) as span:
        if span.is_recording():
            bound = signature.bind_partial(*args, **kwargs).arguments
            span.set_attributes(_input_attributes(bound))
        try:
            result = method(*args, **kwargs)
        except PersistError as exc:
            span.set_attribute(SPAN_PREFIX + "error.kind", exc.kind)
            span.set_status(_otel_trace.StatusCode.ERROR, str(exc))
            raise
        except Exception as exc:
            span.set_attribute(SPAN_PREFIX + "error.kind", "internal")
            span.set_status(_otel_trace.StatusCode.ERROR, type(exc).__name__)
            raise
        rows = _result_rows(result)
        if rows is not None:
            span.set_attribute(SPAN_PREFIX + "rows", rows)
        return result
