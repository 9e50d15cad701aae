"""`transformer-mt import marian`: a small Hugging Face transformers.MarianMTModel with every weight
perturbed, imported and compared with transformers itself (the reference): token ids,
logits on a padded batch, greedy and beam search outputs; an fp16 pytorch_model.bin;
what is refused; every feature on the imported run; fine-tuning it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

transformers = pytest.importorskip("transformers", reason="the reference needs transformers (the interop extra)")

from test_finetune import digest, loss_on  # noqa: E402  (the measures the fine-tuning of ordinary runs uses)

from transformer_mt.cli import main  # noqa: E402
from transformer_mt.data.tokenizers.marian import MarianTokenizer  # noqa: E402
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402
from transformer_mt.interop.marian import import_marian  # noqa: E402
from transformer_mt.model.embeddings import sinusoidal_encoding  # noqa: E402
from transformer_mt.model.masks import padding_mask  # noqa: E402
from transformer_mt.model.transformer import NEVER_LOGIT  # noqa: E402
from transformer_mt.runs.directory import RunDir, load_run_model  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

SOURCE_WORDS = "the a house cat dog tree red small big runs sees sleeps under over near and".split()
TARGET_WORDS = "das ein haus katze hund baum rot klein gross rennt sieht schlaeft unter ueber bei und".split()
LEXICON = dict(zip(SOURCE_WORDS, TARGET_WORDS))
DROPPED_PIECE = "\u2581near"  # a source piece left out of vocab.json: it becomes <unk>
MAX_NEW = 12  # Hugging Face's max_new_tokens; ours: max_len_b = MAX_NEW - 1 (+ eos)
SENTENCES = [
    "the cat sees a dog", "a small red house", ">>de<< the big tree near the house",
    "dog", "the cat sleeps near the small dog and the big red tree", "Ω cat \u00e9tude", ">>xx<< a cat",
]


def corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src = [" ".join(rng.choice(SOURCE_WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]
    return src, [" ".join(LEXICON[w] for w in line.split()) for line in src]


SEARCHED = SENTENCES + corpus(9, seed=9)[0]  # what greedy and beam search decode


def train_spm(lines: list[str], path: Path) -> list[str]:
    prefix = str(path.with_suffix(""))
    spm.SentencePieceTrainer.Train(sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=60,
                                   hard_vocab_limit=False, minloglevel=2)
    Path(prefix + ".model").rename(path)
    processor = spm.SentencePieceProcessor(model_file=str(path))
    return [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]


def perturb(model: transformers.MarianMTModel, seed: int) -> None:
    """Noise on every weight, bias, LayerNorm and final_logits_bias (HF's init leaves many
    trivial, which hides mapping bugs)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "embed_positions" not in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.3)
        model.final_logits_bias.add_(torch.randn(model.final_logits_bias.shape, generator=gen))


def teach(model: transformers.MarianMTModel, tok: transformers.MarianTokenizer, steps: int = 300) -> None:
    """A few Adam steps on the word-for-word task, so that outputs end at various lengths
    (a random model ends all at once or never), as Hugging Face trains: labels, pad -> -100."""
    src, tgt = corpus(512, seed=2)
    batches = [tok(src[start:start + 32], text_target=tgt[start:start + 32], padding=True, return_tensors="pt")
               for start in range(0, 512, 32)]  # tokenized once: the steps cycle through them
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    for step in range(steps):
        batch = batches[step % len(batches)]
        labels = batch["labels"].masked_fill(batch["labels"] == model.config.pad_token_id, -100)
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def write_marian(folder: Path, seed: int = 0, teach_steps: int = 300, **config: object) -> transformers.MarianMTModel:
    """A Marian model folder as OPUS-MT models are published, and the model (fp32, eval),
    taught `teach_steps` steps (0: perturbed only, for a test of logits alone)."""
    folder.mkdir(parents=True)
    src, tgt = corpus(400, seed=1)
    pieces = train_spm(src, folder / "source.spm") + train_spm(tgt, folder / "target.spm")
    kept = [p for p in dict.fromkeys(pieces) if p not in ("<unk>", "<s>", "</s>", DROPPED_PIECE)]
    vocab = {"</s>": 0, "<unk>": 1, ">>de<<": 2, **{p: i + 3 for i, p in enumerate(kept)}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    pad = len(vocab) - 1
    settings = dict(vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=32, encoder_layers=2,
                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                    decoder_ffn_dim=64, activation_function="swish", scale_embedding=True, pad_token_id=pad,
                    decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0, max_position_embeddings=128,
                    share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    settings.update(config)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings))
    perturb(model, seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one rounding whatever the process's thread count: the same reference everywhere
    try:
        teach(model, hf_tokenizer(folder), teach_steps)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(folder)
    generation = {"bad_words_ids": [[pad]], "bos_token_id": 0, "decoder_start_token_id": pad, "eos_token_id": 0,
                  "forced_eos_token_id": 0, "max_length": 512, "num_beams": 4, "pad_token_id": pad}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return reference(folder)


def reference(folder: Path) -> transformers.MarianMTModel:
    """The model as transformers reads the folder (its generation config included: pad banned)."""
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    assert model.generation_config.bad_words_ids == [[model.config.pad_token_id]]
    return model


def hf_tokenizer(folder: Path) -> transformers.MarianTokenizer:
    return transformers.MarianTokenizer(source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
                             vocab=str(folder / "vocab.json"))


@pytest.fixture(scope="module")
def marian(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, transformers.MarianMTModel, Path]:
    """(the Hugging Face folder, the reference model, the imported run). Among the suite's slowest
    (~15 s): the reference is taught 300 steps, so that its greedy outputs and n-best lists differ
    from sentence to sentence as a published model's do (an untaught one repeats one token)."""
    root = tmp_path_factory.mktemp("marian")
    model = write_marian(root / "hf", seed=3)  # taught on one thread, its beam-4 outputs end at 7 lengths
    assert main(["-q", "import", "marian", str(root / "hf"), "--run", str(root / "run")]) == 0
    return root / "hf", model, root / "run"


def test_token_ids_and_text_equal_marian_tokenizer(marian) -> None:
    folder, _, run = marian
    theirs, ours = hf_tokenizer(folder), RunDir(run).read_tokenizer()
    assert isinstance(ours, MarianTokenizer) and len(ours) == len(theirs.encoder) + 1
    lines = SENTENCES + ["near near", "  the   cat  "]
    expected = [[ours.ours[i] for i in ids] for ids in theirs(lines).input_ids]
    assert [ids + [EOS_ID] for ids in ours.encode(lines)] == expected
    assert UNK_ID in ours.encode(["near"])[0] and ours.encode([">>de<< cat"])[0][0] == ours.ours[2]
    assert ours.encode([">>xx<< cat"])[0][0] == UNK_ID  # a language token outside the vocabulary
    targets = [" ".join(LEXICON[w] for w in line.split() if w in LEXICON) for line in lines]
    labels = theirs(text_target=targets).input_ids
    assert [ids + [EOS_ID] for ids in ours.encode_target(targets)] == [[ours.ours[i] for i in ids] for ids in labels]
    decoded = theirs.batch_decode(labels, skip_special_tokens=True)
    assert ours.decode([[ours.ours[i] for i in ids] for ids in labels]) == decoded
    assert ours.pieces(">>de<< a cat")[0] == ">>de<<" and ours.piece_to_id("</s>") == EOS_ID


def test_positions_equal_marian_sinusoid(marian) -> None:
    model = marian[1]
    table = model.model.encoder.embed_positions.weight.detach()
    torch.testing.assert_close(sinusoidal_encoding(128, 32, "halves"), table, atol=1e-6, rtol=0)
    odd = transformers.MarianMTModel(transformers.MarianConfig(vocab_size=10, d_model=33, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=8,
                                     decoder_ffn_dim=8, encoder_attention_heads=3, decoder_attention_heads=3,
                                     max_position_embeddings=50, pad_token_id=9, decoder_start_token_id=9))
    table = odd.model.decoder.embed_positions.weight.detach()
    torch.testing.assert_close(sinusoidal_encoding(50, 33, "halves"), table, atol=1e-6, rtol=0)


def reference_logits(model: transformers.MarianMTModel, tok: transformers.MarianTokenizer, lines: list[str], targets: list[str]):
    batch = tok(lines, padding=True, return_tensors="pt")
    pad = model.config.pad_token_id
    labels = [ids[:-1] for ids in tok(text_target=targets).input_ids]  # without eos: decoder inputs after start
    width = max(map(len, labels)) + 1
    dec = torch.tensor([[pad] + ids + [pad] * (width - 1 - len(ids)) for ids in labels])
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec).logits
    return batch.input_ids, dec, logits


def our_logits(run: Path, src: torch.Tensor, dec: torch.Tensor, dtype: str = "float32"):
    _, tokenizer, model = load_run_model(RunDir(run))
    model.eval()
    to_ours = torch.tensor(tokenizer.ours)
    src, tgt = to_ours[src], to_ours[dec]
    tgt[:, 0] = BOS_ID  # Marian's decoder start (its pad row) is our bos row
    with torch.no_grad():
        logits = model.generator.logits(model(src, tgt, padding_mask(src, PAD_ID)))
    return logits[..., to_ours], logits.float().log_softmax(-1)[..., to_ours]  # in Marian's id order


def test_logits_equal_on_a_padded_batch(marian) -> None:
    folder, model, run = marian
    targets = ["das haus", "ein kleiner roter baum und das haus", "katze"]
    src, dec, theirs = reference_logits(model, hf_tokenizer(folder), SENTENCES[:3], targets)
    assert (src == model.config.pad_token_id).any()  # the batch is padded
    logits, log_probs = our_logits(run, src, dec)
    torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(log_probs, theirs.log_softmax(-1), atol=1e-5, rtol=0)  # the bos row takes nothing


def generate(model: transformers.MarianMTModel, tok: transformers.MarianTokenizer, lines: list[str], **kw) -> list[tuple[list[int], bool, float]]:
    batch = tok(lines, padding=True, return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=MAX_NEW, do_sample=False, return_dict_in_generate=True,
                         output_scores=True, **kw)
    found, eos, pad = [], model.config.eos_token_id, model.config.pad_token_id
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else [0.0] * len(lines)
    for row, score in zip(out.sequences[:, 1:].tolist(), scores):
        finished = eos in row
        row = row[: row.index(eos)] if finished else [i for i in row if i != pad]
        found.append((row, finished, score))
    return found


def our_search(run: Path, lines: list[str], beam: int, **kw):
    translator = Translator.from_run(run, device="cpu")
    to_marian = translator.tokenizer.rows
    settings = translator.settings(beam=beam, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW - 1, **kw)
    return [([to_marian[i] for i in h.ids], h.finished, h.score)
            for h in (row[0] for row in translator.search(lines, settings))]


def test_greedy_equals_generate(marian) -> None:
    folder, model, run = marian
    tok, lines = hf_tokenizer(folder), SEARCHED
    ours = our_search(run, lines, beam=1)
    theirs = generate(model, tok, lines, num_beams=1, forced_eos_token_id=None)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]
    assert {done for _, done, _ in ours} == {True, False}  # some finish, some reach the limit
    # With the model's generation config Hugging Face forces eos as the last token at the limit.
    forced = generate(model, tok, lines, num_beams=1)
    for (ids, done, _), (hf_ids, hf_done, _) in zip(ours, forced):
        assert (hf_ids, hf_done) == ((ids, done) if done else (ids[: MAX_NEW - 1], True))


def test_beam_equals_generate_with_length_penalty_zero(marian) -> None:
    folder, model, run = marian
    lines = SEARCHED
    ours = our_search(run, lines, beam=4)
    theirs = generate(model, hf_tokenizer(folder), lines, num_beams=4, length_penalty=0.0, early_stopping="never",
                      forced_eos_token_id=None)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]
    assert [s for *_, s in ours] == pytest.approx([s for *_, s in theirs], abs=1e-4)
    assert {done for _, done, _ in ours} == {True, False} and len({len(ids) for ids, _, _ in ours}) > 3


def test_renormalized_generation_config_gives_pad_no_probability(marian, tmp_path: Path) -> None:
    """OPUS-MT's generation configs set renormalize_logits: Hugging Face normalises again
    after banning pad, which the import folds into the model (pad's bias NEVER_LOGIT)."""
    shutil.copytree(marian[0], tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    (tmp_path / "hf" / "generation_config.json").write_text(json.dumps({**config, "renormalize_logits": True}))
    model = reference(tmp_path / "hf")
    assert model.generation_config.renormalize_logits
    import_marian(tmp_path / "hf", tmp_path / "run")
    _, _, ours_model = load_run_model(RunDir(tmp_path / "run"))
    assert ours_model.generator.proj.bias[[PAD_ID, BOS_ID]].tolist() == [NEVER_LOGIT, NEVER_LOGIT]
    ours = our_search(tmp_path / "run", SEARCHED, beam=4)
    theirs = generate(model, hf_tokenizer(tmp_path / "hf"), SEARCHED, num_beams=4, length_penalty=0.0,
                      early_stopping="never", forced_eos_token_id=None)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]
    assert [s for *_, s in ours] == pytest.approx([s for *_, s in theirs], abs=1e-4)


def test_fp16_pytorch_model_bin(tmp_path: Path, marian) -> None:
    """Older OPUS-MT uploads: fp16 pytorch_model.bin with every tied copy and the
    positional tables stored."""
    folder, model, _ = marian
    shutil.copytree(folder, tmp_path / "hf", ignore=shutil.ignore_patterns("model.safetensors"))
    torch.save({k: v.half() for k, v in model.state_dict().items()}, tmp_path / "hf" / "pytorch_model.bin")
    import_marian(tmp_path / "hf", tmp_path / "run")
    rounded = transformers.MarianMTModel(model.config).eval()
    rounded.load_state_dict({k: v if "embed_positions" in k else v.half().float() for k, v in model.state_dict().items()})
    targets = ["das haus", "ein baum"]
    src, dec, theirs = reference_logits(rounded, hf_tokenizer(folder), SENTENCES[:2], targets)
    torch.testing.assert_close(our_logits(tmp_path / "run", src, dec)[0], theirs, atol=1e-5, rtol=0)


def test_untied_lm_head(tmp_path: Path) -> None:
    """tie_word_embeddings false: lm_head is its own matrix (our tie_embeddings false)."""
    model = write_marian(tmp_path / "hf", seed=4, teach_steps=0, tie_word_embeddings=False)
    assert not torch.equal(model.lm_head.weight, model.model.shared.weight)
    import_marian(tmp_path / "hf", tmp_path / "run")
    config = RunDir(tmp_path / "run").read_config().model
    assert config.tie_embeddings is False  # and the embeddings shared as transformers shares them:
    assert config.share_vocab == torch.equal(model.model.encoder.embed_tokens.weight,
                                             model.model.decoder.embed_tokens.weight)
    src, dec, theirs = reference_logits(model, hf_tokenizer(tmp_path / "hf"), SENTENCES[:3], ["das haus", "ein", "hund"])
    torch.testing.assert_close(our_logits(tmp_path / "run", src, dec)[0], theirs, atol=1e-5, rtol=0)


def test_a_decoder_shallower_than_the_encoder(tmp_path: Path) -> None:
    """OPUS-MT's tiny models have a deep encoder and a shallow decoder: 3 + 1 layers here
    give model.n_layers 3, model.decoder_layers 1 and Marian's logits and greedy search. Its ~10 s
    are a second reference taught as the fixture's is: greedy search compared on an untaught model
    would compare one repeated token."""
    model = write_marian(tmp_path / "hf", seed=5, encoder_layers=3, decoder_layers=1)
    import_marian(tmp_path / "hf", tmp_path / "run")
    config = RunDir(tmp_path / "run").read_config().model
    assert (config.n_layers, config.decoder_layers, config.n_decoder_layers) == (3, 1, 1)
    tok = hf_tokenizer(tmp_path / "hf")
    src, dec, theirs = reference_logits(model, tok, SENTENCES[:3], ["das haus", "ein", "hund"])
    torch.testing.assert_close(our_logits(tmp_path / "run", src, dec)[0], theirs, atol=1e-5, rtol=0)
    ours = our_search(tmp_path / "run", SEARCHED, beam=1)
    hf = generate(model, tok, SEARCHED, num_beams=1, forced_eos_token_id=None)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in hf]


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("change, message", [
    ("separate", "separate source and target vocabularies"),
    ("scale", "scale_embedding is False"),
    ("prenorm", "normalize_before is True: pre-norm"),
    ("activation", "activation_function 'tanh' is not supported"),
    ("layers", "decoder_layers (0) must be given, a whole number of at least 1"),
    ("weights", "model.safetensors: not a readable weights file"),
    ("missing", "config.json: missing"),
    ("exists", "exists already; import into a new --run"),
    ("nowhere", "no such folder"),
    ("other", "config.json: model_type is 't5', not a Marian model"),
    ("run_in_proc", "(/proc); give --run a path in a folder you can write"),  # the reason depends on the user
])
def test_what_is_refused_is_one_line(tmp_path: Path, marian, capsys, change: str, message: str) -> None:
    folder = tmp_path / "hf"
    shutil.copytree(marian[0], folder)
    run = tmp_path / "run"
    if change == "separate":
        edit_config(folder, share_encoder_decoder_embeddings=False)
        shutil.copy(folder / "vocab.json", folder / "target_vocab.json")
    elif change == "scale":
        edit_config(folder, scale_embedding=False)
    elif change == "prenorm":
        edit_config(folder, normalize_before=True)
    elif change == "activation":
        edit_config(folder, activation_function="tanh")
    elif change == "layers":
        edit_config(folder, decoder_layers=0)
    elif change == "weights":
        (folder / "model.safetensors").write_bytes(b"not a model")
    elif change == "missing":
        (folder / "config.json").unlink()
    elif change == "other":  # another architecture, without Marian's tokenizer files: named first
        edit_config(folder, model_type="t5")
        (folder / "vocab.json").unlink()
    elif change == "exists":
        run.mkdir()
        (run / "keep.txt").write_text("mine")
    elif change == "run_in_proc":  # /proc exists but takes no folder (root passes os.access there)
        run = Path("/proc/transformer-mt-run")
    source = str(tmp_path / "nowhere" / "hf") if change == "nowhere" else str(folder)
    assert main(["-q", "import", "marian", source, "--run", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert (run / "keep.txt").is_file() if change == "exists" else not run.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.import")]


def test_a_model_name_offline_says_how_to_fetch_it(tmp_path: Path, monkeypatch, capsys) -> None:
    import huggingface_hub

    def offline(**_: object) -> None:
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert main(["-q", "import", "marian", "Helsinki-NLP/opus-mt-en-de", "--run", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hf download Helsinki-NLP/opus-mt-en-de --local-dir DIR" in err


def test_every_feature_works_on_the_imported_run(marian, tmp_path: Path, capsys) -> None:
    from fastapi.testclient import TestClient

    from transformer_mt.server import TranslateLimits, TranslationService, create_app

    _, _, run = marian
    (tmp_path / "src").write_text("the cat sees a dog\nnear the house\n")
    (tmp_path / "ref").write_text("das katze sieht ein hund\nbei das haus\n")
    assert main(["-q", "translate", str(run), "-i", str(tmp_path / "src"), "--nbest", "2", "--beam", "3"]) == 0
    assert main(["-q", "evaluate", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"),
                 "--json"]) == 0
    assert main(["-q", "plot", "attention", str(run), "the cat sees a dog", "--out", str(tmp_path / "a.png")]) == 0
    assert all((tmp_path / f"a-{kind}.png").stat().st_size > 0 for kind in ("encoder", "decoder", "cross"))
    out = capsys.readouterr().out
    assert "0 ||| " in out and '"bleu": ' in out
    assert main(["-q", "doctor", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # no metrics, no saved loss: those checks say why not
    assert {"memorization", "undertrained"} <= set(report["not_checked"])
    assert "unknown_words" in report["checked"] + [f["id"] for f in report["findings"]]
    translator = Translator.from_run(run, device="cpu")
    client = TestClient(create_app(TranslationService(translator, "marian", TranslateLimits(max_chars=300))))
    body = client.post("/api/translate", json={"text": "the cat sees a dog", "beam": 2, "attention": True}).json()
    steps = client.post("/api/steps", json={"text": "the cat sees a dog", "beam": 2}).json()
    assert steps["translation"] == body["translations"][0]
    assert steps["source_tokens"] == ["\u2581the", "\u2581cat", "\u2581sees", "\u2581a", "\u2581dog", "</s>"]
    assert body["results"][0]["attention"] and body["results"][0]["source_tokens"] == steps["source_tokens"][:-1]
    assert all(t["token"] not in ("<pad>", "<s>") for step in steps["steps"] for t in step["top_k"])


def test_fine_tuning_the_imported_model_lowers_its_loss_and_leaves_it(marian, tmp_path: Path) -> None:
    """80 steps at lr_scale 0.3 (~10 s): the fewest that lower the loss of a new task (the
    translation backwards) below 0.95 of where the imported weights start."""
    _, _, run = marian
    before = digest(run)
    data = tmp_path / "data"
    data.mkdir()
    for split, n, seed in (("train", 600, 11), ("valid", 40, 12)):  # a new task: the translation backwards
        src, tgt = corpus(n, seed)
        (data / f"{split}.src").write_text("\n".join(src) + "\n")
        (data / f"{split}.tgt").write_text("\n".join(" ".join(reversed(t.split())) for t in tgt) + "\n")
    files = [f"--data.{split}_{side}={data / f'{split}.{side}'}" for split in ("train", "valid") for side in ("src", "tgt")]
    tuned = tmp_path / "tuned"
    assert main(["-q", "train", str(run / "config.yaml"), "--run", str(tuned), "--init-from", str(run),
                 "--no-progress", "--data.task=", *files, "--train.max_steps=80", "--train.valid_every=80",
                 "--train.warmup_steps=10", "--train.lr_scale=0.3", "--train.device=cpu", "--train.precision=fp32",
                 "--decode.beam=1", "--decode.max_len_b=10"]) == 0
    start = loss_on(run, "best", data / "valid.src", data / "valid.tgt")
    end = loss_on(tuned, "last", data / "valid.src", data / "valid.tgt")
    assert end < 0.95 * start, (start, end)  # a heavily perturbed tiny model learns slowly: 2.31 -> 2.12
    assert digest(run) == before  # the imported run is untouched
    assert all((tuned / name).read_bytes() == (run / name).read_bytes() for name in ("vocab.json", "source.spm",
                                                                                      "target.spm"))
    _, _, model = load_run_model(RunDir(tuned), "last")
    assert model.generator.proj.bias[BOS_ID].item() == NEVER_LOGIT  # never emitted: no gradient moved it


def test_the_imported_run_exports_to_ctranslate2(marian, tmp_path: Path) -> None:
    """An imported run through `export ctranslate2`: CTranslate2's greedy output equals ours
    (pad and bos suppressed there, as our decoders ban them)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    _, _, run = marian
    out = tmp_path / "ct2"
    assert main(["-q", "export", "ctranslate2", str(run), "--out", str(out)]) == 0
    assert {"vocab.json", "source.spm", "target.spm", "model.bin"} <= {p.name for p in out.iterdir()}
    translator = Translator.from_run(run, device="cpu")
    settings = translator.settings(beam=1, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW - 1)
    ours = [row[0] for row in translator.search(SEARCHED, settings)]
    pieces = [translator.tokenizer.id_to_piece(ids) for ids in translator.tokenizer.encode(SEARCHED)]
    engine = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    results = engine.translate_batch(pieces, beam_size=1, length_penalty=0, min_decoding_length=0,
                                     max_decoding_length=MAX_NEW, suppress_sequences=[["<pad>"], ["<s>"]])
    assert [r.hypotheses[0] for r in results] == [h.tokens for h in ours]


def test_the_imported_run_exports_to_hugging_face(marian, tmp_path: Path) -> None:
    """An imported run through `export hf` (its V + 1 rows kept, the bos row named <s>):
    transformers' beam search on the export gives our outputs and scores."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    _, _, run = marian
    out = tmp_path / "hf"
    assert main(["-q", "export", "hf", str(run), "--out", str(out)]) == 0
    model, tok = AutoModelForSeq2SeqLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    translator = Translator.from_run(run, device="cpu")
    assert tok(SEARCHED).input_ids == [ids + [EOS_ID] for ids in translator.tokenizer.encode(SEARCHED)]
    settings = translator.settings(beam=4, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW - 1)
    ours = [(h.ids, h.finished, h.score) for h in (row[0] for row in translator.search(SEARCHED, settings))]
    found = model.generate(**tok(SEARCHED, padding=True, return_tensors="pt"), num_beams=4, length_penalty=0.0,
                           early_stopping="never", max_new_tokens=MAX_NEW, return_dict_in_generate=True,
                           output_scores=True)
    theirs = []
    for row in found.sequences[:, 1:].tolist():
        done = EOS_ID in row
        theirs.append((row[: row.index(EOS_ID)] if done else [i for i in row if i != PAD_ID], done))
    assert [(ids, done) for ids, done, _ in ours] == theirs
    assert [s for *_, s in ours] == pytest.approx(found.sequences_scores.tolist(), abs=1e-4)
