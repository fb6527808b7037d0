#!/usr/bin/env python3
"""Fault tests with real processes and real signals.

Each case starts ranks of tests/faults/fault_rank (or oslo-run), injects a
fault and checks that every surviving rank returns an error (never hangs)
within 2x the timeout, with a message that names the problem.
"""
import os
import signal
import socket
import subprocess
import sys
import time

RANK_BIN, OSLO_RUN = sys.argv[1], sys.argv[2]
TIMEOUT = 3.0  # the context's timeout_seconds in every case
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(rank, world, port, mode="loop", timeout=TIMEOUT):
    return subprocess.Popen([RANK_BIN, str(rank), str(world), str(port), str(timeout), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_line(p, prefix, limit):
    """Reads p's output until a line starting with prefix (or EOF/limit)."""
    end = time.time() + limit
    while time.time() < end:
        line = p.stdout.readline()
        if not line:
            return None
        if line.startswith(prefix):
            return line.strip()
    return None


def finish(p, limit):
    """Waits for p to exit within limit seconds; returns (code, RESULT line) or kills it."""
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None, "hung"
    result = [l for l in out.splitlines() if l.startswith("RESULT")]
    return p.returncode, (result[0] if result else out.strip()[-300:])


def case_sigkill():
    port = free_port()
    ps = [start(r, 3, port) for r in range(3)]
    for p in ps:
        check(wait_line(p, "READY", 60) is not None, "sigkill: rank did not get ready")
    t0 = time.time()
    ps[1].send_signal(signal.SIGKILL)
    for r in (0, 2):
        code, line = finish(ps[r], 2 * TIMEOUT + 5)
        elapsed = time.time() - t0
        check(code in (4, 5), f"sigkill: rank {r} exited {code}: {line}")
        check(elapsed <= 2 * TIMEOUT, f"sigkill: rank {r} took {elapsed:.2f}s > 2x timeout")
        print(f"sigkill: rank {r} -> {line} after {elapsed:.2f}s", flush=True)
    ps[1].wait()


def case_sigstop():
    port = free_port()
    ps = [start(r, 3, port) for r in range(3)]
    for p in ps:
        check(wait_line(p, "READY", 60) is not None, "sigstop: rank did not get ready")
    t0 = time.time()
    ps[1].send_signal(signal.SIGSTOP)
    try:
        for r in (0, 2):
            code, line = finish(ps[r], 2 * TIMEOUT + 5)
            elapsed = time.time() - t0
            check(code in (4, 5), f"sigstop: rank {r} exited {code}: {line}")
            check(elapsed <= 2 * TIMEOUT, f"sigstop: rank {r} took {elapsed:.2f}s")
            print(f"sigstop: rank {r} -> {line} after {elapsed:.2f}s", flush=True)
    finally:
        ps[1].send_signal(signal.SIGKILL)
        ps[1].send_signal(signal.SIGCONT)
        ps[1].wait()


def case_missing_rank():
    port = free_port()
    t0 = time.time()
    ps = [start(r, 3, port, "join") for r in range(2)]
    results = [finish(p, 2 * TIMEOUT + 5) for p in ps]
    elapsed = time.time() - t0
    for r, (code, line) in enumerate(results):
        # Rank 0 serves the rendezvous and times out; the others time out too,
        # or see the server go away when rank 0 gives up a moment earlier.
        check(code == 5 or (r > 0 and code == 4), f"missing rank: rank {r} exited {code}: {line}")
        print(f"missing rank: rank {r} -> {line}", flush=True)
    check("rank 2" in results[0][1] or "ranks 2" in results[0][1],
          f"missing rank: rank 0's message does not name rank 2: {results[0][1]}")
    check(elapsed <= 2 * TIMEOUT + 1, f"missing rank: took {elapsed:.2f}s")


def case_master_missing():
    # Hold the port bound but not listening, so no other test's server can
    # take it meanwhile and connections are refused as if rank 0 never came.
    with socket.socket() as hold:
        hold.bind(("127.0.0.1", 0))
        port = hold.getsockname()[1]
        code, line = finish(start(1, 2, port, "join"), 2 * TIMEOUT + 5)
    check(code == 5, f"master missing: exited {code}: {line}")
    check(f"127.0.0.1:{port}" in line, f"master missing: message does not name the address: {line}")
    print(f"master missing: {line}", flush=True)


def case_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, line = finish(start(0, 2, port, "join"), 2 * TIMEOUT + 5)
    check(code == 6, f"port in use: exited {code}: {line}")
    check(f"127.0.0.1:{port}" in line and "in use" in line,
          f"port in use: message does not name address and port: {line}")
    print(f"port in use: {line}", flush=True)


def case_abort():
    code, line = finish(start(0, 2, free_port(), "abort"), 2 * TIMEOUT + 5)
    check(code == 4, f"abort: exited {code}: {line}")
    secs = float(line.split()[2]) if line and line.startswith("RESULT") else 99
    check(secs < TIMEOUT, f"abort: took {secs}s, the watchdog fires at 0.5s")
    print(f"abort: {line}", flush=True)


def case_oslo_run_kill():
    """A rank of an oslo-run job SIGKILLed: the launcher stops the others and fails."""
    env = dict(os.environ)
    p = subprocess.Popen([OSLO_RUN, "--nproc-per-node", "3", "--", "sh", "-c",
                          f'echo $$ > /tmp/oslo-fault-$PPID-$RANK.pid; '
                          f'exec {RANK_BIN} $RANK $WORLD_SIZE $MASTER_PORT {TIMEOUT} loop'],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    ready = 0
    end = time.time() + 60
    while ready < 3 and time.time() < end:
        line = p.stdout.readline()
        if not line:
            break
        ready += line.startswith("READY")
    check(ready == 3, "oslo-run: ranks did not get ready")
    pidfile = f"/tmp/oslo-fault-{p.pid}-1.pid"
    victim = int(open(pidfile).read())
    os.unlink(pidfile)
    t0 = time.time()
    os.kill(victim, signal.SIGKILL)
    try:
        out, _ = p.communicate(timeout=2 * TIMEOUT + 5)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    elapsed = time.time() - t0
    check(p.returncode == 137, f"oslo-run exited {p.returncode}")
    check("rank 1" in out and "SIGKILL" in out, f"oslo-run did not name rank 1 and SIGKILL: {out[-400:]}")
    check(elapsed <= 2 * TIMEOUT, f"oslo-run took {elapsed:.2f}s")
    for r in (0, 2):
        f = f"/tmp/oslo-fault-{p.pid}-{r}.pid"
        if os.path.exists(f):
            pid = int(open(f).read())
            os.unlink(f)
            alive = True
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive = False
            check(not alive, f"oslo-run: rank {r} (pid {pid}) still alive")
    print(f"oslo-run kill: exit {p.returncode} after {elapsed:.2f}s", flush=True)


for case in (case_sigkill, case_sigstop, case_missing_rank, case_master_missing,
             case_port_in_use, case_abort, case_oslo_run_kill):
    case()
print(f"fault tests: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
