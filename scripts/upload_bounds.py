#!/usr/bin/env python3
"""What a hostile upload costs the server: each case against a `sluice serve` of its own
(so that its peak RSS is the case's), measured from /proc — CPU seconds the server spent from
the request to when it is quiet again, its peak RSS above what it held before, the status and
the time to the response.

    scripts/upload_bounds.py [--sluice PATH] [--out FILE]

The files are made here: a PDF of about a megabyte whose one content stream inflates to a
gibibyte of spaces, HTML nested a million deep (sent ten times in a row), a component with one
function of 2,000 locals and 16,000 nested blocks, a megabyte of text sent by a client that
gives up after 3 s, and one "word" of a million characters; then /healthz's latency while a
megabyte of text is ingested. The record of a run is in docs/measurements/."""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import zlib

TICK = os.sysconf("SC_CLK_TCK")


def bomb_pdf() -> bytes:
    stream = zlib.compressobj(9)
    spaces = b" " * (1 << 20)
    data = b"".join(stream.compress(spaces) for _ in range(1024)) + stream.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream",
    ]
    out, offsets = b"%PDF-1.5\n", []
    for i, o in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def costly_component() -> bytes:
    blocks = 16_000
    body = "(block local.get 0 br_if 0 " * blocks + ")" * blocks
    return f"(component (core module (func (param i32) {'(local i32)' * 2000} {body})))".encode()


def words(size: int) -> bytes:
    vocabulary = ["card", "fee", "transfer", "account", "limit", "branch", "loan", "rate"]
    out, i, length = [], 0, 0
    while length < size:
        word = vocabulary[i % len(vocabulary)] + ("." if i % 11 == 10 else "")
        out.append(word)
        length += len(word) + 1
        i += 1
    return " ".join(out).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def send(port, method, path, body, content_type, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request(method, path, body=body, headers={"content-type": content_type})
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
        return response.status, text[:160], time.monotonic() - started
    except (TimeoutError, socket.timeout):
        return "client gave up", "", time.monotonic() - started
    finally:
        conn.close()


def quiet(pid: int, limit: float = 600.0) -> float:
    """Waits until the server has used under 20 ms of CPU in half a second; its CPU then."""
    started = time.monotonic()
    last = cpu(pid)
    while time.monotonic() - started < limit:
        time.sleep(0.5)
        now = cpu(pid)
        if now - last < 0.02:
            return now
        last = now
    return cpu(pid)


def start(sluice):
    """A `sluice serve` of its own (a fresh data folder, no LLM), listening: it and its port."""
    port = free_port()
    env = dict(os.environ, SLUICE_ADDR=f"127.0.0.1:{port}", SLUICE_DATA_DIR=tempfile.mkdtemp(),
               SLUICE_LLM_URL="http://127.0.0.1:9/v1", RUST_LOG="error")
    server = subprocess.Popen([sluice, "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    time.sleep(1.0)
    return server, port


def run_case(sluice, name, requests):
    server, port = start(sluice)
    try:
        quiet(server.pid)
        cpu0, rss0 = cpu(server.pid), rss_mb(server.pid)
        replies = [send(port, *r) for r in requests]
        cpu1 = quiet(server.pid)
        row = {
            "case": name,
            "statuses": [r[0] for r in replies],
            "first_reply": replies[0][1],
            "response_s": round(max(r[2] for r in replies), 2),
            "server_cpu_s": round(cpu1 - cpu0, 2),
            "peak_rss_above_baseline_mb": round(peak_mb(server.pid) - rss0, 1),
            "rss_after_mb": round(rss_mb(server.pid), 1),
        }
        print(json.dumps(row), flush=True)
        return row
    finally:
        server.terminate()
        server.wait()


def healthz_during_ingest(sluice):
    """/healthz polled every 20 ms while a 1 MiB text is ingested: its latency percentiles."""
    import threading
    server, port = start(sluice)
    try:
        done = threading.Event()
        def ingest():
            send(port, "POST", "/v1/documents?filename=words.txt", words(1 << 20), "text/plain", 600)
            done.set()
        threading.Thread(target=ingest, daemon=True).start()
        times = []
        while not done.is_set():
            status, _, took = send(port, "GET", "/healthz", None, "text/plain", 30)
            if status == 200:
                times.append(took * 1000)
            time.sleep(0.02)
        times.sort()
        pick = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 1) if times else None
        row = {"case": "/healthz during a 1 MiB ingest", "probes": len(times),
               "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(times[-1], 1) if times else None}
        print(json.dumps(row), flush=True)
        return row
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    home = os.environ.get("SLUICE_HOME", os.path.expanduser("~/.cache/sluice"))
    parser.add_argument("--sluice", default=os.path.join(home, "target/debug/sluice"))
    parser.add_argument("--out")
    args = parser.parse_args()
    cases = [
        ("PDF inflating to 1 GiB", [("POST", "/v1/documents?filename=bomb.pdf", bomb_pdf(), "application/pdf", 120)]),
        ("HTML nested 10^6 deep, 10 in a row", [("POST", "/v1/documents?filename=deep.html", b"<div>" * 1_000_000, "text/html", 120)] * 10),
        ("component, 2,000 locals x 16,000 nested blocks", [("PUT", "/v1/components/rerank", costly_component(), "application/wasm", 120)]),
        ("1 MiB of text, client gives up after 3 s", [("POST", "/v1/documents?filename=words.txt", words(1 << 20), "text/plain", 3)]),
        ("one word of 2^20 characters", [("POST", "/v1/documents?filename=word.txt", b"x" * (1 << 20), "text/plain", 120)]),
    ]
    rows = [run_case(args.sluice, name, requests) for name, requests in cases]
    rows.append(healthz_during_ingest(args.sluice))
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
