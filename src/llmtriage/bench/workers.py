"""How many client processes a run uses, from the cores this process may run on and where the server is.

One event loop reads some 90,000 streamed tokens a second on a core of its own (about 10 us of CPU a token), so
a run wants one worker per :data:`STREAMS_PER_WORKER` concurrent streams; but a worker only helps while it has a
core to itself, and each one more costs CPU of its own (fewer tokens per read, one more loop). A server on the
same machine needs cores too: on 2 cores with the server local, 1 worker spent 6-10 us of CPU a token where 2
spent 7-14 us, CPU the server then lacks, and read as many tokens a second (1,024 streams against llmtriage sim:
medians 105,000 and 103,000 tokens/s over 6 alternating runs), so with a local server the workers take at most
half the usable cores.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import urllib.parse
from dataclasses import dataclass

STREAMS_PER_WORKER = 128
UNCAPPED_OPEN_LOOP_WORKERS = 2
AUTO = "auto"
FLAG = "--workers"


@dataclass(frozen=True, slots=True)
class WorkerChoice:
    """The worker count of a run and why: ``chosen_by`` is ``auto`` or ``--workers``."""

    workers: int
    usable_cpus: int
    server_local: bool
    chosen_by: str = AUTO

    @property
    def reason(self) -> str:
        """``1 (2 usable cores, server on this machine)``: the count and what it came from."""
        where = "server on this machine" if self.server_local else "server elsewhere"
        cores = f"{self.usable_cpus} usable core{'s' if self.usable_cpus != 1 else ''}"
        why = f"{cores}, {where}" if self.chosen_by == AUTO else f"set by {FLAG}; {cores}, {where}"
        return f"{self.workers} ({why})"


def usable_cpus() -> int:
    """The cores this process may run on (its CPU affinity: a container's or ``taskset``'s limit), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity API outside Linux
        return os.cpu_count() or 1


def is_local(url: str) -> bool:
    """Whether ``url``'s host is this machine: a loopback address, one of this machine's own addresses,
    ``localhost``, or this host's own name (names are not resolved: no DNS wait before a run)."""
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host.endswith(".localhost") or host == socket.gethostname().lower()
    return address.is_loopback or address.is_unspecified or _own_address(address)


def _own_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an interface of this machine has ``address``: only then can a socket bind to it."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def choose(concurrency: int | None, closed_loop: bool, cpus: int, server_local: bool) -> WorkerChoice:
    """One worker per :data:`STREAMS_PER_WORKER` streams (an uncapped open loop: 2), at most one per usable core,
    or per two when the server shares them, and never more than the streams."""
    if concurrency is None:
        wanted = 1 if closed_loop else UNCAPPED_OPEN_LOOP_WORKERS
    else:
        wanted = math.ceil(concurrency / STREAMS_PER_WORKER)
    room = cpus // 2 if server_local else cpus
    return WorkerChoice(max(1, min(wanted, room, concurrency or wanted)), cpus, server_local)


def given(workers: int, cpus: int, server_local: bool) -> WorkerChoice:
    """The count ``--workers`` set."""
    return WorkerChoice(workers, cpus, server_local, FLAG)
