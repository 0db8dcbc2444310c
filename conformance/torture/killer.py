"""When and what the torture kills: worker processes and, with server faults, the store's
server processes (:class:`Killer`)."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from typing import Final

from conformance.context import TortureSize
from conformance.torture.fleet import Fleet
from conformance.torture.servers import ServerFaults

POSTPONE_SECONDS: Final = 0.5
"""How long a server kill waits for the cluster to heal from the last one before asking
again (killing faster than it heals exceeds its fault tolerance)."""


class Killer:
    """When and what to kill: a worker process every ``mean_kill_interval`` seconds on
    average, drawn among them all and skipped if it has not opened its log yet
    (``Fleet.started``: each process is then killed as often as before, or less); with
    ``servers``, also a server every ``server_kill_interval`` seconds on average, restarted
    after a uniform fraction of that interval; the first is due within the first interval,
    so that a run that long kills a server unless the cluster is not healthy (an exponential
    first draw left one run in 400 of six intervals without any). A server kill waits until
    the cluster has healed from the last one (``ServerFaults.healthy``)."""

    def __init__(
        self,
        fleet: Fleet,
        servers: ServerFaults | None,
        size: TortureSize,
        rng: random.Random,
        now: float,
    ) -> None:
        self.fleet, self.servers, self.size, self.rng = fleet, servers, size, rng
        self.next_process_kill = now + rng.expovariate(1 / size.mean_kill_interval)
        self.next_server_event = (
            now + rng.uniform(0.0, size.server_kill_interval) if servers else math.inf
        )
        self.server_down = False
        self.server_kills = 0
        self.servers_killed: Counter[str] = Counter()
        self.server_kills_postponed = 0
        """Server kills put off because the cluster had not healed from the last one."""
        self.process_kills_skipped = 0
        """Process kills not done because the process drawn had not opened its log yet."""

    def next_event(self) -> float:
        """When the next kill or restart is due (``time.monotonic()``)."""
        return min(self.next_process_kill, self.next_server_event)

    def act(self, now: float) -> None:
        """Do what is due at ``now``."""
        if now >= self.next_process_kill:
            self.fleet.reap()
            victim = self.rng.choice(self.fleet.processes)
            if self.fleet.started(victim):
                self.fleet.kill(victim)
            else:  # not another victim: that would kill the started ones more often
                self.process_kills_skipped += 1
            self.next_process_kill = now + self.rng.expovariate(1 / self.size.mean_kill_interval)
        if self.servers is not None and now >= self.next_server_event:
            interval = self.size.server_kill_interval
            if self.server_down:
                self.servers.restart()
                self.next_server_event = now + self.rng.expovariate(1 / interval)
            elif not self.servers.healthy():
                self.server_kills_postponed += 1
                self.next_server_event = time.monotonic() + POSTPONE_SECONDS
                return
            else:
                killed = self.servers.kill(self.rng)
                self.servers_killed[killed.split(" (")[0]] += 1
                self.server_kills += 1
                self.next_server_event = now + self.rng.uniform(0.1, 1.0) * interval
            self.server_down = not self.server_down
