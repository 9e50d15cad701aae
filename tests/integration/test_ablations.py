"""benchmarks/ablations.py: the notes' rows resolve to the notes' recipe, every other row is
its one stated change, a tiny row runs end to end per seed and is kept, and the padding the
rows do not copy (the notes pad every sentence to 500) changes no number."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmark_loader import load_benchmark
from run_helpers import write_multi30k
from transformer_mt.common.config import Config, load_config, replace
from transformer_mt.model.layers import SublayerConnection
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import build_model

ablations = load_benchmark("ablations")
DATA = Path("data")


def resolved(name: str) -> Config:
    return ablations.row_config(ablations.rows()[name], DATA)


def changed_keys(cfg: Config, base: Config) -> set[str]:
    """The dotted keys whose values differ between two configs."""
    a, b = cfg.to_dict(), base.to_dict()
    return {f"{section}.{key}" for section in a for key in a[section] if a[section][key] != b[section][key]}


def keys_of(overrides: tuple[str, ...]) -> set[str]:
    return {text.removeprefix("--").split("=", 1)[0] for text in overrides}


def test_the_notes_row_is_the_notes_recipe() -> None:
    """Each setting of the notes' experiment 1 on the row's resolved config (the one it
    trains), the model it builds included."""
    cfg = resolved("notes")
    m, d, t, decode = cfg.model, cfg.data, cfg.train, cfg.decode
    assert (m.n_layers, m.n_decoder_layers, m.d_model, m.d_ff, m.n_heads) == (2, 2, 128, 256, 4)
    assert (m.dropout, m.attention_p, m.activation_p) == (0.1, 0.1, 0.1)  # MultiHeadedAttention(h, d_model)'s 0.1 too
    assert m.norm_first and m.init == "notes" and m.scale_embeddings and m.positional == "sinusoidal"
    assert not m.tie_embeddings and not m.share_vocab
    torch.manual_seed(0)
    model = build_model(replace(m, src_vocab_size=3000, tgt_vocab_size=2000))
    assert isinstance(model.encoder.norm, nn.LayerNorm) and isinstance(model.decoder.norm, nn.LayerNorm)
    sublayers = [s for s in model.modules() if isinstance(s, SublayerConnection)]
    assert len(sublayers) == 2 * 2 + 2 * 3 and all(s.norm_first for s in sublayers)  # x + dropout(sublayer(norm(x)))
    assert abs(float(model.src_embed.lut.weight.detach().std()) - 1.0) < 0.02  # nn.Embedding's N(0, 1), not Xavier
    assert model.generator.proj.weight is not model.tgt_embed.lut.weight
    assert (d.vocab_type, d.joint_vocab, d.train_pairs, d.batch_sentences) == ("word", False, 5000, 32)
    assert d.vocab_size >= 24_889 + 4  # every word of even all 29,000 pairs (test_word_vocab counts 5,000's)
    assert decode.unknown_words == "pad"
    plain_adam = torch.optim.Adam([torch.zeros(1, requires_grad=True)]).defaults  # optim.Adam(params, lr=1e-3)
    assert (t.schedule, t.lr, t.adam_betas, t.adam_eps, t.weight_decay) == (
        "constant", plain_adam["lr"], plain_adam["betas"], plain_adam["eps"], plain_adam["weight_decay"])
    assert (t.label_smoothing, t.clip_norm, t.accumulate, t.precision) == (0.0, 0.0, 1, "fp32")
    assert t.max_steps == 30 * (5000 // 32) == 4680 and t.valid_every == t.max_steps
    assert (decode.beam, decode.max_len_a, decode.max_len_b + 1) == (1, 0.0, 50)  # greedy, 50 steps (eos included)
    assert ablations.rows()["notes"].checkpoint == "last"


def test_their_hypotheses_and_each_fix_change_only_what_they_say() -> None:
    """Every row but the notes' own is its base's recipe with its own overrides and nothing
    else: `+independent_init` draws each module on its own; experiment 2 is 10,000 pairs at
    d_model 512 and d_ff 1,024 for 30 of its epochs; a fix changes its keys only (from
    `+independent_init`, where it was measured, or, decoding only, from `notes`); a Table 3
    row changes `all_fixes` in its keys only."""
    rows, notes = ablations.rows(), resolved("notes")
    independent = resolved("+independent_init")
    assert changed_keys(independent, notes) == {"model.init"} and independent.model.init == "pytorch"
    ten = resolved("notes_10k")
    assert changed_keys(ten, independent) == {"data.train_pairs", "model.d_model", "model.d_ff", "train.max_steps",
                                              "train.valid_every"}
    assert (ten.data.train_pairs, ten.model.d_model, ten.model.d_ff, ten.train.max_steps) == (10000, 512, 1024,
                                                                                              30 * (10000 // 32))
    assert changed_keys(resolved("notes_n4"), independent) == {"model.n_layers"}
    assert changed_keys(resolved("notes_n6"), independent) == {"model.n_layers"}
    for name, (_, overrides) in ablations.FIXES.items():
        base = resolved(rows[name].base)
        changed = changed_keys(resolved(name), base)
        assert changed and changed <= keys_of(overrides), name
        assert rows[name].steps == notes.train.max_steps and rows[name].checkpoint == "last"
        assert rows[name].decode_only == all(key.startswith("decode.") for key in changed) == (rows[name].base == "notes")
    together = resolved("all_fixes")
    for name, (_, overrides) in ablations.TABLE_3.items():
        assert changed_keys(resolved(name), together) == keys_of(overrides), name
    assert together.model.init == "xavier" and together.data.vocab_type == "bpe" and together.decode.beam == 4
    preset = load_config("multi30k_de_en", ablations.data_overrides(DATA))
    ours = resolved("ours")
    assert changed_keys(ours, preset) == {"train.budget_minutes", "train.patience", "train.max_steps",
                                          "train.valid_every", "train.log_every", "train.keep_last"}
    assert ours.train.budget_minutes == 0 and ours.train.max_steps == notes.train.max_steps
    for name in rows:  # no hidden scale of the learning rate: the default, or the preset's own
        assert resolved(name).train.lr_scale == (preset.train.lr_scale if name == "ours" else 1.0), name


def test_padding_every_sentence_to_500_changes_no_number() -> None:
    """The notes pad every sentence to 500 positions, the rows to the batch's longest: the
    real positions' outputs are the same, since padded keys get weight 0 and every other
    operation is per position."""
    torch.manual_seed(0)
    model = build_model(replace(resolved("notes").model, src_vocab_size=50, tgt_vocab_size=40)).eval()
    src = [[5, 9, 7, 3], [8, 3]]
    tgt = [[2, 11, 12, 13], [2, 14]]

    def outputs(width: int) -> list[torch.Tensor]:
        pad = lambda rows: torch.tensor([r + [0] * (width - len(r)) for r in rows])  # noqa: E731
        s, t = pad(src), pad(tgt)
        with torch.no_grad():
            logits = model.generator(model(s, t, padding_mask(s, 0)))
        return [logits[i, : len(row)] for i, row in enumerate(tgt)]

    for tight, wide in zip(outputs(4), outputs(500)):
        assert torch.allclose(tight, wide, atol=1e-5)


def test_a_quick_row_runs_per_seed_and_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    write_multi30k(tmp_path / "data")
    out, results = tmp_path / "runs", tmp_path / "results.jsonl"
    argv = ["ablations.py", "--data", str(tmp_path / "data"), "--out", str(out), "--results", str(results),
            "--rows", "notes", "--seeds", "1,2", "--steps", "4", "--quick", "--json"]
    monkeypatch.setattr(sys, "argv", argv)
    assert ablations.main() == 0
    records = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["row"], r["seed"], r["steps"]) for r in records] == [("notes", 1, 4), ("notes", 2, 4)]
    monkeypatch.setattr(sys, "argv", [a if a != "notes" else "notes,+beam4" for a in argv])  # decodes the notes'
    assert ablations.main() == 0  # weights of each seed: nothing more trains
    beams = [r for r in json.loads(capsys.readouterr().out.strip().splitlines()[-1]) if r["row"] == "+beam4"]
    assert [(r["row"], r["seed"], r["decoded"], r["train_loss"]) for r in beams] == [
        ("+beam4", r["seed"], r["recipe"], r["train_loss"]) for r in records]
    assert not list(out.glob("+beam4*")) and beams[0]["recipe"] != records[0]["recipe"]
    for r in records:
        assert r["train_loss"] > 0 and 0 <= r["valid_bleu"] <= 100 and 0 <= r["test_bleu"] <= 100
        assert r["checkpoint"] == "last" and "--decode.unknown_words=pad" in r["overrides"]
    assert records[0]["recipe"] != records[1]["recipe"]  # the seed is part of what a run trains
    assert len(list(out.glob("notes_seed1_*/source.model"))) == 1  # a word vocabulary per side
    kept = results.read_text()
    monkeypatch.setattr(sys, "argv", argv + ["--markdown", "--chart", str(tmp_path / "chart.png")])
    assert ablations.main() == 0  # a report: nothing trains, nothing is written
    assert results.read_text() == kept
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1]) == records
    row = next(line for line in printed if line.startswith("| `notes` |"))
    mean = sum(r["test_bleu"] for r in records) / 2
    assert "| 2 | 4 |" in row and f"{mean:.1f} ± " in row
    assert (tmp_path / "chart.png").stat().st_size > 1000


def test_the_table_gives_each_rows_difference_and_flags_those_within_twice_the_spread() -> None:
    """A difference rounds to one place without a sign-only "-0.0", and a row within twice the
    larger seed spread of its base is named on the table's last line."""
    every = ablations.rows()
    chosen = [every["+independent_init"], every["+warmup"], every["+xavier"]]

    def runs(*bleus: float) -> list[dict]:
        return [{"steps": 4680, "epochs": 30.0, "parameters": 10, "train_loss": 0.5, "valid_bleu": b,
                 "test_bleu": b, "test_chrf": 30.0} for b in bleus]

    table = ablations.markdown_table(chosen, {"+independent_init": runs(12.0, 13.0, 14.0), "+warmup": runs(12.96),
                                              "+xavier": runs(22.0)})
    assert "| +0.0 from `+independent_init` |" in next(line for line in table.splitlines() if "`+warmup`" in line)
    assert "| +9.0 from `+independent_init` |" in next(line for line in table.splitlines() if "`+xavier`" in line)
    assert table.splitlines()[-1].endswith(": `+warmup`")  # |-0.04| < 2 x 1.0; 9.0 is not


def test_a_rows_difference_comes_from_its_base_even_when_only_the_row_is_chosen() -> None:
    """`--rows table3` chooses rows measured from `all_fixes` without choosing `all_fixes`: the
    table still gives their difference from its record, and only a record of today's recipe
    counts (one of another recipe is ignored)."""
    every = ablations.rows()
    args = argparse.Namespace(seeds=[1], data=DATA, steps=None, quick=False)

    def record(name: str, bleu: float, recipe: str | None = None) -> dict:
        fingerprint = recipe or ablations.recipe(ablations.row_config(every[name], DATA))
        return {"row": name, "seed": 1, "recipe": fingerprint, "steps": 4680, "epochs": 5.2, "parameters": 10,
                "train_loss": 3.0, "valid_bleu": bleu, "test_bleu": bleu, "test_chrf": 50.0}

    records = [record("all_fixes", 36.0), record("A_h1", 34.5), record("all_fixes", 30.0, recipe="older")]
    found = ablations.current(records, [every["A_h1"]], args)
    line = next(line for line in ablations.markdown_table([every["A_h1"]], found).splitlines() if "`A_h1`" in line)
    assert "| -1.5 from `all_fixes` |" in line


def test_checkpoint_every_changes_no_number_and_a_stopped_run_continues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys) -> None:
    """--checkpoint-every validates part-way and leaves the record as it was (same recipe,
    same loss and scores); a run stopped after its training (before its record) is not
    trained again on the next call."""
    write_multi30k(tmp_path / "data")
    common = ["ablations.py", "--data", str(tmp_path / "data"), "--rows", "notes", "--seeds", "1", "--steps", "4",
              "--quick", "--json"]

    def records(out: str, *extra: str) -> list[dict]:
        monkeypatch.setattr(sys, "argv", common + ["--out", str(tmp_path / out), *extra])
        assert ablations.main() == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    def stopped(*_: object) -> None:
        raise KeyboardInterrupt  # the session ends after training, before the record is written

    once = records("once")
    with monkeypatch.context() as patch:
        patch.setattr(ablations, "score", stopped)
        with pytest.raises(KeyboardInterrupt):
            records("often", "--checkpoint-every", "2")
    often = records("often", "--checkpoint-every", "2")
    same = ("recipe", "train_loss", "valid_loss", "valid_bleu", "test_bleu", "test_chrf")
    assert [{k: r[k] for k in same} for r in often] == [{k: r[k] for k in same} for r in once]
    events = [json.loads(line) for line in next((tmp_path / "often").glob("notes_seed1_*/metrics.jsonl")).open()]
    assert [e["step"] for e in events if e["event"] == "valid"] == [2, 4]
    assert [e["step"] for e in events if e["event"] == "train"] == [1, 2, 3, 4]  # trained once


PAGES = [Path(__file__).resolve().parents[2] / "docs" / name for name in ("ablations.md", "ablations.zh.md")]
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


def backed_numbers(chosen: list, found: dict[str, list[dict]]) -> set[str]:
    """Every decimal the results file backs, as the pages write it: each row's per-seed
    values, means and spreads (BLEU, chrF, minutes to one place, losses to two), its
    difference from its base and from `notes`, its epochs and its hosts' matmul peaks, the decimals
    of its `--doctor` reports; the
    numbers of each row's stated change (its settings and the paper's Table 3 score it stands
    for); and the scales the pages explain, computed here: the RMS of N(0, 1) embeddings times
    sqrt(d_model) at 128 and 512 and the RMS of the sinusoidal encoding (1 / sqrt 2)."""
    backed = {f"{math.sqrt(128):.1f}", f"{math.sqrt(512):.1f}", f"{math.sqrt(0.5):.2f}"}
    for row in chosen:
        records = found[row.name]
        stated = [row.what, *row.overrides, ablations.PAPER_TABLE_3.get(row.name, "")]
        backed |= set(DECIMAL.findall(" ".join(stated)))
        for key, digits in (("test_bleu", 1), ("valid_bleu", 1), ("test_chrf", 1), ("train_minutes", 1),
                            ("train_loss", 2), ("epochs", 1)):
            values = [r[key] for r in records]
            backed |= {f"{v:.{digits}f}" for v in values}
            if len(values) > 1:
                mean, sd = ablations.mean_sd(values)
                backed |= {f"{mean:.{digits}f}", f"{sd:.{digits}f}"}
        for base in {row.base, "notes"} - {""}:
            diff = ablations.difference(row.name, found, base)
            backed |= {f"{abs(diff[0]):.1f}"} if diff else set()
        backed |= {f"{v:.0f}" for r in records for v in (r.get("peaks_gflops") or {}).values()}
        reports = [r["report"] for (name, _), r in ablations.doctor_reports().items() if name == row.name]
        backed |= set(DECIMAL.findall(json.dumps(reports)))  # what `--doctor` printed of the row's runs
    return backed


TABLES = ("study", "all_fixes,table3", "ladder")  # the pages' tables, as `--rows` names their rows


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_ablations_pages_show_the_results_files_tables_and_no_other_number(page: Path) -> None:
    """The page holds `--markdown`'s tables of the committed results in its language (the
    study's rows, Table 3's rows with the row they change, the ladder), and every decimal in
    its prose is a number those results back (a claim without its run fails here)."""
    every, records = ablations.rows(), ablations.read_records(ablations.RESULTS)
    args = ablations.argparse.Namespace(data=ablations.DATA, seeds=[1, 2, 3], steps=None, quick=False)
    prose, backed = page.read_text(encoding="utf-8"), set()
    language = "zh" if page.name.endswith(".zh.md") else "en"
    for names in TABLES:
        chosen = ablations.choose(names, every, None)
        found = ablations.current(records, chosen, args)
        table = ablations.markdown_table(chosen, found, language)
        assert table in prose, f"--rows {names} --markdown --language {language}"
        prose = prose.replace(table, "")
        backed |= backed_numbers(chosen, found)
        # the same recipe's records from another host, which the tables' newer records supersede,
        # back the page's comparison of hosts
        recipes = {r["recipe"] for shown in found.values() for r in shown}
        backed |= {f"{r['test_bleu']:.1f}" for r in records if r["recipe"] in recipes}
    assert sorted(set(DECIMAL.findall(prose)) - backed) == []


def test_the_doctors_costs_are_the_results_files_differences() -> None:
    """What `doctor` says each cause cost is each row's mean difference from its base."""
    from transformer_mt.diagnosis.finding import MEASURED

    args = argparse.Namespace(seeds=[1, 2, 3], steps=None, quick=False, data=DATA)
    every = ablations.rows()
    found = ablations.current(ablations.read_records(ablations.RESULTS), [every[row] for row in MEASURED], args)
    for row, (_, bleu) in MEASURED.items():
        assert round(ablations.difference(row, found, every[row].base)[0], 1) == bleu, row


def test_the_ladder_adds_one_fix_a_rung_and_ends_at_all_fixes() -> None:
    """Each rung is its predecessor with one fix's keys changed (a decoding fix decodes the
    predecessor's runs), the last rung is `all_fixes` itself (its records count), and each
    leave-one-out row is `all_fixes` without one fix's keys."""
    rows = ablations.rows()
    rungs = [row for row in rows.values() if row.name.startswith("L")]
    assert [row.name.split("+", 1)[1] for row in rungs] == [fix[1:] for fix in ablations.LADDER]
    for row in rungs:
        fix = "+" + row.name.split("+", 1)[1]
        changed = changed_keys(resolved(row.name), resolved(row.base))
        assert changed and changed <= keys_of(ablations.FIXES[fix][1]), row.name
        assert row.decode_only == (fix in ablations.DECODE_ONLY)
    assert resolved(rungs[-1].name) == resolved("all_fixes")  # so all_fixes' records are the last rung's
    for fix in ablations.LEFT_OUT:
        assert changed_keys(resolved(f"all_fixes-{fix[1:]}"), resolved("all_fixes")) <= keys_of(ablations.FIXES[fix][1])
