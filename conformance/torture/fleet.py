"""The worker processes: started, SIGKILLed, restarted.

Each process is forked from a fork server that imported the worker module once
(``multiprocessing``'s ``forkserver``, preloading :mod:`conformance.torture.worker`): a
restart costs a fork, not an interpreter's start and its imports (0.2 s on an idle machine,
2-3 s at a load of 6 on 2 cores, where a writer killed twice while it redid a lost call
returned past the run's window). Nothing of the store is open in the server: a child
opens its engine, and FoundationDB's network, itself. (A parent started as a script, such
as ``aosp``, has each child run that script's imports again: ``multiprocessing`` prepares a
child's ``__main__`` so. For ``aosp`` that is 45 ms on an idle machine, the worker's modules
being loaded already.)

What a process gets from its parent is given at each start, as a new process would get it:
the parent's environment as it is then (the S3 credentials of a run, say), not as it was
when the server started. The processes are daemons: a parent that exits without killing
them (an error between two starts) takes them with it."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Final

from conformance.torture import worker
from conformance.torture.evidence import log_name

FORKS: Final = multiprocessing.get_context("forkserver")
"""Where the worker processes come from (see the module documentation)."""


def start_fork_server() -> None:
    """Start the fork server, preloading the worker, unless it runs. (The server is one per
    process: one started before, by another use of ``multiprocessing``'s ``forkserver``
    without this preload, stays as it is, and each worker then imports its module and says
    so on its standard error.)"""
    FORKS.set_forkserver_preload([worker.__name__])
    multiprocessing.forkserver.ensure_running()


@dataclass
class Process:
    role: str
    ident: int
    incarnation: int
    proc: BaseProcess


class Fleet:
    """The worker processes: start, kill, restart, and notice the ones that died alone."""

    def __init__(self, config_path: Path, directory: Path) -> None:
        self.config_path = config_path
        self.directory = directory
        self.processes: list[Process] = []
        self.kills: Counter[str] = Counter()
        self.final_kills = 0
        self.starts = 0
        self.failures: list[str] = []
        start_fork_server()

    def start(self, role: str, ident: int, incarnation: int = 0) -> None:
        """Start incarnation ``incarnation`` of process ``role``-``ident``."""
        name = log_name(role, ident, incarnation).removesuffix(".jsonl")
        stderr = self.directory / f"{name}.stderr"
        stderr.touch()  # by the parent: a child that dies before it opens it leaves it empty
        proc = FORKS.Process(
            target=worker.forked,
            args=(str(self.config_path), role, ident, incarnation, str(stderr), dict(os.environ)),
            name=name,
            daemon=True,
        )
        proc.start()
        self.processes.append(Process(role, ident, incarnation, proc))
        self.starts += 1

    def started(self, process: Process) -> bool:
        """Whether ``process`` has opened its log file, which a worker does first, before
        it opens the plane. A kill before that would exercise the fork and the process's
        start, not the store, and only lengthen the restart of a
        process whose call's outcome is unknown (see
        ``TortureSize.compaction_retention_seconds``)."""
        name = log_name(process.role, process.ident, process.incarnation)
        return (self.directory / name).exists()

    def await_started(self, seconds: float) -> list[str]:
        """Wait until every process has started (:meth:`started`), so that a run's time
        and its kills count from a running workload, however long a loaded machine takes
        to import Python; a failure naming the processes that did not start within
        ``seconds``, or that exited first."""
        deadline = time.monotonic() + seconds
        while waiting := [p for p in self.processes if not self.started(p)]:
            gone = [p for p in waiting if p.proc.exitcode is not None]
            if gone or time.monotonic() > deadline:
                names = ", ".join(
                    f"{p.role}-{p.ident}" + ("" if p.proc.exitcode is None else " (exited)")
                    for p in gone or waiting
                )
                return [f"fleet: {names} did not start within {seconds:g} s"]
            time.sleep(0.05)  # a poll of the logs' files, not a guess at how long it takes
        return []

    def kill(self, victim: Process) -> None:
        """SIGKILL ``victim``, wait for it, and start its next incarnation."""
        if self._kill(victim):
            self.kills[victim.role] += 1
        else:
            self._exited(victim)
        self._forget(victim)
        self.start(victim.role, victim.ident, victim.incarnation + 1)

    @staticmethod
    def _kill(process: Process) -> bool:
        """SIGKILL ``process`` if it runs; whether it did."""
        running = process.proc.exitcode is None
        if running:
            process.proc.kill()
        process.proc.join()
        return running

    def _exited(self, process: Process) -> None:
        """Record a process that exited by itself: workers run until they are killed."""
        name = log_name(process.role, process.ident, process.incarnation).removesuffix(".jsonl")
        tail = (self.directory / f"{name}.stderr").read_text(errors="replace")[-600:]
        self.failures.append(
            f"process: {name} exited with status {process.proc.exitcode}: {tail.strip()}"
        )

    def _forget(self, process: Process) -> None:
        """Drop ``process`` (exited), closing its sentinel: a run restarts hundreds."""
        self.processes.remove(process)
        process.proc.close()

    def reap(self) -> None:
        """Record and restart the processes that exited by themselves."""
        for process in [p for p in self.processes if p.proc.exitcode is not None]:
            self._exited(process)
            self._forget(process)
            self.start(process.role, process.ident, process.incarnation + 1)

    def kill_all(self) -> None:
        """SIGKILL every process (the last kill), without restarting them."""
        for process in list(self.processes):
            try:
                if self._kill(process):
                    self.final_kills += 1
                else:
                    self._exited(process)
            finally:
                self._forget(process)
