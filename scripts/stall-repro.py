#!/usr/bin/env python3
"""Start-up stall reproducer: starts brokers in waves while busy loops load every CPU, and for a
broker not ready within --timeout-s captures every thread's kernel stack (/proc/PID/task/*/stack),
wchan, a gdb backtrace of all threads, and its log.

    scripts/stall-repro.py --bin target/debug/borges --rounds 30 --parallel 6 --burners 4

Prints one line per round and a summary `stuck N of M starts` with the number of watchdog
signals the brokers logged (borges_runtime::watchdog at debug). Needs root for /proc/*/stack.
A stuck broker is released by the gdb attach (its io_uring_enter returns EINTR): its log then
shows how long it was stuck.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def burner():
    pid = os.fork()
    if pid == 0:
        os.nice(0)
        while True:
            pass
    return pid


def capture(pid, out):
    lines = []
    task_dir = f"/proc/{pid}/task"
    for tid in sorted(os.listdir(task_dir), key=int):
        def read(name):
            try:
                with open(f"{task_dir}/{tid}/{name}") as f:
                    return f.read().strip()
            except OSError as e:
                return f"<{e}>"
        lines.append(f"--- thread {tid} {read('comm')} wchan={read('wchan')}")
        lines.append(read("stack"))
    fd_dir = f"/proc/{pid}/fd"
    for fd in sorted(os.listdir(fd_dir), key=int):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if "io_uring" in target or "eventfd" in target:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    info = f.read()
            except OSError as e:
                info = f"<{e}>"
            lines.append(f"=== fd {fd} {target}")
            lines.append(info)
    if shutil.which("gdb"):
        try:
            bt = subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            bt = "<gdb timed out>"
        lines.append("=== gdb ===")
        lines.append(bt)
    with open(out, "w") as f:
        f.write("\n".join(lines))


def start(binary, cores, extra_env):
    tmp = tempfile.mkdtemp(prefix="borges-stall-")
    port = free_port()
    ready = os.path.join(tmp, "ready.json")
    log = open(os.path.join(tmp, "broker.log"), "w")
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "info,borges_broker::server=debug,borges_storage=debug,"
                   "borges_runtime=debug")
    env.update(extra_env)
    proc = subprocess.Popen(
        [binary, "broker", "--data-dir", os.path.join(tmp, "data"), "--listen",
         f"127.0.0.1:{port}", "--core-port-base", "0", "--metrics-listen",
         f"127.0.0.1:{free_port()}", "--cores", str(cores), "--ready-file", ready],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    return {"proc": proc, "tmp": tmp, "ready": ready, "started": time.time()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/borges")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--burners", type=int, default=4)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=20.0)
    ap.add_argument("--keep", default="/tmp/borges-stalls")
    args = ap.parse_args()
    os.makedirs(args.keep, exist_ok=True)
    burners = [burner() for _ in range(args.burners)]
    stuck = total = signalled = 0
    slowest = 0.0
    try:
        for rnd in range(args.rounds):
            brokers = [start(args.bin, args.cores, {}) for _ in range(args.parallel)]
            round_stuck = 0
            for b in brokers:
                deadline = b["started"] + args.timeout_s
                while True:
                    if os.path.exists(b["ready"]):
                        try:
                            json.load(open(b["ready"]))
                            slowest = max(slowest, time.time() - b["started"])
                            break
                        except ValueError:
                            pass
                    if b["proc"].poll() is not None:
                        name = os.path.join(args.keep, f"exited-{rnd}-{b['proc'].pid}.log")
                        shutil.copy(os.path.join(b["tmp"], "broker.log"), name)
                        print(f"broker exited {b['proc'].returncode}: {name}", flush=True)
                        break
                    if time.time() > deadline:
                        round_stuck += 1
                        name = os.path.join(args.keep, f"stuck-{rnd}-{b['proc'].pid}")
                        capture(b["proc"].pid, name + ".stacks")
                        shutil.copy(os.path.join(b["tmp"], "broker.log"), name + ".log")
                        print(f"STUCK pid {b['proc'].pid}: {name}.stacks", flush=True)
                        break
                    time.sleep(0.02)
            for b in brokers:
                b["proc"].send_signal(signal.SIGKILL)
                b["proc"].wait()
                with open(os.path.join(b["tmp"], "broker.log"), errors="replace") as f:
                    signalled += sum("watchdog: executor made no progress" in line for line in f)
                shutil.rmtree(b["tmp"], ignore_errors=True)
            total += len(brokers)
            stuck += round_stuck
            print(f"round {rnd}: stuck {round_stuck} of {len(brokers)} "
                  f"(total {stuck} of {total}, slowest ready {slowest:.1f} s, "
                  f"watchdog signals logged {signalled})", flush=True)
    finally:
        for pid in burners:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    print(f"stuck {stuck} of {total} starts; watchdog signals logged {signalled}")
    return 1 if stuck else 0


if __name__ == "__main__":
    sys.exit(main())
