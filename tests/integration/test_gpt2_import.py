"""`transformer-mt import gpt2`: a small Hugging Face GPT2LMHeadModel with every weight
perturbed and a byte-level BPE trained here (no download), imported through the command
line and compared with transformers itself (the reference): token ids and text, logits on
a right-padded batch, greedy generation; a pytorch_model.bin without the "transformer."
prefix and a tokenizer.json with an added token; an untied lm_head; what is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

# transformers' GPT-2 classes are reached through the package, when a test runs: importing them here
# would cost each pytest worker seconds of collection
transformers = pytest.importorskip("transformers", reason="the reference needs transformers (the interop extra)")
tokenizers = pytest.importorskip("tokenizers")

from transformer_mt.cli import main  # noqa: E402
from transformer_mt.data.tokenizers.gpt2 import ByteLevelBPETokenizer  # noqa: E402
from transformer_mt.decoding.sampling import generate  # noqa: E402
from transformer_mt.model.language_model import DecoderOnly  # noqa: E402
from transformer_mt.runs.directory import RunDir, load_run_model  # noqa: E402

END = "<|endoftext|>"
CORPUS = ["the cat sees a dog", "a small red house near the tree", "Hello world, hello World!",
          "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "numbers 12 345 6789", "the dog sleeps under the big tree"]
LINES = ["Hello world", " leading space", "  two  spaces ", "caf\u00e9 \u65e5\u672c\u8a9e \u00df",
         "emoji \U0001f642\U0001f389 and \u200d joiners", "tabs\tand\nnew lines", f"text {END} more text",
         "unseen words: zebra quartz", "", "!!!???"]
PROMPTS = ["the cat", " Hello", "caf\u00e9 \U0001f642", "a small red house near"]
MAX_NEW = 20


def write_bpe(folder: Path) -> int:
    """vocab.json and merges.txt of a byte-level BPE trained on CORPUS, with <|endoftext|>
    as the last id (as in GPT-2); returns the vocabulary size."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=320, show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS * 5, trainer)
    bpe.model.save(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab[END] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return len(vocab)


def perturb(model: transformers.GPT2LMHeadModel, seed: int) -> None:
    """Noise on every weight, bias and LayerNorm (HF's init leaves biases zero and
    LayerNorms one, which hides mapping bugs); the tied lm_head is wte."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.3)


def write_gpt2(folder: Path, seed: int = 0, **config: object) -> transformers.GPT2LMHeadModel:
    """A GPT-2 folder as save_pretrained writes it, and the model (fp32, eval)."""
    folder.mkdir(parents=True)
    size = write_bpe(folder)
    settings = dict(vocab_size=size, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=size - 1,
                    eos_token_id=size - 1, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    settings.update(config)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**settings))
    perturb(model, seed)
    model.save_pretrained(folder)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, transformers.GPT2LMHeadModel, Path]:
    """(the Hugging Face folder, the reference model, the imported run)."""
    root = tmp_path_factory.mktemp("gpt2")
    model = write_gpt2(root / "hf")
    assert main(["-q", "import", "gpt2", str(root / "hf"), "--run", str(root / "run")]) == 0
    return root / "hf", model, root / "run"


def our_model(run: Path) -> tuple[ByteLevelBPETokenizer, DecoderOnly]:
    cfg, tokenizer, model = load_run_model(RunDir(run))
    assert cfg.model.arch == "decoder_only" and isinstance(model, DecoderOnly)
    assert isinstance(tokenizer, ByteLevelBPETokenizer)
    return tokenizer, model.eval()


def test_token_ids_and_text_equal_gpt2_tokenizer(gpt2) -> None:
    folder, _, run = gpt2
    theirs, (ours, _) = transformers.GPT2TokenizerFast.from_pretrained(folder), our_model(run)
    assert len(ours) == len(theirs) and ours.end_of_text_id == theirs.eos_token_id == len(theirs) - 1
    ids = ours.encode(LINES)
    assert ids == theirs(LINES).input_ids
    assert ours.end_of_text_id in ids[LINES.index(f"text {END} more text")]
    assert ours.decode(ids) == [theirs.decode(row, skip_special_tokens=True) for row in ids]
    assert ours.decode(ids) == [line.replace(END, "") for line in LINES]  # byte-level: lossless
    assert ours.pieces(" leading space") == theirs.tokenize(" leading space")
    assert ours.id_to_piece(ids[0]) == theirs.convert_ids_to_tokens(ids[0])
    assert [ours.piece_to_id(p) for p in ours.pieces(LINES[3])] == ids[3]
    assert ours.piece_to_id("no such piece") == ours.end_of_text_id  # GPT-2's unk_token
    assert ours.encode_target(LINES) == ids and ours.source_size == len(ours)


def reference_logits(model: transformers.GPT2LMHeadModel, rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The right-padded batch (B, T) and Hugging Face's logits, given the attention mask."""
    width = max(len(row) for row in rows)
    batch = torch.tensor([row + [pad] * (width - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
    with torch.no_grad():
        return batch, model(input_ids=batch, attention_mask=mask).logits


def assert_same_logits(ours: DecoderOnly, model: transformers.GPT2LMHeadModel, rows: list[list[int]], pad: int) -> None:
    """Our logits equal Hugging Face's at the real positions of the right-padded batch of
    `rows` (padding comes after them; causal attention never lets them see it)."""
    batch, theirs = reference_logits(model, rows, pad)
    with torch.no_grad():
        logits = ours.logits(batch)
    for i, row in enumerate(rows):
        torch.testing.assert_close(logits[i, : len(row)], theirs[i, : len(row)], atol=1e-5, rtol=0)
    assert theirs.abs().max() > 1  # a model whose logits are not all tiny


def test_logits_equal_on_a_right_padded_batch(gpt2) -> None:
    _, model, run = gpt2
    tokenizer, ours = our_model(run)
    rows = tokenizer.encode(["the cat sees a dog near the small red house", "caf\u00e9 \U0001f642"])
    assert len(rows[0]) > len(rows[1]) + 5
    assert_same_logits(ours, model, rows, tokenizer.end_of_text_id)


def hf_greedy(model: transformers.GPT2LMHeadModel, prompt: list[int], eos: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=eos)
    return out[0, len(prompt):].tolist()


def test_greedy_generation_equals_generate(gpt2) -> None:
    _, model, run = gpt2
    tokenizer, ours = our_model(run)
    eos = tokenizer.end_of_text_id
    lengths = set()
    for prompt in tokenizer.encode(PROMPTS):
        theirs = hf_greedy(model, prompt, eos)
        mine = generate(ours, torch.tensor([prompt]), MAX_NEW, eos_id=eos)[0].tolist()
        cut = theirs.index(eos) + 1 if eos in theirs else len(theirs)  # both end at eos
        assert mine[:cut] == theirs[:cut] and len(mine) == cut, (prompt, mine, theirs)
        lengths.add(len(mine))
    assert MAX_NEW in lengths  # at least one ran to the limit, not all stopped at once


def test_generate_continues_a_prompt_as_transformers_does(gpt2, capsys) -> None:
    """`transformer-mt generate` on the imported run: the prompt alone is fed (no
    end-of-text first), so its greedy text is transformers' generate(do_sample=False)
    decoded, prompt included, for every prompt."""
    folder, model, run = gpt2
    theirs = transformers.GPT2TokenizerFast.from_pretrained(folder)
    eos = theirs.eos_token_id
    prompts = [*PROMPTS, "numbers 12", "the dog sleeps", "Hello world,"]
    expected = []
    for prompt in prompts:
        ids = theirs(prompt).input_ids
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=eos)
        expected.append(theirs.decode(out[0], skip_special_tokens=True))
    args = [arg for prompt in prompts for arg in ("--prompt", prompt)]
    assert main(["generate", str(run), *args, "--max-new-tokens", str(MAX_NEW), "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert out == "".join(text + "\n" for text in expected)
    assert "prompts continue from their own tokens alone" in err
    assert len(set(expected)) == len(prompts) and all(text != prompt for text, prompt in zip(expected, prompts))


def test_the_run_is_complete(gpt2) -> None:
    folder, _, run = gpt2
    assert sorted(p.name for p in run.iterdir()) == ["README.md", "best.safetensors", "config.yaml",
                                                      "gpt2_tokenizer.json", "imported.json"]
    cfg = RunDir(run).read_config()
    assert (cfg.model.positional, cfg.model.scale_embeddings, cfg.model.activation) == ("learned", False, "gelu_tanh")
    assert cfg.model.tie_embeddings and cfg.data.train_text == ""
    assert RunDir(run).tokenizer_file.name == "gpt2_tokenizer.json"
    record = json.loads((run / "imported.json").read_text())
    assert record["format"] == "huggingface-gpt2" and "model.safetensors" in record["sha256"]


def test_pytorch_model_bin_without_prefix_and_tokenizer_json(tmp_path: Path, gpt2) -> None:
    """GPT2Model keys (no "transformer." prefix, the old causal-mask buffers stored), as
    the original GPT-2 upload; the tokenizer as tokenizer.json with an added pad token."""
    folder = gpt2[0]
    source = tmp_path / "hf"
    shutil.copytree(folder, source, ignore=shutil.ignore_patterns("model.safetensors", "vocab.json", "merges.txt"))
    hf_tokenizer = transformers.GPT2TokenizerFast.from_pretrained(folder)
    hf_tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    hf_tokenizer.save_pretrained(source)
    model = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    model.resize_token_embeddings(len(hf_tokenizer))
    model.config.save_pretrained(source)
    state = {key.removeprefix("transformer."): value for key, value in model.state_dict().items()
             if key != "lm_head.weight"}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
    torch.save(state, source / "pytorch_model.bin")
    assert main(["-q", "import", "gpt2", str(source), "--run", str(tmp_path / "run")]) == 0
    tokenizer, ours = our_model(tmp_path / "run")
    theirs = transformers.GPT2TokenizerFast.from_pretrained(source)
    lines = [*LINES, "a [PAD] b"]
    assert tokenizer.encode(lines) == theirs(lines).input_ids and tokenizer.piece_to_id("[PAD]") == len(tokenizer) - 1
    rows = tokenizer.encode(PROMPTS[:2])
    assert_same_logits(ours, model, rows, tokenizer.end_of_text_id)


def test_untied_lm_head(tmp_path: Path) -> None:
    """tie_word_embeddings false: lm_head is its own matrix (our tie_embeddings false)."""
    model = write_gpt2(tmp_path / "hf", seed=1, tie_word_embeddings=False)
    assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    assert main(["-q", "import", "gpt2", str(tmp_path / "hf"), "--run", str(tmp_path / "run")]) == 0
    assert RunDir(tmp_path / "run").read_config().model.tie_embeddings is False
    tokenizer, ours = our_model(tmp_path / "run")
    rows = tokenizer.encode(PROMPTS)
    assert_same_logits(ours, model, rows, tokenizer.end_of_text_id)


def test_reorder_and_upcast_attn_is_the_same_function(tmp_path: Path, gpt2) -> None:
    """transformers' eager path with reorder_and_upcast_attn scales inside the product in
    fp32: in fp32 the same logits as ours."""
    source = tmp_path / "hf"
    shutil.copytree(gpt2[0], source)
    edit_config(source, reorder_and_upcast_attn=True)
    assert main(["-q", "import", "gpt2", str(source), "--run", str(tmp_path / "run")]) == 0
    tokenizer, ours = our_model(tmp_path / "run")
    model = transformers.GPT2LMHeadModel.from_pretrained(source, attn_implementation="eager").eval()
    rows = tokenizer.encode(PROMPTS)
    assert_same_logits(ours, model, rows, tokenizer.end_of_text_id)


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("change, message", [
    ("other", "config.json: model_type is 'bert', not a GPT-2 model"),
    ("nowhere", "no such folder"),
    ("missing", "config.json: missing"),
    ("exists", "exists already; import into a new --run"),
    ("layer_scale", "scale_attn_by_inverse_layer_idx is True: attention scores scaled by 1 / (layer + 1)"),
    ("unscaled", "scale_attn_weights is False"),
    ("cross", "add_cross_attention is True"),
    ("eps", "layer_norm_epsilon is 1e-06; only 1e-5"),
    ("activation", "activation_function 'tanh' is not supported"),
    ("vocab", "vocab_size is 999 but the vocabulary has"),
    ("merges", "merges.txt: missing"),
    ("weights", "model.safetensors: not a readable weights file"),
    ("bpe", "merges.txt: the merges do not fit the vocabulary (Error while initializing BPE: Token `ab` out of "
            "vocabulary); every merge must join two pieces"),
    ("bin", "pytorch_model.bin: not a readable weights file (not a file of tensors that loads without running code"),
    ("nan", "model.safetensors: the weight transformer.h.0.mlp.c_fc.bias holds NaN or infinite values"),
    ("run_in_proc", "(/proc); give --run a path in a folder you can write"),  # the reason depends on the user
    ("run_under_file", "afile is a file, not a folder; give --run a path in a folder"),
])
def test_what_is_refused_is_one_line(tmp_path: Path, gpt2, capsys, change: str, message: str) -> None:
    folder, run = tmp_path / "hf", tmp_path / "run"
    shutil.copytree(gpt2[0], folder)
    changes = {"other": {"model_type": "bert"}, "layer_scale": {"scale_attn_by_inverse_layer_idx": True},
               "unscaled": {"scale_attn_weights": False}, "cross": {"add_cross_attention": True},
               "eps": {"layer_norm_epsilon": 1e-6}, "activation": {"activation_function": "tanh"},
               "vocab": {"vocab_size": 999}}
    if change in changes:
        edit_config(folder, **changes[change])
    if change == "other":  # another architecture, without GPT-2's files: named first
        (folder / "vocab.json").unlink()
    elif change == "missing":
        (folder / "config.json").unlink()
    elif change == "merges":
        (folder / "merges.txt").unlink()
    elif change == "weights":
        (folder / "model.safetensors").write_bytes(b"not a model")
    elif change == "exists":
        run.mkdir()
        (run / "keep.txt").write_text("mine")
    elif change == "bpe":  # "a b" merges into "ab", which vocab.json lacks
        (folder / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "<|endoftext|>": 3}))
        (folder / "merges.txt").write_text("#version: 0.2\na b\n")
    elif change == "bin":  # random bytes: PyTorch's message would advise weights_only=False
        (folder / "model.safetensors").unlink()
        (folder / "pytorch_model.bin").write_bytes(bytes(range(256)) * 8)
    elif change == "nan":
        from safetensors.torch import load_file, save_file

        state = load_file(str(folder / "model.safetensors"))
        state["transformer.h.0.mlp.c_fc.bias"][3] = float("inf")
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    elif change == "run_in_proc":
        run = Path("/proc/transformer-mt-run")
    elif change == "run_under_file":
        (tmp_path / "afile").write_text("mine")
        run = tmp_path / "afile" / "run"
    source = str(tmp_path / "nowhere" / "hf") if change == "nowhere" else str(folder)
    assert main(["-q", "import", "gpt2", source, "--run", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert "weights_only" not in err
    assert (run / "keep.txt").is_file() if change == "exists" else not run.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]


def test_a_model_name_offline_says_how_to_fetch_it(tmp_path: Path, monkeypatch, capsys) -> None:
    import huggingface_hub

    def offline(**_: object) -> None:
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert main(["-q", "import", "gpt2", "openai-community/gpt2", "--run", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hf download openai-community/gpt2 --local-dir DIR" in err
    assert not (tmp_path / "run").exists()
