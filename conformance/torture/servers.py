"""Server faults: the torture's controller SIGKILLs and restarts the store's own server
processes (FoundationDB's ``fdbserver``) while the workers run.

Two ways to reach them: :class:`LocalCluster` for a cluster started by
``fdb-local start DIR "" N`` on this machine, and :class:`CommandServers` for any other
cluster, through an operator's kill and restart commands. At most one server is down at a
time: the controller restarts the last one killed before it kills another.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Final, Protocol

from persistence.errors import Validation

EXIT_WAIT_SECONDS: Final = 10.0
"""How long a killed server may take to disappear before the kill is reported failed."""
COMMAND_TIMEOUT_SECONDS: Final = 120.0
MAX_ACTIVE_GENERATIONS: Final = 4
"""A server is killed only while fewer generations are active (see ``LocalCluster.healthy``)."""
ACCEPTING_COMMITS: Final = frozenset(
    {"accepting_commits", "all_logs_recruited", "storage_recovered", "fully_recovered"}
)
"""FoundationDB's recovery states in which the database accepts commits."""
_TIME: Final = re.compile(r' Time="([0-9.]+)"')
_DURATION: Final = re.compile(r' RecoveryDuration="([0-9.e-]+)"')


class ServerFaultError(Exception):
    """A server could not be killed or restarted (the run stops and reports it)."""


class ServerFaults(Protocol):
    """Kill one server process, and restart it."""

    def healthy(self) -> bool:
        """Whether one more server may die now without taking the cluster beyond what it
        recovers from by itself."""
        ...

    def kill(self, rng: random.Random) -> str:
        """SIGKILL one server process chosen with ``rng``; return what was killed."""
        ...

    def restart(self) -> None:
        """Restart the server killed last (no-op if none is down)."""
        ...

    def recoveries(self, since: float) -> list[float] | None:
        """How long each recovery of the cluster since ``since`` (a ``time.time()``) took,
        in seconds, as far as the servers tell; ``None`` if they cannot be asked."""
        ...


RESTART_SECONDS: Final = 60.0
"""How long a restart keeps trying: a killed server's port can stay unusable for a while
(its connections closing, under load), and the new process then exits at once."""
RESTART_PAUSE_SECONDS: Final = 0.5
STARTED_SECONDS: Final = 0.5
"""A restarted server still running after this long is listening."""


class LocalCluster:
    """The ``fdbserver`` processes of an ``fdb-local`` directory (``DIR/fdbserver.pid``, the
    coordinator first). The coordinator is never killed: a cluster with one coordinator is
    unavailable without it. A killed process is restarted with its own command line and
    working directory, read from ``/proc`` before the kill, and its new pid is written back
    to the pid file (so ``fdb-local stop DIR`` stops it)."""

    def __init__(self, directory: Path) -> None:
        self.pid_file = directory / "fdbserver.pid"
        if not self.pid_file.is_file():
            raise Validation(
                "fdb_local", f"{directory} holds no fdbserver.pid (not an fdb-local directory)"
            )
        if len(self.pids()) < 3:
            raise Validation(
                "fdb_local",
                f"{directory} runs {len(self.pids())} fdbserver processes; killing one needs "
                'at least 3 (fdb-local start DIR "" 3: double redundancy)',
            )
        dead = [pid for pid in self.pids() if not running(pid)]
        if dead:
            raise Validation(
                "fdb_local",
                f"fdbserver pids {dead} of {directory} are not running (restart the cluster)",
            )
        self.logs = directory / "logs"
        self.cluster_file = directory / "fdb.cluster"
        self._down: tuple[int, list[str], str] | None = None  # (slot, argv, cwd)
        self._children: list[subprocess.Popen[bytes]] = []

    def pids(self) -> list[int]:
        """The fdbserver pids, the coordinator first."""
        return [int(line) for line in self.pid_file.read_text().split()]

    def healthy(self) -> bool:
        """From ``fdbcli status json``: the cluster accepts commits, and fewer than
        :data:`MAX_ACTIVE_GENERATIONS` transaction-system generations are active. Each kill
        before a recovery completes adds one; a cluster killed faster than it recovers piles
        them up until FoundationDB delays recovery altogether
        (``RecoveryDelayedTooManyOldGenerations``, seen here at 71, unavailable for minutes).
        """
        try:
            command = [self._fdbcli(), "-C", str(self.cluster_file), "--timeout", "5"]
            done = subprocess.run(
                [*command, "--exec", "status json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            recovery = json.loads(done.stdout)["cluster"]["recovery_state"]
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return False  # no answer: recovering
        generations = recovery.get("active_generations", MAX_ACTIVE_GENERATIONS)
        return bool(
            recovery.get("name") in ACCEPTING_COMMITS and generations < MAX_ACTIVE_GENERATIONS
        )

    def _fdbcli(self) -> str:
        """``fdbcli`` next to the coordinator's ``fdbserver`` binary."""
        return str(Path(os.readlink(f"/proc/{self.pids()[0]}/exe")).with_name("fdbcli"))

    def kill(self, rng: random.Random) -> str:
        if self._down is not None:
            raise ServerFaultError("a server is already down; restart it first")
        pids = self.pids()
        slot = rng.randrange(1, len(pids))
        pid = pids[slot]
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError as exc:
            raise ServerFaultError(f"fdbserver {slot} (pid {pid}) is not running: {exc}") from exc
        os.kill(pid, signal.SIGKILL)
        self._wait_gone(pid)
        self._down = (slot, [a.decode() for a in argv], cwd)
        return f"fdbserver {slot} (pid {pid})"

    def restart(self) -> None:
        if self._down is None:
            return
        slot, argv, cwd = self._down
        deadline = time.monotonic() + RESTART_SECONDS
        for pause in itertools.chain([0.0], itertools.repeat(RESTART_PAUSE_SECONDS)):
            time.sleep(pause)
            with open(self.logs / f"fdbserver.{slot}.out", "ab") as out:
                child = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                )
            self._children.append(child)
            try:  # a server that cannot listen ("Local address in use") exits at once
                child.wait(timeout=STARTED_SECONDS)
            except subprocess.TimeoutExpired:
                break  # listening
            if time.monotonic() > deadline:
                raise ServerFaultError(
                    f"fdbserver {slot} exited at every restart for {RESTART_SECONDS:g} s "
                    f"(status {child.returncode}; see {self.logs}/fdbserver.{slot}.out)"
                )
        pids = self.pids()
        pids[slot] = child.pid
        self.pid_file.write_text("".join(f"{p}\n" for p in pids))
        self._down = None

    def recoveries(self, since: float) -> list[float] | None:
        """From the servers' trace logs: each ``MasterRecoveryAvailable`` event (the
        database accepts commits again) and the ``MasterRecoveryDuration`` it reported.
        Trace files are flushed every few seconds, so the newest recovery may be missing."""
        durations: list[float] = []
        for trace in sorted(self.logs.glob("trace.*.xml")):
            for line in trace.read_text(errors="replace").splitlines():
                if 'Type="MasterRecoveryDuration"' not in line:
                    continue
                at, duration = _TIME.search(line), _DURATION.search(line)
                if at and duration and float(at.group(1)) >= since:
                    durations.append(float(duration.group(1)))
        return durations

    def _wait_gone(self, pid: int) -> None:
        """Wait until ``pid`` has exited (reaped, or a zombie nobody reaps)."""
        for child in self._children:
            if child.pid == pid:
                child.wait(EXIT_WAIT_SECONDS)
                self._children.remove(child)
                return
        deadline = time.monotonic() + EXIT_WAIT_SECONDS
        while time.monotonic() < deadline:
            if not running(pid):
                return
            time.sleep(0.01)
        raise ServerFaultError(f"pid {pid} did not exit within {EXIT_WAIT_SECONDS} s of SIGKILL")


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie nobody reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class CommandServers:
    """A cluster reached through an operator's shell commands: ``kill_command`` SIGKILLs one
    server process (it may print what it killed) and ``restart_command`` starts it again.
    Each gets ``AOSP_SEED`` in its environment, drawn from the run's random generator."""

    def __init__(self, kill_command: str, restart_command: str) -> None:
        self.kill_command = kill_command
        self.restart_command = restart_command
        self._down = False

    def healthy(self) -> bool:
        """Always: the kill command is expected to wait for the cluster's health itself."""
        return True

    def kill(self, rng: random.Random) -> str:
        if self._down:
            raise ServerFaultError("a server is already down; restart it first")
        out = self._run(self.kill_command, rng.getrandbits(32))
        self._down = True
        return out or "a server"

    def restart(self) -> None:
        if self._down:
            self._run(self.restart_command, 0)
            self._down = False

    def recoveries(self, since: float) -> None:
        return None

    @staticmethod
    def _run(command: str, seed: int) -> str:
        try:
            done = subprocess.run(
                command,
                shell=True,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_SECONDS,
                env={**os.environ, "AOSP_SEED": str(seed)},
            )
        except subprocess.TimeoutExpired as exc:
            raise ServerFaultError(
                f"{command!r} ran longer than {COMMAND_TIMEOUT_SECONDS} s"
            ) from exc
        if done.returncode != 0:
            raise ServerFaultError(
                f"{command!r} exited with status {done.returncode}: {done.stderr.strip()[-300:]}"
            )
        return done.stdout.strip()
