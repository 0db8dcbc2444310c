"""The worker processes: started, SIGKILLed, restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from conformance.torture.evidence import log_name

ROOT: Final = Path(__file__).resolve().parents[2]
"""The directory holding the ``conformance`` package (on the workers' ``PYTHONPATH``)."""


@dataclass
class Process:
    role: str
    ident: int
    incarnation: int
    proc: subprocess.Popen[bytes]


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
        path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def start(self, role: str, ident: int, incarnation: int = 0) -> None:
        """Start incarnation ``incarnation`` of process ``role``-``ident``."""
        name = log_name(role, ident, incarnation).removesuffix(".jsonl")
        with open(self.directory / f"{name}.stderr", "wb") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "conformance.torture.worker",
                    str(self.config_path),
                    role,
                    str(ident),
                    str(incarnation),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
            )
        self.processes.append(Process(role, ident, incarnation, proc))
        self.starts += 1

    def started(self, process: Process) -> bool:
        """Whether ``process`` is past its interpreter's start: it has opened its log file,
        which a worker does first, before it opens the plane. A kill before that would
        exercise Python's imports, not the store, and only lengthen the restart of a
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
            gone = [p for p in waiting if p.proc.poll() is not None]
            if gone or time.monotonic() > deadline:
                names = ", ".join(
                    f"{p.role}-{p.ident}" + ("" if p.proc.returncode is None else " (exited)")
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
        self.processes.remove(victim)
        self.start(victim.role, victim.ident, victim.incarnation + 1)

    @staticmethod
    def _kill(process: Process) -> bool:
        """SIGKILL ``process`` if it runs; whether it did."""
        running = process.proc.poll() is None
        if running:
            process.proc.send_signal(signal.SIGKILL)
        process.proc.wait()
        return running

    def _exited(self, process: Process) -> None:
        """Record a process that exited by itself: workers run until they are killed."""
        name = log_name(process.role, process.ident, process.incarnation).removesuffix(".jsonl")
        tail = (self.directory / f"{name}.stderr").read_text(errors="replace")[-600:]
        self.failures.append(
            f"process: {name} exited with status {process.proc.returncode}: {tail.strip()}"
        )

    def reap(self) -> None:
        """Record and restart the processes that exited by themselves."""
        for process in [p for p in self.processes if p.proc.poll() is not None]:
            self._exited(process)
            self.processes.remove(process)
            self.start(process.role, process.ident, process.incarnation + 1)

    def kill_all(self) -> None:
        """SIGKILL every process (the last kill), without restarting them."""
        for process in self.processes:
            if self._kill(process):
                self.final_kills += 1
            else:
                self._exited(process)
        self.processes.clear()
