"""OpenTelemetry metrics of the plane, beside the spans of :mod:`persistence.telemetry`.

Instruments (meter ``aos-persistence``):

* ``aos.client.operation.duration`` (histogram, ``s``): every plane operation a caller made
  (an operation inside another is part of it, not counted again), retries and object-store
  I/O included, with ``aos.operation`` (``aos.journal.append``, ...) and, when it failed,
  ``error.type`` (the :class:`~persistence.errors.PersistError` kind, ``internal``, or
  ``cancelled``). Not OpenTelemetry's ``db.client.operation.duration``: that one times a
  single database call, and one plane operation is several;
* ``aos.client.written`` (counter, ``By``): the bytes a write operation stored (journal
  entries, CAS bodies, snapshot states), with ``aos.operation``; counted when it succeeded;
* ``aos.transaction.errors`` (counter, ``{error}``): engine errors met by the retry loop, with
  ``db.response.status_code`` (FoundationDB's code) and ``aos.retried`` (``true``: retried;
  ``false``: reached the caller);
* ``aos.cas.puts`` (counter, ``{put}``): CAS puts, with ``aos.cas.outcome`` ``present`` (a hit:
  the put found the body's metadata when it began -- or, inline, its own earlier attempt's
  after an unknown commit) or ``stored`` (the put ended with the body stored).

The gauges ``aosp status`` shows are observed by :mod:`persistence.workers.gauges`, which a
host or worker registers for the worlds it wants watched.

They are recorded through the global meter provider. Until the application installs one
(an SDK's), OpenTelemetry's instruments are no-ops, so nothing is measured: each call costs
a read of OpenTelemetry's global (repeated, so a provider installed later is followed;
``OTEL_PYTHON_METER_PROVIDER`` is read once, when this module is imported). Without the
``opentelemetry-api`` package it costs a flag check.
"""

from __future__ import annotations

import functools
import os
import types
from typing import Any, Final

_otel_metrics: types.ModuleType | None
try:
    import opentelemetry.metrics as _otel_metrics
except ImportError:  # the optional extra is not installed: metrics are off
    _otel_metrics = None

METER_NAME = "aos-persistence"

DURATION_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
"""Histogram boundaries in seconds, as OpenTelemetry's database conventions advise (the
SDK's default ones are for milliseconds)."""

_internal: types.ModuleType | None = None
_NO_OP_PROVIDERS: tuple[type, ...] = ()
if _otel_metrics is not None:
    _NO_OP_PROVIDERS = (_otel_metrics.NoOpMeterProvider,)
    try:
        # The API's default provider is a proxy that stays a no-op until one is set; the
        # API names it only in its internal module.
        from opentelemetry.metrics import _internal
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:  # moved in a later API: every default provider then counts as set
        pass
    else:
        _NO_OP_PROVIDERS = (*_NO_OP_PROVIDERS, _ProxyMeterProvider)
"""Global providers whose instruments are no-ops: the default proxy and the no-op."""

_PROVIDER_FROM_ENVIRONMENT: Final = "OTEL_PYTHON_METER_PROVIDER" in os.environ
"""Whether OpenTelemetry will load a meter provider named by the environment."""
_UNKNOWN: Final = object()


def provider() -> Any | None:
    """The application's global meter provider, if it has installed one that records."""
    if _otel_metrics is None:
        return None
    # OpenTelemetry's global, unset until a provider is installed; asking for the provider
    # would also look in the environment, on every call.
    if getattr(_internal, "_METER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_FROM_ENVIRONMENT:
        return None
    installed = _otel_metrics.get_meter_provider()
    return None if isinstance(installed, _NO_OP_PROVIDERS) else installed


def metering() -> bool:
    """Whether the application has installed a meter provider that records."""
    return provider() is not None


@functools.cache
def _instruments(meter_provider: Any) -> dict[str, Any]:
    """The instruments of ``meter_provider``, made once for it."""
    meter = meter_provider.get_meter(METER_NAME)
    return {
        "duration": meter.create_histogram(
            "aos.client.operation.duration",
            unit="s",
            description="Duration of plane operations, retries and object-store I/O included",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        ),
        "written": meter.create_counter(
            "aos.client.written", unit="By", description="Bytes stored by write operations"
        ),
        "errors": meter.create_counter(
            "aos.transaction.errors",
            unit="{error}",
            description="Engine errors met by the transaction retry loop",
        ),
        "cas_puts": meter.create_counter(
            "aos.cas.puts", unit="{put}", description="CAS puts, by whether the body was there"
        ),
    }


def operation(name: str, seconds: float, error: str | None, bytes_written: int | None) -> None:
    """Record one plane operation (``name`` as its span: ``aos.<operation>``); its bytes
    only if it succeeded."""
    installed = provider()
    if installed is None:
        return
    instruments = _instruments(installed)
    attributes = {"aos.operation": name}
    if bytes_written is not None and error is None:
        instruments["written"].add(bytes_written, attributes)
    if error is not None:
        attributes["error.type"] = error
    instruments["duration"].record(seconds, attributes)


def engine_error(code: int, *, retried: bool) -> None:
    """Record one engine error of the retry loop, retried or raised."""
    installed = provider()
    if installed is not None:
        _instruments(installed)["errors"].add(
            1, {"db.response.status_code": str(code), "aos.retried": retried}
        )


def cas_put(*, present: bool) -> None:
    """Record one CAS put: the body was there already (``present``) or is now stored."""
    installed = provider()
    if installed is not None:
        outcome = "present" if present else "stored"
        _instruments(installed)["cas_puts"].add(1, {"aos.cas.outcome": outcome})
