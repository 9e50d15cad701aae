"""`transformer-mt check`'s parts, in this process: a learner's file that cannot be checked is one
line naming the file, its line and what to do (UserError, exit code 2); the builder's
arguments; the masks; the reference computations against the paper's formulas and this
package's own model/; the report's JSON shape and the command's exit codes."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
import torch

from check_cases.cases import HERE
from transformer_mt.check.attention import PAPER, Form, multi_head
from transformer_mt.learner.building import Options, Sizes, arguments
from transformer_mt.learner.masks import kit_masks, may_attend
from transformer_mt.check.positions import sinusoid_slips
from transformer_mt.check.report import CHECKS, run_checks
from transformer_mt.check.subject import open_subject
from transformer_mt.cli import main
from transformer_mt.common.errors import UserError
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.measures import embedding_to_position, near_copies

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "transformer_mt"
ISSUE_IDS = ["mask", "causal", "padding", "attention", "heads", "positional_encoding", "embedding_scale", "layer_norm",
             "residual", "feed_forward", "dropout", "shared_layers", "registered", "gradients", "cloned_init", "source_used",
             "output", "projections", "embedding_init", "parameter_count", "learns_copy"]
MODEL = "import torch\nfrom torch import nn\n"
BAD_FILES = {  # file text, NAME -> what the one line must say
    "syntax": ("def make_model(:\n    pass\n", None, ["syntax.py:1:", "syntax error"]),
    "nothing": ("x = 1\n", None, ["defines none of make_model, get_model or a class Transformer", ":NAME"]),
    "no_such_name": ("def make_model():\n    pass\n", "build", ["defines no build", "make_model"]),
    "not_callable": ("make_model = 3\n", None, ["make_model is not a function or class", "int"]),
    "raises": (MODEL + "def make_model(src_vocab, tgt_vocab, N=6):\n    raise ValueError('N must be 6')\n", None,
               ["raises.py:4:", "make_model(src_vocab=13, tgt_vocab=11, N=2) raised ValueError: N must be 6"]),
    "import_fails": ("import no_such_package_here\n", None, ["import_fails.py:1:", "ModuleNotFoundError",
                                                              '__name__ == "__main__"']),
    "exits": ("import sys\nsys.exit(1)\n", None, ["exits.py:2:", "exits when imported"]),
    "needs_more": ("def make_model(src_vocab, tokenizer):\n    pass\n", None, ["`tokenizer`", "adapter"]),
    "not_a_model": ("def make_model(src_vocab, tgt_vocab):\n    return [src_vocab]\n", None,
                    ["returned a value of type list", "torch.nn.Module"]),
    "no_convention": (MODEL + "def make_model(d_model):\n    return nn.Linear(d_model, d_model)\n", None,
                      ["neither encode, decode and generator", "docs/check.md#your-code-in-another-shape"]),
    "too_long": ("while True:\n    pass\n", None, ["still running after", '`if __name__ == "__main__":`']),
}
# A model written for one GPU (its positional encoding calls .cuda()) raises whenever it runs on a machine
# without CUDA: one finding at that line, not a failure of every check.
ON_GPU = "self.pe[:, : x.size(1)].cuda()"
CUDA_TEXT = (Path(__file__).resolve().parents[1] / "check_cases" / "annotated.py").read_text(encoding="utf-8").replace(
    "self.pe[:, : x.size(1)]", ON_GPU)
CUDA_LINE = next(number for number, line in enumerate(CUDA_TEXT.splitlines(), start=1) if ON_GPU in line)
if not torch.cuda.is_available():
    BAD_FILES["cuda"] = (CUDA_TEXT, None, [f"cuda.py:{CUDA_LINE}:", "raised AssertionError: Torch not compiled with CUDA",
                                           "should follow its input's"])


def test_the_check_ids_are_the_issues_in_order() -> None:
    assert list(CHECKS) == ISSUE_IDS


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_file_that_cannot_be_checked_is_one_line(tmp_path: Path, case: str) -> None:
    text, name, says = BAD_FILES[case]
    path = tmp_path / f"{case}.py"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        open_subject(path, name, seconds=0.5)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    for part in says:
        assert part in message, message
    assert not (tmp_path / "__pycache__").exists()


def test_a_missing_file_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["check", str(tmp_path / "mine.py:make_model")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"transformer-mt check: error: {tmp_path / 'mine.py'}: no such file"


def test_builder_arguments_follow_the_signature() -> None:
    sizes = Sizes()

    def get_model(opt, src_vocab, trg_vocab, max_len=80):
        return opt

    found = arguments(get_model, sizes, Path("x.py"))
    assert set(found) == {"opt", "src_vocab", "trg_vocab"} and found["trg_vocab"] == sizes.tgt_vocab
    opt = found["opt"]
    assert isinstance(opt, Options)
    assert (opt.heads, opt.h, opt.n_layers, opt.N, opt.src_pad, opt.load_weights) == (sizes.h, sizes.h, 2, 2, 0, None)
    with pytest.raises(AttributeError, match="opt.beam_size"):
        opt.beam_size


def test_a_builder_that_ties_the_vocabularies_is_built_with_equal_ones(tmp_path: Path) -> None:
    text = (HERE / "annotated.py").read_text(encoding="utf-8").replace(
        "    attn = MultiHeadedAttention(h, d_model, dropout)\n",
        "    assert src_vocab == tgt_vocab, 'one vocabulary'\n    attn = MultiHeadedAttention(h, d_model, dropout)\n", 1)
    (tmp_path / "tied.py").write_text(text, encoding="utf-8")
    subject = open_subject(tmp_path / "tied.py")
    assert subject.sizes.src_vocab == subject.sizes.tgt_vocab == 13
    assert "tgt_vocab=13" in subject.call and "AssertionError: one vocabulary" in subject.notes[0]


def test_the_kit_masks_are_the_paper_masks_in_each_encoding() -> None:
    src = torch.tensor([[5, 6, 0]])
    tgt = torch.tensor([[1, 2, 3, 0]])
    src_mask, tgt_mask = kit_masks(src, tgt)
    assert src_mask.shape == (1, 1, 3) and tgt_mask.shape == (1, 4, 4)
    assert src_mask.tolist() == [[[True, True, False]]]
    assert tgt_mask[0].tolist() == [[i >= j and j < 3 for j in range(4)] for i in range(4)]
    for encoding in ("blocked", "additive"):
        src_other, tgt_other = kit_masks(src, tgt, encoding)
        assert torch.equal(may_attend(src_other, encoding), src_mask)
        assert torch.equal(may_attend(tgt_other, encoding), tgt_mask)


def test_the_papers_multi_head_form_is_this_packages_multi_head_attention() -> None:
    """The reference the attention and heads checks compare with is model/attention.py's
    MultiHeadAttention, computed with its own W^Q, W^K, W^V and W^O."""
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4).eval()
    w_q, w_k, w_v = (torch.nn.Linear(16, 16) for _ in range(3))
    with torch.no_grad():
        for part, linear in zip(module.in_proj.weight.chunk(3), (w_q, w_k, w_v)):
            linear.weight.copy_(part)
        for part, linear in zip(module.in_proj.bias.chunk(3), (w_q, w_k, w_v)):
            linear.bias.copy_(part)
        q, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
        maps = {"Q": w_q, "K": w_k, "V": w_v, "O": module.out_proj}
        ours = multi_head(PAPER, q, memory, memory, maps, 4)
        assert torch.allclose(ours, module(q, memory), atol=1e-5)
        assert not torch.allclose(multi_head(Form(scale="1"), q, memory, memory, maps, 4), ours, atol=1e-3)


def test_the_sinusoid_and_its_slips_follow_section_3_5() -> None:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), computed here by hand."""
    tables = {name: table for name, table, _ in sinusoid_slips(5, 8)}
    paper = tables["section 3.5's sinusoid"]
    for pos in range(5):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert paper[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert paper[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
    swapped = next(table for name, table in tables.items() if "swapped" in name)
    assert swapped[3, 0] == pytest.approx(math.cos(3), abs=1e-6)
    assert [ok for _, _, ok in sinusoid_slips(5, 8)].count(True) == 2  # the paper's layout and the halves


def test_the_shared_measures() -> None:
    """N(0, 1) rows times sqrt(64) against the sinusoid: RMS 8 against 1/sqrt(2)."""
    torch.manual_seed(0)
    rows = torch.randn(5000, 64)
    measured = embedding_to_position(rows, 8.0, torch.tensor([[0.0, 1.0]] * 32).reshape(2, 32))
    assert measured.added == pytest.approx(8.0, rel=0.02)
    assert measured.ratio == pytest.approx(8.0 * math.sqrt(2), rel=0.02)
    a, b = torch.randn(20, 20), torch.randn(20, 20)
    pairs = near_copies({"a": a, "b": b, "a2": a.clone(), "c": torch.randn(20, 5)}, 0.99)
    assert [(round(r, 4), x, y) for r, x, y in pairs] == [(1.0, "a", "a2")]


def test_the_json_report_has_the_issues_shape() -> None:
    report = run_checks(open_subject(HERE / "tutorial.py"), quick=True, only=["output", "learns_copy", "mask"])
    found = json.loads(json.dumps(report.to_dict()))
    assert set(found) == {"model", "checks"}
    assert set(found["model"]) == {"convention", "sizes", "parameters"} and found["model"]["convention"] == "tutorial"
    assert found["model"]["sizes"]["tgt_vocab"] == 11 and found["model"]["parameters"] > 0
    assert [c["id"] for c in found["checks"]] == ["mask", "output", "learns_copy"]
    assert all(set(c) == {"id", "status", "section", "message", "fix"} for c in found["checks"])
    assert found["checks"][-1]["status"] == "not_checked" and not report.failed
    assert "get_model(opt=opt, src_vocab=13, trg_vocab=11)" in report.text()


def test_check_and_the_doctor_import_each_other_not() -> None:
    """Side by side (ARCHITECTURE.md): what both need (model/measures.py) lives below both."""
    for package, other in (("check", "transformer_mt.diagnosis"), ("diagnosis", "transformer_mt.check")):
        for path in (PACKAGE / package).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
            names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            assert not [n for n in names if n.startswith(other)], path
