#!/usr/bin/env python3
"""`scripts/run-tests.py [CARGO TEST ARGUMENTS]`: builds the test binaries `cargo test` would
run with these arguments, then runs them side by side instead of one after another.

Why: most of a test binary's time is waiting (on a deadline, a server, a child process), not
computing, so running one binary while another waits shortens `make check` and `make test`
on two cores without making any test shorter. Each binary is run as `cargo test` runs it:
in its package's folder, with `CARGO_MANIFEST_DIR` and `CARGO` set, its output printed whole
when it ends (never interleaved) with cargo's own lines around it, so a failure reads as it
would under `cargo test` and the summary lines of the callers count it the same way.

A binary starts as soon as cargo has built it, while cargo builds the rest: after a change to
one crate, the binaries that do not depend on it run during the build instead of after it.
Cargo names the binaries already up to date in one burst at its start: the first starts once
that burst is over (no new one for `SETTLE` seconds), so that they are ordered together. Of
the binaries built and waiting, the longest starts first (their last durations are kept in
`$SLUICE_HOME/test-durations.json`); at most `SLUICE_TEST_JOBS` run at once (default 2: the
end-to-end binary is the long pole and every other fits beside it one at a time, while a third
at once overloaded the one local LLM the tests share: a first token past its 30-s timeout).
Arguments after `--` go to every binary.
Exits non-zero if the build or any binary failed.
"""
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

SETTLE = 0.3


def main() -> int:
    args = sys.argv[1:]
    binary_args = []
    if "--" in args:
        cut = args.index("--")
        args, binary_args = args[:cut], args[cut + 1 :]
    cargo = os.environ.get("CARGO", "cargo")
    build = subprocess.Popen(
        [cargo, "test", "--no-run", "--message-format=json-render-diagnostics", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    home = os.environ.get("SLUICE_HOME") or os.path.expanduser("~/.cache/sluice")
    record = os.path.join(home, "test-durations.json")
    try:
        with open(record) as f:
            durations = json.load(f)
    except (OSError, ValueError):
        durations = {}
    key = lambda b: os.path.basename(b[0]).rsplit("-", 1)[0] + " " + b[2]

    # Built binaries not yet started, and whether cargo has finished building.
    ready = threading.Condition()
    waiting = []
    built = [False]
    arrived = [time.monotonic()]

    def read_build():
        for line in build.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (
                message.get("reason") == "compiler-artifact"
                and message.get("profile", {}).get("test")
                and message.get("executable")
            ):
                target = message["target"]
                package = os.path.dirname(message["manifest_path"])
                label = target["src_path"]
                label = (
                    f"unittests {os.path.relpath(label, package)}"
                    if target["kind"] != ["test"]
                    else os.path.relpath(label, package)
                )
                with ready:
                    waiting.append((message["executable"], package, label))
                    arrived[0] = time.monotonic()
                    ready.notify()
        code = build.wait()
        with ready:
            if code != 0:
                waiting.clear()  # a build that failed starts nothing more
            built[0] = True
            ready.notify_all()

    lock = threading.Lock()
    failed = []

    def run(binary):
        executable, package, label = binary
        env = dict(os.environ, CARGO_MANIFEST_DIR=package, CARGO=cargo)
        started = time.monotonic()
        done = subprocess.run(
            [executable, *binary_args],
            cwd=package,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        took = time.monotonic() - started
        with lock:
            durations[key(binary)] = round(took, 2)
            print(f"     Running {label} ({executable}, {took:.1f} s)")
            sys.stdout.write(done.stdout)
            if done.returncode != 0:
                failed.append(label)
                print(f"error: test failed, to rerun pass `{' '.join(args)}` ({label})")
            sys.stdout.flush()

    def worker():
        while True:
            with ready:
                while True:
                    if not waiting and built[0]:
                        return
                    quiet = time.monotonic() - arrived[0]
                    if waiting and (built[0] or quiet >= SETTLE):
                        break
                    ready.wait(SETTLE - quiet if waiting else None)
                waiting.sort(key=lambda b: -durations.get(key(b), 0.0))
                binary = waiting.pop(0)
            run(binary)

    jobs = int(os.environ.get("SLUICE_TEST_JOBS", "2"))
    reader = threading.Thread(target=read_build)
    reader.start()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        workers = [pool.submit(worker) for _ in range(jobs)]
        for w in workers:
            w.result()
    reader.join()
    if build.returncode != 0:
        return build.returncode
    os.makedirs(home, exist_ok=True)
    with open(record, "w") as f:
        json.dump(durations, f, indent=1, sort_keys=True)
    if failed:
        print(f"error: {len(failed)} target(s) failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
