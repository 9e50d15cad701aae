"""`import annotated`: a checkpoint of the Annotated Transformer's layout, trained with a
loop like the study notes' and saved in their format, becomes a run that computes their
logits and translates line for line as their greedy `translate()` does.

The reference below is written for this test from the description of their model (the
parameter names, pre-norm sub-layers with their LayerNorm, the interleaved sinusoid,
separate embeddings times sqrt(d_model), a generator with a bias) and of their data and
translate (word vocabularies, <sos> words <eos> cut and padded to max_len, unknown words
as padding, greedy for at most 50 tokens): the package's code is not used to build it."""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_mt.cli import main
from transformer_mt.common.specials import UNK_ID
from transformer_mt.data.tokenizers.word_vocab import our_rows
from transformer_mt.model.transformer import NEVER_LOGIT
from transformer_mt.runs.directory import RunDir, load_run_model
from transformer_mt.inference.translator import Translator

MAX_LEN = 12  # their dataset's max_len in this test: sources and targets cut and padded to it
SOURCE_WORDS = [f"w{i}" for i in range(14)]


# ---- the reference: their model, data and translate, written for this test -----------------
class Norm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.a_2, self.b_2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a_2 * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + self.b_2


class Attention(nn.Module):
    def __init__(self, h: int, d: int) -> None:
        super().__init__()
        self.h, self.linears = h, nn.ModuleList(nn.Linear(d, d) for _ in range(4))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, d_k = q.size(0), q.size(-1) // self.h
        q, k, v = (lin(x).view(b, -1, self.h, d_k).transpose(1, 2) for lin, x in zip(self.linears, (q, k, v)))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(mask.unsqueeze(1) == 0, -1e9)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, self.h * d_k)
        return self.linears[3](out)


class FeedForward(nn.Module):
    def __init__(self, d: int, d_ff: int) -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(torch.relu(self.w_1(x)))


class Sublayer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = Norm(d)

    def forward(self, x: torch.Tensor, f) -> torch.Tensor:
        return x + f(self.norm(x))


class EncoderLayer(nn.Module):
    def __init__(self, h: int, d: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn, self.feed_forward = Attention(h, d), FeedForward(d, d_ff)
        self.sublayer = nn.ModuleList(Sublayer(d) for _ in range(2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, h: int, d: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn, self.src_attn, self.feed_forward = Attention(h, d), Attention(h, d), FeedForward(d, d_ff)
        self.sublayer = nn.ModuleList(Sublayer(d) for _ in range(3))

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayer[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayer[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Stack(nn.Module):
    def __init__(self, layer: nn.Module, n: int, d: int) -> None:
        super().__init__()
        self.layers, self.norm = nn.ModuleList(copy.deepcopy(layer) for _ in range(n)), Norm(d)

    def forward(self, x: torch.Tensor, *args) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, *args)
        return self.norm(x)


class Embed(nn.Module):
    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.lut, self.d = nn.Embedding(vocab, d), d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lut(x) * math.sqrt(self.d)


class Positions(nn.Module):
    def __init__(self, d: int, rows: int = 5000) -> None:
        super().__init__()
        pe = torch.zeros(rows, d)
        angle = torch.arange(rows).unsqueeze(1) * torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, : x.size(1)]


class Generator(nn.Module):
    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(x), dim=-1)


class Reference(nn.Module):
    def __init__(self, src_vocab: int, tgt_vocab: int, n: int = 2, d: int = 32, d_ff: int = 64, h: int = 4) -> None:
        super().__init__()
        self.encoder = Stack(EncoderLayer(h, d, d_ff), n, d)
        self.decoder = Stack(DecoderLayer(h, d, d_ff), n, d)
        self.src_embed = nn.Sequential(Embed(d, src_vocab), Positions(d))
        self.tgt_embed = nn.Sequential(Embed(d, tgt_vocab), Positions(d))
        self.generator = Generator(d, tgt_vocab)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), self.encoder(self.src_embed(src), src_mask), src_mask, tgt_mask)


def word_vocab(sentences: list[str]) -> dict[str, int]:
    vocab = {"<pad>": 0, "<sos>": 1, "<eos>": 2}
    for sentence in sentences:
        for word in sentence.strip().split():
            if word not in vocab:
                vocab[word] = len(vocab)
    return vocab


def frame(sentence: str, vocab: dict[str, int], max_len: int = MAX_LEN) -> list[int]:
    """<sos> words <eos>, unknown words as padding, cut and padded to max_len."""
    ids = [vocab.get(w, 0) for w in ["<sos>", *sentence.strip().split(), "<eos>"]][:max_len]
    return ids + [0] * (max_len - len(ids))


@torch.no_grad()
def their_translate(model: Reference, sentence: str, src_vocab: dict, tgt_vocab: dict) -> str:
    """Greedy, the whole model re-run at every step, at most 50 new tokens."""
    model.eval()
    src = torch.tensor([frame(sentence, src_vocab)])
    src_mask = (src != 0).unsqueeze(1)
    tgt = torch.tensor([[tgt_vocab["<sos>"]]])
    for _ in range(50):
        causal = torch.tril(torch.ones(tgt.size(1), tgt.size(1))).bool().unsqueeze(0)
        following = model.generator(model(src, tgt, src_mask, causal))[:, -1].argmax(-1)
        tgt = torch.cat([tgt, following[:, None]], dim=1)
        if following.item() == tgt_vocab["<eos>"]:
            break
    words = {i: w for w, i in tgt_vocab.items()}
    out = [words[i] for i in tgt[0, 1:].tolist()]
    return " ".join(out[: out.index("<eos>")] if "<eos>" in out else out)


def corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    """A toy translation: each source word has its target word, in the same order."""
    rng = random.Random(seed)
    src = [" ".join(rng.choice(SOURCE_WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
    return src, [" ".join(f"T{w[1:]}" for w in s.split()) for s in src]


def train_their_way(model: Reference, optimizer: torch.optim.Optimizer, src: list[str], tgt: list[str],
                    vocabs: tuple[dict, dict], steps: int, seed: int) -> float:
    """Adam 1e-3, batches of 32 shuffled pairs padded to max_len, cross-entropy ignoring padding."""
    torch.manual_seed(seed)
    pairs = [(frame(s, vocabs[0]), frame(t, vocabs[1])) for s, t in zip(src, tgt)]
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch = random.Random(seed + _).sample(pairs, 32)
        s, t = torch.tensor([p[0] for p in batch]), torch.tensor([p[1] for p in batch])
        t_in = t[:, :-1]
        tgt_mask = torch.tril(torch.ones(t_in.size(1), t_in.size(1))).bool() & (t_in != 0).unsqueeze(1)
        logits = model.generator(model(s, t_in, (s != 0).unsqueeze(1), tgt_mask))
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), t[:, 1:].reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


# ---- fixtures -------------------------------------------------------------------------------------
SENTENCES = ["w1 w2 w3", "w4 w4 w5 w6", "w7", "w8 w9 w10 w11 w12 w13", "w0 w0 w0 w0 w0",
             "w3 zz w5",  # an unknown word: padding, hidden by the mask
             "yy zz", "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13",  # longer than max_len: cut, no <eos>
             "  w2   w9\tw6 "]


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Their files: two checkpoints of one model, both vocabularies as JSON, and the
    training text. `early` (40 steps) writes the same words whatever the source, as the
    notes' model did; its <eos> is made unreachable (its bias lowered by 100) so that its
    outputs run to the 50-token cap. `trained` (400 steps) reads its source."""
    root = tmp_path_factory.mktemp("annotated")
    src, tgt = corpus(600, seed=3)
    (root / "train.src").write_text("\n".join(src) + "\n")
    (root / "train.tgt").write_text("\n".join(tgt) + "\n")
    vocabs = word_vocab(src[:500]), word_vocab(tgt[:500])
    for side, vocab in zip(("src", "tgt"), vocabs):
        (root / f"{side}_vocab.json").write_text(json.dumps(vocab))
    torch.manual_seed(0)
    model = Reference(len(vocabs[0]), len(vocabs[1]))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    models = {}
    for name, steps in (("early", 40), ("trained", 360)):
        loss = train_their_way(model, optimizer, src[:500], tgt[:500], vocabs, steps, seed=len(models))
        saved = copy.deepcopy(model).eval()
        if name == "early":
            with torch.no_grad():
                saved.generator.proj.bias[vocabs[1]["<eos>"]] -= 100.0
        torch.save({"epoch": len(models), "model_state_dict": saved.state_dict(),
                    "optimizer_state_dict": optimizer.state_dict(), "loss": loss}, root / f"{name}.pth")
        models[name] = saved
    return {"root": root, "vocabs": vocabs, "models": models, "src": src, "tgt": tgt}


def import_run(notes: dict, name: str, *extra: str) -> Path:
    root = notes["root"]
    run = root / f"run-{name}"
    if not run.exists():
        assert main(["-q", "import", "annotated", str(root / f"{name}.pth"), "--run", str(run), "--heads", "4",
                     "--src-vocab", str(root / "src_vocab.json"), "--tgt-vocab", str(root / "tgt_vocab.json"),
                     "--max-len", str(MAX_LEN), *extra]) == 0
    return run


# ---- equality with the reference ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["early", "trained"])
def test_log_probabilities_equal_theirs(notes: dict, name: str) -> None:
    _, _, model = load_run_model(RunDir(import_run(notes, name)), "best")
    model.eval()
    src_vocab, tgt_vocab = notes["vocabs"]
    reference = notes["models"][name]
    batch = list(zip(notes["src"][500:508], notes["tgt"][500:508]))
    src = torch.tensor([frame(s, src_vocab) for s, _ in batch])
    tgt_in = torch.tensor([frame(t, tgt_vocab) for _, t in batch])[:, :-1]
    causal = torch.tril(torch.ones(tgt_in.size(1), tgt_in.size(1))).bool().unsqueeze(0)
    with torch.no_grad():
        theirs = reference.generator(reference(src, tgt_in, (src != 0).unsqueeze(1), causal))
        ours_of = {theirs: ours for ours, theirs in enumerate(our_rows(tgt_vocab)) if theirs is not None}
        src_ours = torch.tensor([[{t: o for o, t in enumerate(our_rows(src_vocab)) if t is not None}[i] for i in row]
                                 for row in src.tolist()])
        tgt_ours = tgt_in.apply_(lambda i: ours_of[i])
        ours = model.generator(model(src_ours, tgt_ours, (src_ours != 0)[:, None, None, :]))
    columns = torch.tensor([ours_of[i] for i in range(len(tgt_vocab))])
    real = tgt_in != 0
    torch.testing.assert_close(ours[..., columns][real], theirs[real], atol=1e-5, rtol=1e-5)
    assert ours[..., UNK_ID].max() < -1e8  # our own <unk> row: probability exactly 0


@pytest.mark.parametrize("name", ["early", "trained"])
def test_greedy_translations_equal_their_translate(notes: dict, name: str, tmp_path: Path, capsys) -> None:
    run = import_run(notes, name)
    src_vocab, tgt_vocab = notes["vocabs"]
    lines = SENTENCES + notes["src"][500:510 if name == "early" else 530]  # early's run to the cap, without a cache
    theirs = [their_translate(notes["models"][name], line, src_vocab, tgt_vocab) for line in lines]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert main(["-q", "translate", str(run), "-i", str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == theirs
    if name == "early":  # mostly one word whatever the source, to the 50-token cap
        words = " ".join(theirs).split()
        assert {len(t.split()) for t in theirs} == {50} and max(map(words.count, set(words))) > 0.8 * len(words)
    else:  # outputs that end, and depend on the source
        assert max(len(t.split()) for t in theirs) < 50 and len(set(theirs)) > 30
    assert not any(w in ("<pad>", "<sos>") for t in theirs for w in t.split())  # which ours never emits


# ---- the vocabularies, the record -------------------------------------------------------------------
def test_the_training_text_and_a_bare_state_dict_give_the_same_run(notes: dict) -> None:
    """The vocabularies rebuilt from the training text, the weights as a bare state dict
    saved from nn.DataParallel (names prefixed with `module.`)."""
    root, run = notes["root"], import_run(notes, "trained")
    rebuilt = root / "rebuilt"
    torch.save(nn.DataParallel(notes["models"]["trained"]).state_dict(), root / "bare.pth")
    assert main(["-q", "import", "annotated", str(root / "bare.pth"), "--run", str(rebuilt), "--heads", "4",
                 "--src-text", str(root / "train.src"), "--tgt-text", str(root / "train.tgt"), "--max-samples", "500",
                 "--max-len", str(MAX_LEN)]) == 0
    for name in ("word_vocab.json", "config.yaml", "best.safetensors"):
        assert (rebuilt / name).read_bytes() == (run / name).read_bytes(), name
    record = json.loads((run / "imported.json").read_text())
    assert record["epoch"] == 1 and record["loss"] == torch.load(root / "trained.pth")["loss"]
    assert record["format"] == "annotated-transformer" and record["heads"] == 4 and record["max_len"] == MAX_LEN


# ---- what is refused ----------------------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ("text", "not a file written by torch.save, or one cut short"),
    ("truncated", "not a file written by torch.save, or one cut short"),
    ("code", "loads without running code"),
    ("no_state", "no state dict found (it holds epoch, loss)"),
    ("names", "not the Annotated Transformer's parameter names: expected src_embed.0.lut.weight"),
    ("heads", "--heads 5: must divide d_model, which is 32"),
    ("vocab", "words but"),
    ("exists", "exists already; import into a new --run"),
    ("one_vocab", "give either --src-vocab and --tgt-vocab"),
])
def test_what_is_refused_is_one_line(notes: dict, tmp_path: Path, capsys, change: str, message: str) -> None:
    root = notes["root"]
    checkpoint, run = tmp_path / "model.pth", tmp_path / "run"
    vocabs = ["--src-vocab", str(root / "src_vocab.json"), "--tgt-vocab", str(root / "tgt_vocab.json")]
    heads = "4"
    if change == "text":
        checkpoint.write_text("Epoch 1/30, Loss = 5.1\n")
    elif change == "truncated":
        checkpoint.write_bytes((root / "trained.pth").read_bytes()[:5000])
    elif change == "code":  # the whole module pickled: loading it would run their classes' code
        torch.save(notes["models"]["trained"], checkpoint)
    elif change == "no_state":
        torch.save({"epoch": 3, "loss": 0.5}, checkpoint)
    elif change == "names":  # a state dict of this package's own layout
        torch.save(load_run_model(RunDir(import_run(notes, "trained")), "best")[2].state_dict(), checkpoint)
    else:
        checkpoint.write_bytes((root / "trained.pth").read_bytes())
    if change == "heads":
        heads = "5"
    elif change == "vocab":
        vocab = dict(notes["vocabs"][1])
        vocab.pop(next(w for w, i in vocab.items() if i == len(vocab) - 1))
        (tmp_path / "tgt.json").write_text(json.dumps(vocab))
        vocabs[-1] = str(tmp_path / "tgt.json")
    elif change == "exists":
        run.mkdir()
        (run / "keep.txt").write_text("mine")
    elif change == "one_vocab":
        vocabs = vocabs[:2]
    assert main(["-q", "import", "annotated", str(checkpoint), "--run", str(run), "--heads", heads, *vocabs]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    if change == "vocab":
        assert f"has {len(notes['vocabs'][1]) - 1} words but" in err and f"has {len(notes['vocabs'][1])} rows" in err
    assert (run / "keep.txt").is_file() if change == "exists" else not run.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run")] == []


# ---- everything else works on it -----------------------------------------------------------------------
def test_beam_evaluate_plot_and_the_page_work_on_the_imported_run(notes: dict, tmp_path: Path, capsys) -> None:
    from fastapi.testclient import TestClient

    from transformer_mt.server import TranslateLimits, TranslationService, create_app

    run = import_run(notes, "trained")
    (tmp_path / "src").write_text("\n".join(notes["src"][530:540]) + "\n")
    (tmp_path / "ref").write_text("\n".join(notes["tgt"][530:540]) + "\n")
    assert main(["-q", "translate", str(run), "-i", str(tmp_path / "src"), "--beam", "4", "--nbest", "2"]) == 0
    assert main(["-q", "evaluate", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"),
                 "--json"]) == 0
    assert main(["-q", "plot", "attention", str(run), "w3 zz w5", "--out", str(tmp_path / "a.png")]) == 0
    assert all((tmp_path / f"a-{kind}.png").stat().st_size > 0 for kind in ("encoder", "decoder", "cross"))
    out = capsys.readouterr().out
    assert "0 ||| " in out and '"bleu": ' in out
    client = TestClient(create_app(TranslationService(Translator.from_run(run, device="cpu"), "notes",
                                                      TranslateLimits(max_chars=300))))
    assert client.get("/").status_code == 200
    body = client.post("/api/translate", json={"text": "w3 zz w5", "attention": True}).json()
    steps = client.post("/api/steps", json={"text": "w3 zz w5", "beam": 1}).json()
    assert steps["translation"] == body["translations"][0] == their_translate(
        notes["models"]["trained"], "w3 zz w5", *notes["vocabs"])
    assert steps["source_tokens"] == ["<sos>", "w3", "zz", "w5", "<eos>"]
    cut = client.post("/api/steps", json={"text": SENTENCES[7], "beam": 1}).json()  # longer than max_len
    assert cut["source_tokens"] == ["<sos>", *SENTENCES[7].split()[: MAX_LEN - 1]]
    attention = body["results"][0]["attention"]
    assert len(attention["encoder"]) == 2 and len(attention["encoder"][0]) == 4  # every layer, every head


def test_fine_tuning_continues_their_model(notes: dict, tmp_path: Path) -> None:
    run = import_run(notes, "trained")
    data = tmp_path / "data"
    data.mkdir()
    for split, lines in (("train", slice(0, 500)), ("valid", slice(540, 600))):
        (data / f"{split}.src").write_text("\n".join(notes["src"][lines]) + "\n")
        (data / f"{split}.tgt").write_text("\n".join(notes["tgt"][lines]) + "\n")
    files = [f"--data.{split}_{side}={data / f'{split}.{side}'}" for split in ("train", "valid") for side in ("src", "tgt")]
    tuned = tmp_path / "tuned"
    assert main(["-q", "train", str(run / "config.yaml"), "--run", str(tuned), "--init-from", str(run),
                 "--no-progress", "--data.task=", *files, "--train.max_steps=50", "--train.valid_every=50",
                 "--train.schedule=constant", "--train.lr=1e-3", "--train.label_smoothing=0", "--model.dropout=0",
                 "--train.device=cpu", "--train.precision=fp32"]) == 0
    sources, references = notes["src"][540:600], notes["tgt"][540:600]
    before = Translator.from_run(run, device="cpu").translate(sources)
    after = Translator.from_run(tuned, device="cpu", checkpoint="last").translate(sources)
    right = [sum(h == r for h, r in zip(hyps, references)) for hyps in (before, after)]
    assert right[1] > right[0], right
    assert (tuned / "word_vocab.json").read_bytes() == (run / "word_vocab.json").read_bytes()


def test_exports_refuse_what_they_cannot_hold(notes: dict, tiny_run: Path, tmp_path: Path, capsys) -> None:
    """Their separate vocabularies, and their LayerNorm (here on a copy of a joint-vocabulary run)."""
    theirs = tmp_path / "theirs"
    shutil.copytree(tiny_run, theirs)
    config = (theirs / "config.yaml").read_text()
    (theirs / "config.yaml").write_text(config.replace("layer_norm: pytorch", "layer_norm: annotated"))
    for run, message in ((import_run(notes, "trained"), "needs one vocabulary for source and target"),
                         (theirs, "model.layer_norm is annotated")):
        for target in ("ctranslate2", "hf"):
            assert main(["-q", "export", target, str(run), "--out", str(tmp_path / "out")]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_doctor_examines_their_checkpoint(notes: dict, tmp_path: Path, capsys) -> None:
    """Their N(0, 1) embeddings times sqrt(d_model), their deep-copied layers and the early
    model's loops are named; the saved training loss stands in for metrics.jsonl."""
    (tmp_path / "src").write_text("\n".join(notes["src"][540:580]) + "\n")
    (tmp_path / "ref").write_text("\n".join(notes["tgt"][540:580]) + "\n")
    run = import_run(notes, "early")
    assert main(["-q", "doctor", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = {f["id"]: f for f in report["findings"]}
    assert {"embedding_scale", "cloned_init", "repetition"} <= set(found)
    assert found["embedding_scale"]["value"] == pytest.approx(math.sqrt(32) / math.sqrt(0.5), rel=0.1)
    assert "memorization" in report["checked"] + list(found) and "truncation" in report["not_checked"]
