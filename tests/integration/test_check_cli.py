"""`transformer-mt check` end to end: the one test that starts the command (the learner's
file in a child process, nothing written beside it), and learns_copy, the copy task trained on
the learner's model: a correct one learns it, one that never reads its source does not."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from check_cases.cases import BUGS, HERE
from transformer_mt.check import copy_task
from transformer_mt.check.report import run_checks
from transformer_mt.check.subject import open_subject


def test_the_command_checks_a_file_in_a_child_process_and_writes_nothing_beside_it(tmp_path: Path) -> None:
    """The tutorial model importing its mask functions from a file of its own, as tutorials
    split them: both are imported in the child, and no __pycache__ appears."""
    source = (HERE / "tutorial.py").read_text(encoding="utf-8")
    masks_at = source.index("def nopeak_mask(")
    (tmp_path / "batch.py").write_text("import torch\n\n\n" + source[masks_at:], encoding="utf-8")
    (tmp_path / "model.py").write_text(source[:masks_at] + "from batch import create_masks, nopeak_mask  # noqa\n"
                                       "print('imported')\n", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run([sys.executable, "-m", "transformer_mt", "check", str(tmp_path / "model.py:get_model"),
                           "--quick", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["model"]["convention"] == "tutorial"
    checks = {c["id"]: c for c in found["checks"]}
    assert "create_masks" in checks["mask"]["message"] and checks["mask"]["status"] == "pass"
    assert {c["status"] for c in checks.values()} == {"pass", "not_checked"}
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_correct_model_learns_to_copy_and_passes_as_soon_as_it_does() -> None:
    """The one run of learns_copy to a pass (~10 s): 400 steps, the first decoding at which the
    tutorial's file copies 90% of the held-out sequences."""
    result = run_checks(open_subject(HERE / "tutorial.py"), only=["learns_copy"]).results[0]
    assert result.status == "pass", result.message
    steps = int(re.search(r"after (\d+) steps", result.message)[1])
    assert steps < copy_task.STEPS and steps % copy_task.EVALUATE_EVERY == 0


def test_a_model_that_never_reads_its_source_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hundred steps are enough to fail: without the source there is nothing to copy from."""
    monkeypatch.setattr(copy_task, "STEPS", 100)
    case = next(case for case in BUGS if case.name == "decoder_attends_to_itself")
    result = run_checks(open_subject(case.write(tmp_path)), only=["learns_copy"]).results[0]
    assert result.status == "fail" and "held-out sequences exactly" in result.message
