"""The learner's file runs in a child process: whatever it does on import (prints, exits,
loops, crashes the interpreter) cannot take the command down, and no bytecode of theirs is
written (PYTHONDONTWRITEBYTECODE). The child reports over a pipe of its own, one JSON object a
line: {"imported": true} once their file is imported, then {"report", "text", "failed"} or
{"error"}; their prints go to a log the parent shows a line of only when the child dies.

    python -m transformer_mt.check.child FILE NAME QUICK FD   (run by `check_in_child`)"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from transformer_mt.common.errors import UserError

IMPORT_SECONDS = 20.0  # their file's top level: a model's definitions take well under a second
TOTAL_SECONDS = 300.0  # every check, learns_copy's ~30 s of training included


def main(argv: list[str]) -> None:
    """The child: import, build, check; every message to the parent's pipe."""
    path, name, quick, fd = Path(argv[0]), argv[1] or None, argv[2] == "1", int(argv[3])
    pipe = os.fdopen(fd, "w", buffering=1)
    sys.stdout = sys.stderr  # their prints go to the log, not the pipe
    # imported here: the parent imports this module for check_in_child alone, and needs no torch
    from transformer_mt.learner.loading import load_file
    from transformer_mt.check.report import run_checks
    from transformer_mt.check.subject import subject_of

    try:
        module = load_file(path, IMPORT_SECONDS)
        pipe.write(json.dumps({"imported": True}) + "\n")
        report = run_checks(subject_of(module, path, name), quick)
        message: dict[str, Any] = {"report": report.to_dict(), "text": report.text(), "failed": report.failed}
    except UserError as err:
        message = {"error": str(err)}
    pipe.write(json.dumps(message) + "\n")
    pipe.close()


def read_messages(pipe: int, process: subprocess.Popen, started: float) -> list[dict[str, Any]]:
    """The child's messages until it closes the pipe; UserError when it overruns its time."""
    selector = selectors.DefaultSelector()
    selector.register(pipe, selectors.EVENT_READ)
    data = b""
    while True:
        imported = b'"imported"' in data
        limit = TOTAL_SECONDS if imported else IMPORT_SECONDS + 10
        left = started + limit - time.monotonic()
        if left <= 0:
            os.killpg(process.pid, signal.SIGKILL)
            raise UserError("the check ran for more than " + (f"{TOTAL_SECONDS:.0f} s: the model is too slow at the "
                            "check's sizes" if imported else f"{IMPORT_SECONDS:.0f} s importing the file: training, "
                            "downloads or input() at the top level belong under `if __name__ == \"__main__\":`"))
        if selector.select(timeout=min(left, 1.0)):
            chunk = os.read(pipe, 1 << 16)
            if not chunk:
                return [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            data += chunk


def check_in_child(path: Path, name: str | None, quick: bool) -> dict[str, Any]:
    """{"report", "text", "failed"} of `transformer-mt check`, its work done in a child."""
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path} is a folder, not a Python file")
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "transformer_mt.check.child", str(path), name or "", "1" if quick else "0",
               str(write_end)]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, pass_fds=(write_end,), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        os.close(write_end)
        try:
            messages = read_messages(read_end, process, time.monotonic())
        finally:
            os.close(read_end)
            process.wait()
        final = next((m for m in reversed(messages) if "imported" not in m), None)
        if final is None:
            log.seek(0)
            lines = log.read().decode(errors="replace").strip().splitlines()
            raise UserError(f"{path}: the check's process ended (exit code {process.returncode}) before it reported"
                            + (f"; its last line: {lines[-1].strip()}" if lines else ""))
    if "error" in final:
        raise UserError(final["error"])
    return final


if __name__ == "__main__":
    main(sys.argv[1:])
