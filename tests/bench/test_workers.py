"""How bench chooses its worker processes: from the usable cores, leaving room for a server on this machine."""

from __future__ import annotations

import socket

import pytest

from llmtriage.bench.workers import choose, given, is_local


@pytest.mark.parametrize(
    ("concurrency", "closed", "cpus", "local", "workers"),
    [
        (1, True, 16, False, 1),
        (None, True, 16, False, 1),  # closed loop without --concurrency: one stream
        (128, True, 16, False, 1),
        (129, True, 16, False, 2),  # one worker per 128 streams
        (1024, True, 16, False, 8),
        (1024, True, 2, False, 2),  # at most one per usable core
        (1024, True, 2, True, 1),  # a local server keeps half the cores
        (1024, True, 16, True, 8),
        (1024, True, 1, True, 1),  # never none
        (3, True, 16, False, 1),
        (None, False, 4, False, 2),  # an uncapped open loop: 2
        (None, False, 2, True, 1),
        (300, False, 3, True, 1),  # an open loop's cap counts as its streams
    ],
)
def test_choose(concurrency: int | None, closed: bool, cpus: int, local: bool, workers: int) -> None:
    choice = choose(concurrency, closed, cpus, local)
    assert (choice.workers, choice.usable_cpus, choice.server_local, choice.chosen_by) == (workers, cpus, local, "auto")


def test_reason_says_the_count_and_what_it_came_from() -> None:
    assert choose(1024, True, 2, True).reason == "1 (2 usable cores, server on this machine)"
    assert choose(1024, True, 1, False).reason == "1 (1 usable core, server elsewhere)"
    assert given(3, 8, False).reason == "3 (set by --workers; 8 usable cores, server elsewhere)"


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.3.2.1:8000/v1", True),
        ("http://[::1]:8000", True),
        ("http://localhost:8000", True),
        ("http://LOCALHOST.:8000", True),
        ("http://vllm.localhost", True),
        ("http://0.0.0.0:8000", True),
        ("http://198.51.100.7:8000", False),  # TEST-NET-2: no machine's address
        ("http://[2001:db8::1]:8000", False),
        ("https://api.example.com", False),
        ("http://user:pw@127.0.0.1:8000", True),
    ],
)
def test_is_local(url: str, local: bool) -> None:
    assert is_local(url) is local


def test_this_hosts_own_name_and_address_are_local() -> None:
    assert is_local(f"http://{socket.gethostname()}:8000")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a UDP connect sends nothing: it picks the interface that would send
        except OSError:
            pytest.skip("no route: no interface address to try")
        own = probe.getsockname()[0]
    assert is_local(f"http://{own}:8000")
    assert not is_local("http://192.0.2.1:8000")  # TEST-NET-1: no machine's address
