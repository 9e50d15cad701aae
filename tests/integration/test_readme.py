"""The README as a newcomer follows it: every command of its bash blocks, in the README's order,
in one scratch folder that holds the files the README tells a user to bring (train.en, test.de,
their Annotated-Transformer checkpoint, my.txt, ...). A command fails the test if it exits
non-zero, prints a traceback, or changes a file the user brought (a translation written over a
reference, say).

Each command runs as printed, test-sized: the trainings get a few steps and a smaller model
appended (SMALLER). The commands a test cannot run say why in NOT_RUN (a server that runs until
stopped, the network); they are tested where named."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_mt.data.toy_corpora import number_line, numbers_corpus

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# A command that starts with one of these is not run, for the reason given.
NOT_RUN = {
    "make test": "the suite itself",
    ". .venv/bin/activate": "the test puts the package's scripts on PATH instead",
    "transformer-mt serve": "a server runs until stopped (tests/integration/test_server.py serves runs)",
    "pip install": "an install; the test's environment has the extras",
    "hf upload": "an upload to the Hub, online",
    "transformer-mt import marian Helsinki-NLP": "a download from the Hub, online (test_marian_import.py imports a folder)",
    "transformer-mt import gpt2 path/to/gpt2": "a GPT-2 folder of the user's (test_gpt2_import.py imports one)",
}
# The command the README names for a `make` target.
SUBSTITUTED = {"make demo": "transformer-mt demo --out runs/demo"}
TRAIN_SMALL = ["--train.max_steps=8", "--train.valid_every=8", "--train.log_every=4", "--data.vocab_size=120"]
# Appended to every command that starts with the key: a few steps of a smaller model.
SMALLER = {
    "transformer-mt demo --lm": [*TRAIN_SMALL, "--data.task_size=300"],
    "transformer-mt demo": [*TRAIN_SMALL, "--data.task_size=300", "--data.vocab_size=200"],
    "transformer-mt train small": [*TRAIN_SMALL, "--model.n_layers=1", "--model.d_model=64", "--model.d_ff=128"],
    "transformer-mt train lm_small": [*TRAIN_SMALL, "--model.n_layers=1", "--model.d_model=64", "--model.d_ff=128",
                                      "--data.block_size=32"],
    "transformer-mt plot heads": ["--sentences", "3"],
}


def readme_commands(text: str) -> list[str]:
    """The commands of the README's bash blocks in order: continuation lines joined, comments
    (a `#` after a space) removed."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"(^|\s)#.*$", "", command).strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def annotated_checkpoint(folder: Path, german: list[str], english: list[str]) -> None:
    """The study notes' files: a checkpoint of the Annotated Transformer (test_annotated_import's
    reference implementation) and the word vocabularies it was trained with."""
    from test_annotated_import import Reference, word_vocab

    src_vocab, tgt_vocab = word_vocab(german + ["Ein Mann fährt Fahrrad ."]), word_vocab(english)
    torch.manual_seed(0)
    model = Reference(len(src_vocab), len(tgt_vocab))
    (folder / "model").mkdir()
    torch.save(model.state_dict(), folder / "model" / "transformer_wmt16.pth")
    (folder / "src_vocab.json").write_text(json.dumps(src_vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tgt_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False), encoding="utf-8")


def users_files(folder: Path) -> list[Path]:
    """What the README asks a user to bring, written into `folder` (small)."""
    corpus = numbers_corpus(300, seed=3)
    for split, pairs in (("train", corpus["train"]), ("valid", corpus["valid"][:20]), ("test", corpus["test"][:20])):
        write_lines(folder / f"{split}.en", [en for en, _ in pairs])
        write_lines(folder / f"{split}.de", [de for _, de in pairs])
    numbers = random.Random(1).sample(range(1, 100_000), 260)
    for name, part in (("my.txt", numbers[:200]), ("my_valid.txt", numbers[200:230]), ("test.txt", numbers[230:])):
        write_lines(folder / name, [number_line(n) for n in part])
    annotated_checkpoint(folder, [de for _, de in corpus["train"]], [en for en, _ in corpus["train"]])
    return sorted(p for p in folder.rglob("*") if p.is_file())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_readme_parser_finds_each_command_whole() -> None:
    text = "```bash\ntransformer-mt train small --run r \\\n    --data.x=1   # note\n# only a comment\n```\n"
    assert readme_commands(text) == ["transformer-mt train small --run r --data.x=1"]


def test_every_readme_command_runs_in_order_and_leaves_the_users_files_alone(tmp_path: Path) -> None:
    """The commands run in tests/integration/readme_shell.py, which imports the toolkit once and
    forks a process per command (a subprocess each cost the test ~1.5 s of imports per command)."""
    brought = {path: digest(path) for path in users_files(tmp_path)}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    shell = subprocess.Popen([sys.executable, str(Path(__file__).with_name("readme_shell.py")), str(tmp_path)],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ran = []
    try:
        for command in readme_commands(README.read_text(encoding="utf-8")):
            if any(command.startswith(prefix) for prefix in NOT_RUN):
                continue
            command = SUBSTITUTED.get(command, command)
            extra = next((args for prefix, args in SMALLER.items() if command.startswith(prefix)), [])
            line = " ".join([command, *extra])
            shell.stdin.write(line + "\n")
            shell.stdin.flush()
            answer = shell.stdout.readline()
            assert answer, f"{line}: readme_shell.py ended without answering (its stderr is above)"
            done = json.loads(answer)
            assert done["returncode"] == 0, f"{line}\n{done['stderr'][-2000:]}"
            assert "Traceback" not in done["stderr"], f"{line}\n{done['stderr'][-2000:]}"
            changed = [str(path.relative_to(tmp_path)) for path, before in brought.items() if digest(path) != before]
            assert not changed, f"{line} changed the user's {', '.join(changed)}"
            ran.append(command)
    finally:
        shell.stdin.close()
        shell.wait(timeout=60)
    assert len(ran) >= 25 and any(c.startswith("transformer-mt evaluate runs/en-de") for c in ran)
