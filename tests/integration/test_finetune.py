"""Fine-tuning: a new run starts from another run's weights and vocabulary, trains on its
own corpus with its own schedule, and leaves the run it started from untouched."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import torch

from transformer_mt.cli import main
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.model.masks import padding_mask
from transformer_mt.runs.directory import RunDir, load_run_model


def reversal_corpus(folder: Path, n: int, seed: int) -> list[str]:
    """A new task for the copy model: the target is the source backwards."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    src = [" ".join(f"w{rng.randrange(10)}" for _ in range(rng.randint(2, 6))) for _ in range(n)]
    (folder / "src").write_text("".join(line + "\n" for line in src))
    (folder / "tgt").write_text("".join(" ".join(reversed(line.split())) + "\n" for line in src))
    return [f"--data.{split}_{side}={folder / side}" for split in ("train", "valid") for side in ("src", "tgt")]


def loss_on(run: Path, checkpoint: str, src_file: Path, tgt_file: Path) -> float:
    """Mean cross entropy per target token of a run's model on a corpus (teacher forcing)."""
    _, tokenizer, model = load_run_model(RunDir(run), checkpoint)
    model.eval()
    src = [ids + [EOS_ID] for ids in tokenizer.encode(src_file.read_text().splitlines())]
    tgt = tokenizer.encode_target(tgt_file.read_text().splitlines())
    total = tokens = 0.0
    with torch.inference_mode():
        for s, t in zip(src, tgt):
            s_ids, t_in, t_out = torch.tensor([s]), torch.tensor([[BOS_ID] + t]), torch.tensor(t + [EOS_ID])
            logits = model.generator.logits(model(s_ids, t_in, padding_mask(s_ids, PAD_ID))[0]).float()
            total += torch.nn.functional.cross_entropy(logits, t_out, reduction="sum").item()
            tokens += len(t_out)
    return total / tokens


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_fine_tuning_lowers_the_loss_on_the_new_corpus_and_leaves_the_original(tiny_run: Path, tmp_path: Path) -> None:
    before = digest(tiny_run)
    data = reversal_corpus(tmp_path / "reverse", 300, seed=5)
    run = tmp_path / "tuned"
    code = main(["-q", "train", str(tiny_run / "config.yaml"), "--run", str(run), "--init-from", str(tiny_run),
                 "--no-progress", "--data.task=", *data, "--train.max_steps=60", "--train.valid_every=60",
                 "--train.warmup_steps=10", "--train.device=cpu"])
    assert code == 0
    valid = (tmp_path / "reverse" / "src", tmp_path / "reverse" / "tgt")
    start, tuned = loss_on(tiny_run, "best", *valid), loss_on(run, "last", *valid)
    assert tuned < 0.7 * start, (start, tuned)
    assert digest(tiny_run) == before  # the run it started from is untouched
    original = SentencePieceTokenizer.load(tiny_run / "tokenizer.model")
    copied = SentencePieceTokenizer.load(run / "tokenizer.model")
    assert [original.sp.IdToPiece(i) for i in range(len(original))] == [copied.sp.IdToPiece(i) for i in range(len(copied))]


def test_the_first_step_starts_from_the_given_weights(tiny_run: Path, tmp_path: Path) -> None:
    """With a zero learning rate the fine-tuned run's weights are the original's."""
    data = reversal_corpus(tmp_path / "reverse", 50, seed=6)
    run = tmp_path / "same"
    assert main(["-q", "train", str(tiny_run / "config.yaml"), "--run", str(run), "--init-from", str(tiny_run),
                 "--no-progress", "--data.task=", *data, "--train.max_steps=1", "--train.valid_every=1",
                 "--train.lr_scale=1e-30", "--train.device=cpu", "--model.dropout=0"]) == 0
    a, b = load_run_model(RunDir(tiny_run))[2].state_dict(), load_run_model(RunDir(run), "last")[2].state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_model_of_another_shape_is_refused_in_one_line(tiny_run: Path, tmp_path: Path, capsys) -> None:
    data = reversal_corpus(tmp_path / "reverse", 20, seed=7)
    code = main(["-q", "train", str(tiny_run / "config.yaml"), "--run", str(tmp_path / "bad"), "--init-from",
                 str(tiny_run), "--no-progress", "--data.task=", *data, "--model.d_ff=48", "--train.device=cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "model.d_ff is 48 here but" in err and "copy its model section" in err
    assert not (tmp_path / "bad").exists()
