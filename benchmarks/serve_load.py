"""Load test of `transformer-mt serve`: N concurrent clients for S seconds on loopback.

Starts `transformer-mt serve RUN` on 127.0.0.1 and a free port (in its own process, as a
user would), waits for /api/health, then every client sends one sentence per request to
/api/translate over a kept-alive connection, as fast as answers come back, until the time
is up. Prints requests/s, p50/p99 latency and the error count (anything but a 200 answer
with a translation); with --json the last stdout line is

    {"clients": N, "seconds": F, "requests": N, "errors": N, "p50_ms": F, "p99_ms": F}

Traffic goes to 127.0.0.1 only; --url accepts a loopback address and nothing else.

    python benchmarks/serve_load.py runs/demo               # 16 clients, 30 s
    python benchmarks/serve_load.py runs/demo --attention   # also return cross-attention
    python benchmarks/serve_load.py                         # trains a tiny run first (~20 s)
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from transformer_mt.server.app import is_loopback

FALLBACK_SENTENCES = ["w1 w2 w3", "w4 w5 w6 w7", "w8 w9", "w3 w1 w4 w1 w5 w9 w2 w6"]


@dataclass
class Tally:
    """What the clients saw, merged under a lock."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float | None, error: str = "") -> None:
        with self.lock:
            if seconds is None:
                self.errors += 1
                self.first_error = self.first_error or error
            else:
                self.latencies.append(seconds)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def run_sentences(run: Path, limit: int = 200) -> list[str]:
    """Source sentences for requests: the run's test (or validation) text, else a few
    copy-task lines."""
    for name in ("test.src", "valid.src"):
        path = run / "data" / name
        if path.is_file():
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            if lines:
                return lines[:limit]
    return FALLBACK_SENTENCES


def client(host: str, port: int, sentences: list[str], offset: int, body_extra: dict,
           deadline: float, tally: Tally) -> None:
    """One client: requests back to back until `deadline`, reconnecting after an error."""
    connection = http.client.HTTPConnection(host, port, timeout=60)
    index = offset
    while time.monotonic() < deadline:
        body = json.dumps({"text": sentences[index % len(sentences)], **body_extra})
        index += 1
        start = time.perf_counter()
        try:
            connection.request("POST", "/api/translate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
            if response.status != 200 or "translations" not in json.loads(payload):
                tally.add(None, f"HTTP {response.status}: {payload[:200]!r}")
                continue
            tally.add(time.perf_counter() - start)
        except (OSError, http.client.HTTPException, ValueError) as err:
            tally.add(None, f"{type(err).__name__}: {err}")
            connection.close()
            connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(host: str, port: int, process: subprocess.Popen | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"the server exited with code {process.returncode}")
        try:
            connection = http.client.HTTPConnection(host, port, timeout=5)
            connection.request("GET", "/api/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"no answer from http://{host}:{port}/api/health after {timeout:.0f} s")


def tiny_run(folder: Path) -> Path:
    """Train the `tiny` preset on the copy task for a few seconds (no run given)."""
    from transformer_mt.common.config import load_config
    from transformer_mt.training import fit

    run = folder / "tiny"
    cfg = load_config("tiny", ["--train.max_steps=100", "--train.valid_every=100"])
    print(f"no RUN given: training a tiny copy-task run in {run}", file=sys.stderr)
    fit(cfg, run, progress=False)
    return run


def load(host: str, port: int, args: argparse.Namespace, sentences: list[str]) -> dict:
    extra = {"attention": args.attention} | ({"beam": args.beam} if args.beam else {})
    tally = Tally()
    client(host, port, sentences, 0, extra, time.monotonic() + 1.0, Tally())  # warm-up
    deadline = time.monotonic() + args.seconds
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(host, port, sentences, i * 7, extra, deadline, tally))
               for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if tally.first_error:
        print(f"first error: {tally.first_error}", file=sys.stderr)
    return {
        "clients": args.clients,
        "seconds": round(elapsed, 2),
        "requests": len(tally.latencies),
        "errors": tally.errors,
        "p50_ms": round(1000 * percentile(tally.latencies, 50), 2),
        "p99_ms": round(1000 * percentile(tally.latencies, 99), 2),
    }


def print_table(result: dict, what: str) -> None:
    rate = result["requests"] / result["seconds"] if result["seconds"] else 0.0
    print(f"serve load test: {what}")
    print(f"{'clients':>8} {'seconds':>8} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    print(f"{result['clients']:>8} {result['seconds']:>8.1f} {result['requests']:>9} {rate:>8.1f} "
          f"{result['p50_ms']:>8.1f} {result['p99_ms']:>8.1f} {result['errors']:>7}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", help="run directory to serve (default: train a tiny one)")
    parser.add_argument("--url", help="load an already running server instead (loopback only)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default: 16)")
    parser.add_argument("--seconds", type=float, default=30.0, help="duration (default: 30)")
    parser.add_argument("--attention", action="store_true", help="ask for cross-attention too")
    parser.add_argument("--beam", type=int, default=0, help="beam size per request (default: the run's)")
    parser.add_argument("--json", action="store_true", help="last stdout line: the result as JSON")
    args = parser.parse_args()
    if args.clients < 1 or args.seconds <= 0:
        parser.error("--clients and --seconds must be positive")
    with tempfile.TemporaryDirectory() as tmp:
        process = None
        if args.url:
            parsed = urlparse(args.url)
            host, port = parsed.hostname or "", parsed.port or 80
            if not is_loopback(host):
                parser.error(f"--url must be a loopback address (127.0.0.1, localhost, ::1), not {host!r}")
            sentences = run_sentences(Path(args.run)) if args.run else FALLBACK_SENTENCES
        else:
            run = Path(args.run) if args.run else tiny_run(Path(tmp))
            host, port = "127.0.0.1", free_port()
            command = [sys.executable, "-m", "transformer_mt", "-q", "serve", str(run), "--host", host,
                       "--port", str(port), "--device", "cpu", "--max-beam", "16"]
            process = subprocess.Popen(command)
            sentences = run_sentences(run)
        try:
            wait_healthy(host, port, process)
            result = load(host, port, args, sentences)
        finally:
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
    what = f"{args.run or args.url or 'tiny run'}, {len(sentences)} distinct sentences, " \
           f"attention {'on' if args.attention else 'off'}"
    print_table(result, what)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
