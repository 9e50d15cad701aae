"""The model card (README.md) of a Hugging Face export: YAML metadata as the Hub reads it
(language, license, datasets, metrics, tags), then what the model is, how to run it, its
training data and steps, its scores with their sacreBLEU signatures, and the commands that
made it. Everything comes from the run's own records: config.yaml, metrics.jsonl (the
'valid' events training writes), imported.json, and `evaluate` output saved beside the
run as evaluate.txt (its printed lines, with or without --json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from transformer_mt import __version__
from transformer_mt.common.config import Config
from transformer_mt.runs.directory import RunDir, read_events

EVALUATE_OUTPUT = "evaluate.txt"  # `transformer-mt evaluate RUN ... > RUN/evaluate.txt`, if the user kept it
VALIDATIONS_SHOWN = 10


def model_card(run: RunDir, cfg: Config, checkpoint: str, model_type: str, languages: tuple[str, str] | None,
               command: str) -> str:
    """README.md of the exported folder."""
    validations = read_validations(run.metrics)
    sections = [
        front_matter(cfg, model_type, languages),
        intro(run, model_type, languages, command),
        usage(cfg),
        architecture(cfg, model_type),
        training(run, cfg, checkpoint, validations),
        scores(run, cfg, checkpoint, validations),
        equivalence(),
    ]
    return "\n".join(sections)


def front_matter(cfg: Config, model_type: str, languages: tuple[str, str] | None) -> str:
    meta: dict[str, Any] = {}
    if languages:
        meta["language"] = list(languages)
    meta.update({
        "license": "unknown",  # a placeholder: the licence of the weights follows the training data's
        "library_name": "transformers", "pipeline_tag": "translation",
        "tags": ["translation", "transformer-mt", model_type],
        "datasets": datasets(cfg), "metrics": ["bleu", "chrf"],
    })
    text = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return f"---\n{text}---\n"


def datasets(cfg: Config) -> list[str]:
    """Names of the training data: the built-in task, or the training files' folder."""
    if cfg.data.task:
        return [f"transformer-mt-{cfg.data.task}-task"]
    return sorted({Path(name).parent.name or Path(name).name for name in (cfg.data.train_src, cfg.data.train_tgt)
                   if name})


def intro(run: RunDir, model_type: str, languages: tuple[str, str] | None, command: str) -> str:
    pair = f" ({languages[0]} \u2192 {languages[1]})" if languages else ""
    return (f"# {run.root.name}{pair}\n\n"
            f"A Transformer translation model (Vaswani et al., 2017, \"Attention Is All You Need\") trained with "
            f"transformer-mt {__version__} and exported for Hugging Face transformers as a "
            f"`{model_type}` model with\n\n    {command}\n\n"
            "**Before uploading:** set `license` above (it follows the training data's), and "
            "replace `datasets` with the Hub ids of the corpora where they have one.\n")


def usage(cfg: Config) -> str:
    """How to run it: the Auto classes and generate (every transformers version; version 4
    also has pipeline("translation"), which version 5 removed)."""
    return ("## Use\n\n```python\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
            "name = \"THIS_FOLDER_OR_HUB_ID\"\n"
            "tokenizer, model = AutoTokenizer.from_pretrained(name), AutoModelForSeq2SeqLM.from_pretrained(name)\n"
            "batch = tokenizer([\"A sentence to translate.\"], return_tensors=\"pt\", padding=True)\n"
            f"output = model.generate(**batch, num_beams={cfg.decode.beam})\n"
            "print(tokenizer.batch_decode(output, skip_special_tokens=True))\n```\n\n"
            "With transformers 4, `pipeline(\"translation\", model=name)` runs it too (transformers 5 removed "
            "that task). The tokenizer is the stock `MarianTokenizer` (sentencepiece; no `trust_remote_code`); "
            "the source is raw text: no Moses tokenization, no separate BPE step.\n")


def architecture(cfg: Config, model_type: str) -> str:
    m = cfg.model
    norm = ("pre-norm (x + Sublayer(LayerNorm(x)), a LayerNorm after each stack)" if m.norm_first
            else "post-norm, as in the paper (LayerNorm(x + Sublayer(x)))")
    rows = [("layers (encoder, decoder)", f"{m.n_layers}, {m.n_decoder_layers}"), ("d_model", m.d_model),
            ("d_ff", m.d_ff), ("attention heads", m.n_heads), ("normalisation", norm),
            ("activation", m.activation), ("positions", "sinusoidal, static (max " + str(m.max_positions) + ")"),
            ("vocabulary", f"{m.tgt_vocab_size} joint sentencepiece pieces, one shared embedding"),
            ("output layer tied to the embedding", "yes" if m.tie_embeddings else "no"),
            ("dropout", m.dropout)]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    layout = ("" if m.positional_layout == "halves" else
              "\n\nThe run used the paper's interleaved sinusoid; Hugging Face adds its sines and cosines in two "
              "halves, so the model dimension of every weight was permuted to match (exact: the same function).")
    return f"## Model\n\n`{model_type}` architecture:\n\n| setting | value |\n|---|---|\n{table}{layout}\n"


def training(run: RunDir, cfg: Config, checkpoint: str, validations: list[dict[str, Any]]) -> str:
    imported = run.root / "imported.json"
    if imported.is_file():
        source = json.loads(imported.read_text(encoding="utf-8")).get("source", "?")
        origin = f"Imported from the Marian model `{source}` with `transformer-mt import marian`"
        origin += "; fine-tuned here.\n" if validations else ".\n"
    else:
        origin = ""
    d = cfg.data
    data = (f"the built-in `{d.task}` task ({d.task_size} pairs)" if d.task else
            f"`{d.train_src}` \u2192 `{d.train_tgt}` (validation: `{d.valid_src}` \u2192 `{d.valid_tgt}`)")
    if d.train_pairs:
        data += f", its first {d.train_pairs} usable pairs (data.train_pairs)"
    batch = f"{d.batch_sentences} sentences" if d.batch_sentences else f"{d.max_tokens} tokens"
    steps = max((e["step"] for e in read_events(run.metrics)), default=None)
    done = f"{steps} steps" if steps is not None else "no training steps recorded"
    return (f"## Training\n\n{origin}Data: {data}; joint sentencepiece vocabulary ({d.vocab_type}, "
            f"{d.vocab_size} pieces asked).\n\nTraining: {done} (train.max_steps {cfg.train.max_steps}, "
            f"{batch} per batch x {cfg.train.accumulate} accumulated, warmup "
            f"{cfg.train.warmup_steps}, label smoothing {cfg.train.label_smoothing}); exported checkpoint: `{checkpoint}`. The run's full configuration is "
            "`transformer_mt_config.yaml` in this folder; `transformer-mt train transformer_mt_config.yaml "
            "--run RUN` trains it again.\n")


def scores(run: RunDir, cfg: Config, checkpoint: str, validations: list[dict[str, Any]]) -> str:
    parts = ["## Scores\n"]
    if validations:
        parts.append(validation_table(validations, checkpoint, cfg))
    evaluated = run.root / EVALUATE_OUTPUT
    if evaluated.is_file():
        lines = [line for line in evaluated.read_text(encoding="utf-8").splitlines() if line.strip()]
        parts.append(f"`transformer-mt evaluate` (saved in the run as {EVALUATE_OUTPUT}):\n\n```\n"
                     + "\n".join(lines) + "\n```\n")
    if len(parts) == 1:
        parts.append("No scores recorded in the run (no validation events in metrics.jsonl, no evaluate.txt).\n")
    return "\n".join(parts)


def validation_table(validations: list[dict[str, Any]], checkpoint: str, cfg: Config) -> str:
    """The last validations (metrics.jsonl), the exported one marked, and the signatures
    validation scores with (BLEU with the run's data.bleu_tokenize, chrF's defaults)."""
    bleu, chrf = validation_signatures(cfg.data.bleu_tokenize)
    chosen = exported_validation(validations, checkpoint)
    rows = []
    for v in validations[-VALIDATIONS_SHOWN:]:
        mark = " (exported)" if v is chosen else ""
        rows.append(f"| {v['step']}{mark} | {fmt(v.get('valid_loss'))} | {fmt(v.get('bleu'), 2)} | "
                    f"{fmt(v.get('chrf'), 2)} | {fmt(v.get('exact_match'))} |")
    return (f"Validation during training (metrics.jsonl; decoded with beam {cfg.decode.beam}, length penalty "
            f"{cfg.decode.length_penalty}):\n\n| step | loss | BLEU | chrF | exact match |\n|---|---|---|---|---|\n"
            + "\n".join(rows) + f"\n\nsacreBLEU signatures: BLEU `{bleu}`, chrF `{chrf}` (validation scores with "
            "these settings, one reference; the version is this export's sacreBLEU).\n")


def validation_signatures(tokenize: str) -> tuple[str, str]:
    """The signatures of what validation scored with (the run's data.bleu_tokenize), one reference."""
    from transformer_mt.common.evaluation import score

    scored = score(["a"], ["a"], tokenize=tokenize)
    return scored.bleu_signature, scored.chrf_signature


def exported_validation(validations: list[dict[str, Any]], checkpoint: str) -> dict[str, Any] | None:
    """The validation of the exported weights: the last improving one for best, the
    last one for last; none for an average."""
    if checkpoint == "last":
        return validations[-1]
    if checkpoint == "best":
        return next((v for v in reversed(validations) if v.get("best")), None)
    return None


def fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def read_validations(path: Path) -> list[dict[str, Any]]:
    """The 'valid' events of metrics.jsonl, in order."""
    return [event for event in read_events(path) if event.get("event") == "valid"]


def equivalence() -> str:
    return ("## Decoding as in transformer-mt\n\n"
            "`generate` with `num_beams=1`, or with `num_beams=k, length_penalty=0`, gives the tokens transformer-mt "
            "gives with `--beam 1` or `--beam k --length-penalty 0` (tested). transformers divides a hypothesis' "
            "log-probability by |Y| ** length_penalty, transformer-mt by GNMT's ((5 + |Y|) / 6) ** alpha: with a "
            "length penalty above 0 the two can prefer different hypotheses. transformers stops at `max_length` "
            "(generation_config.json); transformer-mt at max_len_a * source length + max_len_b.\n")
