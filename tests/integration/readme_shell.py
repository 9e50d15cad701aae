"""A shell for the README's commands that imports the toolkit once: each `transformer-mt ...`
command (alone, or fed by `echo TEXT |` or `cat FILE |`) runs in a process forked from this one,
with its own stdin, stdout and stderr, as a shell would start it, but without the second or two
each new Python process spends importing torch. Any other command line goes to /bin/sh.

    python readme_shell.py FOLDER     # then one command per line on stdin; one JSON line back each

Each answer: {"returncode": int, "stderr": str}. A command still running after TIMEOUT seconds
is killed (returncode -9). Forking after importing torch is safe on Linux (nothing computed
yet, no threads started); elsewhere every line goes to /bin/sh."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

TIMEOUT = 300.0


def parse(line: str) -> tuple[bytes | str | None, list[str]] | None:
    """(what stdin gets: bytes, the path of a file, or None; the arguments after
    `transformer-mt`), or None for a line this shell leaves to /bin/sh."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    feed: bytes | str | None = None
    if "|" in words:
        left, right = words[: words.index("|")], words[words.index("|") + 1:]
        if len(left) != 2 or left[0] not in ("echo", "cat"):
            return None
        feed = (left[1] + "\n").encode() if left[0] == "echo" else left[1]
        words = right
    if not words or words[0] != "transformer-mt" or any(w in words for w in ("|", ">", "<", "&&", ";")):
        return None
    return feed, words[1:]


def child(folder: Path, feed: bytes | str | None, argv: list[str], err: int) -> None:
    """In the forked process: stdin from `feed`, stdout to nowhere, stderr to `err`; run the
    command; exit with its code (a traceback, as Python prints it, and 1 on an exception)."""
    os.chdir(folder)
    if isinstance(feed, bytes):
        stdin = tempfile.TemporaryFile()
        stdin.write(feed)
        stdin.seek(0)
        os.dup2(stdin.fileno(), 0)
    else:
        os.dup2(os.open(feed if feed is not None else os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.dup2(err, 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - fresh objects: none of the shell's buffers
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    code = 1
    try:
        from transformer_mt.cli import main

        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - a traceback, as `python` prints it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(folder: Path, line: str) -> dict:
    """Run one README line in `folder`: its exit code and what it printed on stderr."""
    parsed = parse(line) if sys.platform == "linux" else None
    if parsed is None:
        done = subprocess.run(line, shell=True, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=TIMEOUT)
        return {"returncode": done.returncode, "stderr": done.stderr}
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            child(folder, *parsed, err.fileno())
        deadline = time.monotonic() + TIMEOUT
        while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                ended = os.waitpid(pid, 0)
                break
            time.sleep(0.02)
        err.seek(0)
        return {"returncode": os.waitstatus_to_exitcode(ended[1]), "stderr": err.read().decode("utf-8", "replace")}


def main() -> None:
    import torch._dynamo  # noqa: F401 - imported once, before any fork: torch's optimizers import it (~1.7 s)
    import transformer_mt.cli  # noqa: F401 - what most commands use
    import transformer_mt.common.evaluation  # noqa: F401
    import transformer_mt.inference.translator  # noqa: F401
    import transformer_mt.training  # noqa: F401
    import transformer_mt.viz.attention  # noqa: F401 - matplotlib, for the plot commands
    import transformer_mt.viz.heads  # noqa: F401
    import transformer_mt.viz.mechanisms  # noqa: F401

    folder = Path(sys.argv[1])
    for line in sys.stdin:
        print(json.dumps(run(folder, line.strip())), flush=True)


if __name__ == "__main__":
    main()
