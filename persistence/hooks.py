"""Named steps of the protocols, for tests that stop a process between two of them.

The plane and the exporter call ``hooks.reached("protocol.step")`` after each durable step
(``journal.after_append``, ``export.after_upload``, ...). Production planes get
:data:`NO_HOOKS`, which does nothing; fault-injection tests pass an object that raises a
simulated crash or pauses the process there (see ``backends.kv.faults.FaultInjector``).
"""

from __future__ import annotations

from typing import Final, Protocol


class StepHooks(Protocol):
    """Told each time a protocol passes a named step."""

    def reached(self, step: str) -> None:
        """``step`` is done; may raise to simulate the process dying here."""
        ...


class _NoHooks:
    __slots__ = ()

    def reached(self, step: str) -> None:
        del step


NO_HOOKS: Final[StepHooks] = _NoHooks()
"""Hooks that do nothing."""
