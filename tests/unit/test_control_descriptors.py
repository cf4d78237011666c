"""launch/control/listener.py: room for a descriptor a rank, and a listener that rests, not
spins, when the process runs out of them. The limits are the process's own, so each case that
changes them runs in a child process."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

from ringtrain.launch.control.listener import LEAST_SPARE, SPARE, room

UNLIMITED = resource.RLIM_INFINITY


def test_the_soft_limit_rises_as_far_as_the_ranks_want_and_the_hard_limit_allows() -> None:
    # the common start: soft 1,024, hard 524,288 (systemd): 8,000 ranks get their room
    assert room(8000, 1024, 524288) == (2 * 8000 + SPARE, None)
    assert room(8000, 1024, 12000) == (12000, None)  # all the hard limit allows is enough
    assert room(200, 1024, 524288) == (None, None)  # the soft limit already holds them
    assert room(8000, UNLIMITED, UNLIMITED) == (None, None)
    assert room(8000, 1024, UNLIMITED) == (2 * 8000 + SPARE, None)


def test_a_hard_limit_below_one_connection_a_rank_stops_the_launch_with_why() -> None:
    new, why = room(80000, 1024, 20000)
    assert new is None
    assert why == (f"80,000 control connections need at least {80000 + LEAST_SPARE:,} open "
                   "files in the launcher (one a rank; under --control-hubs one a host), and "
                   "this process may open 20,000")


def _child(code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_control_server_makes_its_room_or_says_which_limit_to_raise() -> None:
    got = _child("""
        import json, resource
        from ringtrain.errors import SetupError
        from ringtrain.launch.control.server import ControlServer
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4000))
        server = ControlServer(ranks=1000)
        raised = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        server.close()
        try:
            ControlServer(ranks=5000)
        except SetupError as err:
            print(json.dumps({"raised": raised, "error": err.message, "hint": err.hint}))
    """)
    assert got["raised"] == 2 * 1000 + SPARE
    assert got["error"] == (f"5,000 control connections need at least {5000 + LEAST_SPARE:,} "
                            "open files in the launcher (one a rank; under --control-hubs one a "
                            "host), and this process may open 4,000")
    assert "ulimit -Hn" in str(got["hint"])


def test_out_of_descriptors_the_listener_rests_and_takes_the_waiting_ranks_after() -> None:
    """The process's descriptors all taken (a limit set too tight for the job): the server's
    loop does not spin on the connections it cannot accept (before: a core at 100% until one
    closed); once descriptors are free again it takes them."""
    got = _child("""
        import json, os, resource, socket, time
        from ringtrain.launch.control.server import ControlServer
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))
        server = ControlServer(ranks=8)
        host, port = server.address.rsplit(":", 1)
        filler = []
        try:
            while True:
                filler.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        os.close(filler.pop())
        os.close(filler.pop())
        # two ranks connect (their ends take the two freed descriptors; the kernel completes
        # the handshake into the backlog), and the server has none left to accept them with
        waiting = [socket.socket() for _ in range(2)]
        for sock in waiting:
            sock.connect((host, int(port)))
        cpu0 = time.process_time()
        time.sleep(2.0)
        busy = time.process_time() - cpu0
        exhausted = server._listener.exhausted
        for fd in filler:
            os.close(fd)
        closed = 0
        for sock in waiting:  # taken once free, then closed unheard after the idle time
            sock.settimeout(10)
            try:
                closed += sock.recv(1) == b""
            except OSError:
                pass
        server.close()
        print(json.dumps({"busy": busy, "exhausted": exhausted, "closed": closed}))
    """)
    assert int(got["exhausted"]) >= 1, got  # it did run out while the ranks waited
    assert float(got["busy"]) < 0.5, got  # of 2 s: resting, not spinning
    assert got["closed"] == 2, got  # taken once descriptors were free (then idle: closed)


def test_under_hubs_a_connection_a_host_must_fit_and_a_rank_each_is_hoped_for() -> None:
    """--control-hubs: 80,000 ranks on 10,000 hosts hold 10,000 connections, so a hard limit
    of 20,000 runs them; room for the ranks' own connections too (one that finds no hub checks
    in directly) is made as far as the hard limit goes, never a refusal."""
    assert room(10_000, 1024, 20_000, hoped=80_000) == (20_000, None)
    assert room(10_000, 1024, -1, hoped=80_000) == (2 * 80_000 + SPARE, None)
    assert room(10, 1024, 4096, hoped=80) == (None, None)  # 2 x 80 + 512 fits in 1,024
    new, why = room(30_000, 1024, 20_000, hoped=80_000)
    assert new is None and why is not None and why.startswith("30,000 control connections")
