"""One deadline over every outbound request: a server trickling its headers, its body or its
TLS handshake a byte at a time can't hold a request through an egress client past it.

The servers are real sockets on loopback (tests/trickle.py); each byte comes well within any
read timeout, so only the deadline ends the read.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from netguard import watched_connections
from test_egress import Answers, certificate, server
from trickle import trickling

from store.deadlines import ALARMS, TIMER_NAME, Deadline
from store.egress import Egress

DEADLINE = 1.5
# A read ends at its deadline; this only bounds a failure on a busy machine.
GENEROUS = 3 * DEADLINE
NAME = "slow.example.org"


def loopback() -> Egress:
    return Egress(("127.0.0.1",))


def since(deadline: Deadline) -> float:
    """Seconds from the moment the deadline was set: a stopwatch started after it would make a
    cut at the deadline look early."""
    return time.monotonic() - (deadline.end - deadline.seconds)


def test_a_server_trickling_its_headers_is_cut_off_at_the_deadline():
    deadline = Deadline.after(DEADLINE)
    with trickling("head", every=0.5) as slow, loopback().client(deadline) as c:
        with pytest.raises(httpx.ReadTimeout) as timed_out:
            c.get(f"{slow.url}/page")
        took = since(deadline)
        assert slow.left.wait(10), "the connection was kept open after the deadline"

    assert DEADLINE <= took < GENEROUS
    assert slow.sent >= 2  # it was answering, a byte at a time, within any read timeout
    assert str(timed_out.value) == "not over within its deadline of 1.5 seconds"


@pytest.mark.parametrize("part", ["body", "body-to-close"])
def test_a_server_trickling_its_body_is_cut_off_at_the_deadline_of_the_whole_request(part):
    deadline = Deadline.after(DEADLINE)
    with trickling(part, every=0.5) as slow, loopback().client(deadline) as c:
        with c.stream("GET", f"{slow.url}/file") as response:
            assert response.status_code == 200
            got = bytearray()
            with pytest.raises(httpx.ReadTimeout, match="deadline of 1.5 seconds"):
                for chunk in response.iter_bytes():
                    got += chunk
        took = since(deadline)

    assert DEADLINE <= took < GENEROUS
    assert 1 <= len(got) < 10


def test_a_tls_handshake_trickled_a_byte_at_a_time_ends_at_the_deadline(tmp_path: Path):
    served, trusting = certificate(tmp_path, NAME)
    egress = Egress(("127.0.0.1",), Answers([["127.0.0.1"]]))
    with server(served) as tls, dripping_relay(tls.port) as port:
        deadline = Deadline.after(DEADLINE)
        with egress.client(deadline, verify=trusting) as client:
            with pytest.raises(httpx.ConnectTimeout, match="deadline of 1.5 seconds"):
                client.get(f"https://{NAME}:{port}/hook")
            took = since(deadline)

    assert DEADLINE <= took < GENEROUS
    assert tls.got == []


def test_a_request_made_after_its_deadline_fails_at_once_and_connects_nowhere():
    deadline = Deadline.after(0.01)
    time.sleep(0.02)
    with watched_connections() as connections, loopback().client(deadline) as client:
        with pytest.raises(httpx.ConnectTimeout, match="deadline of 0.01 seconds"):
            client.get("http://127.0.0.1:9/")

    assert connections == []


def test_a_request_within_its_deadline_is_answered_and_its_client_leaves_no_alarm_set():
    before = ALARMS.pending()
    with server() as hooks, loopback().client(Deadline.after(30)) as client:
        answer = client.get(f"http://127.0.0.1:{hooks.port}/hook")
        assert answer.status_code == 200
        assert ALARMS.pending() == before + 1

    assert answer.text == "" and ALARMS.pending() == before


def test_the_clients_of_a_process_share_one_timer_thread():
    clients = [loopback().client(Deadline.after(30)) for _ in range(3)]
    with server() as hooks:
        for client in clients:
            assert client.get(f"http://127.0.0.1:{hooks.port}/hook").status_code == 200
        assert running_threads().count(TIMER_NAME) == 1
        for client in clients:
            client.close()


def running_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.is_alive()]


@contextmanager
def dripping_relay(target: int, every: float = 0.05) -> Iterator[int]:
    """A loopback relay to `target` that passes what the target sends a byte every `every`
    seconds: a TLS server's handshake, dripped."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def relay(client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", target)) as upstream:
            pending = b""
            while not stop.wait(every):
                try:
                    upstream.sendall(_waiting(client))
                    pending += _waiting(upstream)
                    if pending:
                        client.sendall(pending[:1])
                        pending = pending[1:]
                except OSError:  # either end closed
                    return

    def accept() -> None:
        listener.settimeout(0.05)  # to see `stop` soon
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


def _waiting(sock: socket.socket) -> bytes:
    """What `sock` holds now, without waiting; OSError once its peer closed."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return b""
    finally:
        sock.setblocking(True)
    if not data:
        raise ConnectionResetError("closed")
    return data
