"""Resident memory of a training process over its steps.

Starts `transformer-mt train CONFIG` in a subprocess, samples its resident set size
(VmRSS, and the peak VmHWM) every --every seconds from /proc, and prints a table of RSS
against elapsed time plus the peak; `--json` adds a last-line summary. `--src DIR` runs
another checkout's package (for before/after comparisons on the same machine).

    python benchmarks/train_memory.py multi30k_en_de --steps 250
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def vm_kib(pid: int, field: str) -> int:
    """A VmXXX field of /proc/PID/status in KiB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="config file or preset (e.g. multi30k_en_de)")
    parser.add_argument("--steps", type=int, default=250, help="training steps (default 250)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--src", help="put this folder first on PYTHONPATH (another checkout's src/)")
    parser.add_argument("--json", action="store_true", help="last line: a JSON summary")
    parser.add_argument("overrides", nargs="*", help="--section.key=value overrides")
    args, extra = parser.parse_known_args()
    if sys.platform != "linux":
        parser.error("reads /proc: Linux only")
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "transformer_mt", "-q", "train", args.config, "--run", f"{tmp}/run",
                   "--no-progress", f"--train.max_steps={args.steps}", f"--train.valid_every={args.steps}",
                   "--train.max_seconds=0", *args.overrides, *extra]
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env)
        samples: list[tuple[float, int]] = []
        peak = 0
        while process.poll() is None:
            rss, hwm = vm_kib(process.pid, "VmRSS"), vm_kib(process.pid, "VmHWM")
            if rss:
                samples.append((time.perf_counter() - start, rss))
                peak = max(peak, hwm)
            time.sleep(args.every)
        if process.returncode != 0:
            print(f"training failed with exit code {process.returncode}", file=sys.stderr)
            return 1
    seconds = time.perf_counter() - start
    print(f"{'seconds':>8} {'RSS MiB':>9}")
    for t, rss in samples[:: max(1, len(samples) // 20)]:
        print(f"{t:8.0f} {rss / 1024:9.0f}")
    last_quarter = [rss for t, rss in samples if t >= 0.75 * seconds]
    summary = {"config": args.config, "steps": args.steps, "seconds": round(seconds, 1),
               "peak_rss_mib": round(peak / 1024), "final_quarter_max_rss_mib": round(max(last_quarter, default=0) / 1024),
               "src": args.src or "installed"}
    print(f"peak RSS {summary['peak_rss_mib']} MiB; {args.steps} steps in {seconds:.0f} s")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
