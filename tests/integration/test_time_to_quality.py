"""benchmarks/time_to_quality.py trains a recipe under a budget, scores both test sets,
keeps the record, skips it when run again, and draws the chart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmark_loader import load_benchmark
from run_helpers import write_multi30k

SMALL = ["--override=--model.n_layers=1", "--override=--model.d_model=32", "--override=--model.d_ff=64",
         "--override=--train.warmup_steps=2", "--override=--decode.max_len_b=5", "--override=--data.vocab_size=60"]


def test_a_budgeted_run_is_scored_kept_and_charted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    ttq = load_benchmark("time_to_quality")
    write_multi30k(tmp_path / "data", ("en", "de"), lines=40, splits=("train", "val", "test_2016_flickr", "test_2017_flickr"), seed=1)
    results, chart = tmp_path / "results.jsonl", tmp_path / "ttq.png"
    argv = ["time_to_quality.py", "--preset", "multi30k_en_de", "--budgets", "0.02", "--data", str(tmp_path / "data"),
            "--out", str(tmp_path / "runs"), "--results", str(results), "--json", *SMALL]
    monkeypatch.setattr(sys, "argv", argv)
    assert ttq.main() == 0
    (record,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["budget_minutes"] == 0.02 and record["steps"] >= 2
    assert set(record["test"]) == {"test_2016_flickr", "test_2017_flickr"}
    assert all(0 <= v["bleu"] <= 100 and v["bleu_lc_tok"] is not None for v in record["test"].values())
    assert record["peaks_gflops"]["fp32"] > 0
    kept = results.read_text()
    monkeypatch.setattr(sys, "argv", argv + ["--chart", str(chart)])
    assert ttq.main() == 0  # the same preset, budget and overrides: read back, not trained again
    assert results.read_text() == kept
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == [record]
    assert chart.stat().st_size > 1000
    monkeypatch.setattr(sys, "argv", argv + ["--again"])
    assert ttq.main() == 0  # trained again beside the first run, and recorded
    (again,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert Path(again["run"]).name == Path(record["run"]).name + "_2" and Path(record["run"]).is_dir()
    assert results.read_text().splitlines() == kept.splitlines() + [json.dumps(again)]


def test_a_recipe_is_what_is_trained_not_how_it_was_spelled() -> None:
    """A run recorded with overrides is a run of the preset once the preset says the same
    (the search's winner becomes the preset); data files and the budget are not the recipe."""
    ttq = load_benchmark("time_to_quality")
    from transformer_mt.common.config import load_config

    today = ttq.recipe("multi30k_en_de", [])
    dropout = load_config("multi30k_en_de").model.dropout
    assert ttq.recipe("multi30k_en_de", [f"--model.dropout={dropout}"]) == today
    assert ttq.recipe("multi30k_en_de", ["--data.train_src=elsewhere.en", "--train.budget_minutes=5"]) == today
    assert ttq.recipe("multi30k_en_de", [f"--model.dropout={dropout + 0.1:.2f}"]) != today
    assert ttq.recipe("multi30k_en_de", ["--train.precision=fp32"]) != today
    assert ttq.recipe("multi30k_en_de", ["--data.train_pairs=5000"]) != today  # fewer pairs: another recipe
    assert ttq.recipe("multi30k_en_de", ["--decode.length_penalty=0.6"]) != today  # decoding is part of it
    # the two directions train the same recipe on other files: a record's key holds the preset too
    assert ttq.key({"preset": "multi30k_de_en", "budget_minutes": 60, "recipe": ttq.recipe("multi30k_de_en", [])}) \
        != ttq.key({"preset": "multi30k_en_de", "budget_minutes": 60, "recipe": today})


PRESETS = ("multi30k_en_de", "multi30k_de_en")


def committed_records(ttq) -> list[dict]:
    return [json.loads(line) for line in ttq.RESULTS.read_text().splitlines() if line.strip()]


def test_the_committed_results_hold_runs_of_the_presets_as_they_are() -> None:
    """The README's and docs' time-to-quality numbers are the committed records of today's
    presets: each preset's fingerprint matches recorded hours, and with dropout 0.2 recorded
    half hours. A key outside FINGERPRINTED (added since the records began) at its default
    leaves the fingerprint as it was; set otherwise, it is another recipe."""
    from transformer_mt.common.config import Config

    ttq = load_benchmark("time_to_quality")
    records = committed_records(ttq)
    defaults = Config().to_dict()
    for preset in PRESETS:
        runs = ttq.todays_runs(records, preset)
        assert 60.0 in {float(r["budget_minutes"]) for r in runs[""]}, preset
        assert 30.0 in {float(r["budget_minutes"]) for r in runs[" (dropout 0.2)"]}, preset
        today = ttq.recipe(preset, [])
        for section, values in defaults.items():
            for name in set(values) - set(ttq.FINGERPRINTED[section].split()):
                value = json.dumps(values[name]) if isinstance(values[name], str) else values[name]
                assert ttq.recipe(preset, [f"--{section}.{name}={value}"]) == today, name
        assert ttq.recipe(preset, ["--model.decoder_layers=1"]) != today
        assert ttq.recipe(preset, ["--train.weight_decay=0.01"]) != today


class WithOption:
    """A config as it would be with one more option, model.new_option = `value` (default 0)."""

    def __init__(self, cfg, value: int) -> None:
        self.cfg, self.value = cfg, value

    def to_dict(self) -> dict:
        out = self.cfg.to_dict()
        out["model"]["new_option"] = self.value
        return out


def test_an_option_added_to_the_config_leaves_every_record_matching(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding an option needs no edit in time_to_quality.py: at its default, every committed
    record matches what it matched before, the fingerprints of the presets and their variants
    are as they were; a run that sets the option is another recipe."""
    ttq = load_benchmark("time_to_quality")
    records = committed_records(ttq)

    def matched() -> dict:
        return {preset: {label: [records.index(r) for r in runs]
                         for label, runs in ttq.todays_runs(records, preset).items()} for preset in PRESETS}

    def fingerprints() -> list[str]:
        return [ttq.recipe(preset, overrides, lowercase) for preset in PRESETS for overrides in ttq.VARIANTS.values()
                for lowercase in (False, True)]

    before, fingerprinted = matched(), fingerprints()
    assert sum(map(len, before["multi30k_en_de"].values())) >= 10
    load_config, config = ttq.load_config, ttq.Config
    monkeypatch.setattr(ttq, "Config", lambda: WithOption(config(), 0))
    monkeypatch.setattr(ttq, "load_config", lambda *args: WithOption(load_config(*args), 0))
    assert matched() == before and fingerprints() == fingerprinted
    monkeypatch.setattr(ttq, "load_config", lambda *args: WithOption(load_config(*args), 1))
    assert not set(fingerprints()) & set(fingerprinted)


def test_the_markdown_table_lists_the_runs_of_todays_recipe_only() -> None:
    ttq = load_benchmark("time_to_quality")
    scores = {"test_2016_flickr": {"bleu": 38.79, "bleu_lc_tok": 39.16, "chrf": 62.97}}
    today = {"preset": "multi30k_en_de", "budget_minutes": 60.0, "train_minutes": 59.4, "steps": 8123,
             "valid_bleu": 39.91, "test": scores, "recipe": ttq.recipe("multi30k_en_de", [])}
    other = dict(today, budget_minutes=10.0, recipe=ttq.recipe("multi30k_en_de", ["--model.n_layers=1"]))
    fp32 = dict(today, steps=5309, recipe=ttq.recipe("multi30k_en_de", ["--train.precision=fp32"]))
    table = ttq.markdown_table([other, fp32, today]).splitlines()
    assert len(table) == 4
    assert table[2] == "| multi30k_en_de | 60 | 59.4 | 8,123 | 39.9 | 38.8 / 39.2 / 63.0 |  |"
    assert table[3] == "| multi30k_en_de (fp32) | 60 | 59.4 | 5,309 | 39.9 | 38.8 / 39.2 / 63.0 |  |"


def test_the_charts_numbers_go_where_runs_of_one_budget_do_not_cover_them() -> None:
    """Three runs of one budget within a BLEU: the highest's number above, the lowest's below,
    the middle one's to its left (a second one between, to its right); a run alone at its
    budget gets its number above."""
    ttq = load_benchmark("time_to_quality")
    hour = [(58.9, 39.1), (58.7, 38.7), (58.5, 38.5), (28.4, 38.6)]
    above, below = ttq.label_place(58.9, 39.1, hour), ttq.label_place(58.5, 38.5, hour)
    left = ttq.label_place(58.7, 38.7, hour)
    assert above[0][1] > 0 and below[0][1] < 0 and left[0][0] < 0 and left[1] == "right"
    assert ttq.label_place(28.4, 38.6, hour) == above
    four = hour + [(57.0, 38.6)]  # two between the highest and the lowest: left, then right
    assert ttq.label_place(58.7, 38.7, four) == left
    right = ttq.label_place(57.0, 38.6, four)
    assert right[0][0] > 0 and right[1] == "left"


def test_a_run_with_another_seed_is_a_run_of_the_recipe() -> None:
    """--train.seed=N trains the same recipe: its runs are listed beside the preset's own seed,
    named by their seed, and the chart's line goes through each budget's mean; a seed with
    another change is not the recipe."""
    ttq = load_benchmark("time_to_quality")

    def run(budget: float, minutes: float, bleu: float, overrides: list[str]) -> dict:
        return {"preset": "multi30k_en_de", "budget_minutes": budget, "train_minutes": minutes, "steps": 100,
                "valid_bleu": 40.0, "test": {"test_2016_flickr": {"bleu": bleu, "bleu_lc_tok": bleu, "chrf": 60.0}},
                "overrides": overrides, "recipe": ttq.recipe("multi30k_en_de", overrides)}

    one, two = run(60.0, 58.0, 39.1, []), run(60.0, 56.0, 38.2, ["--train.seed=2"])
    half = run(30.0, 28.0, 38.0, [])
    changed = run(60.0, 57.0, 30.0, ["--train.seed=2", "--model.n_layers=1"])
    runs = ttq.todays_runs([one, two, half, changed], "multi30k_en_de")[""]
    assert runs == [half, one, two]
    rows = ttq.markdown_table([one, two, changed]).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| multi30k_en_de", "| multi30k_en_de (seed 2)"]
    assert ttq.budget_means(runs) == [(28.0, 38.0), (57.0, pytest.approx(38.65))]


def test_a_variant_that_is_the_recipe_itself_is_listed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant that overrides a key to the preset's own value trains the preset's recipe:
    its runs are listed once, as the recipe's, and another variant's under its label."""
    from transformer_mt.common.config import load_config

    ttq = load_benchmark("time_to_quality")
    own = load_config("multi30k_en_de").model.dropout
    monkeypatch.setattr(ttq, "VARIANTS", {"": [], " (same)": [f"--model.dropout={own}"],
                                          " (other)": [f"--model.dropout={own + 0.1:.2f}"]})
    scores = {"test_2016_flickr": {"bleu": 38.79, "bleu_lc_tok": 39.16, "chrf": 62.97}}
    today = {"preset": "multi30k_en_de", "budget_minutes": 30.0, "train_minutes": 28.6, "steps": 3850,
             "valid_bleu": 37.8, "test": scores, "recipe": ttq.recipe("multi30k_en_de", [])}
    other = dict(today, steps=3923, recipe=ttq.recipe("multi30k_en_de", [f"--model.dropout={own + 0.1:.2f}"]))
    assert ttq.markdown_table([other, today]).splitlines()[2:] == [
        "| multi30k_en_de | 30 | 28.6 | 3,850 | 37.8 | 38.8 / 39.2 / 63.0 |  |",
        "| multi30k_en_de (other) | 30 | 28.6 | 3,923 | 37.8 | 38.8 / 39.2 / 63.0 |  |"]


def test_a_run_folder_is_named_by_what_it_trains(tmp_path: Path) -> None:
    """A run left by an earlier version of a preset is not resumed as the preset of today
    (it would be recorded under today's recipe); the same config spelled otherwise is the
    same run; --again puts a new run beside it."""
    from transformer_mt.common.config import load_config

    ttq = load_benchmark("time_to_quality")
    shipped = Path(ttq.__file__).resolve().parents[1] / "src" / "transformer_mt" / "configs" / "multi30k_en_de.yaml"
    own = load_config("multi30k_en_de").model.dropout
    earlier = tmp_path / "multi30k_en_de.yaml"
    earlier.write_text(shipped.read_text().replace(f"dropout: {own}", f"dropout: {own - 0.1:.1f}", 1))
    assert load_config(earlier).model.dropout == pytest.approx(own - 0.1)
    today = ttq.run_folder(tmp_path, "multi30k_en_de", 60, [], again=False)
    assert ttq.run_folder(tmp_path, earlier, 60, [], again=False) != today
    assert ttq.run_folder(tmp_path, earlier, 60, [f"--model.dropout={own}"], again=False) == today
    assert ttq.run_folder(tmp_path, "multi30k_en_de", 30, [], again=False) != today
    today.mkdir()
    assert ttq.run_folder(tmp_path, "multi30k_en_de", 60, [], again=False) == today
    assert ttq.run_folder(tmp_path, "multi30k_en_de", 60, [], again=True) == tmp_path / (today.name + "_2")


def test_runs_of_a_much_faster_host_are_charted_apart() -> None:
    """A budget is minutes: a host that trains 1.8 times the steps a minute is drawn apart and
    left out of the budget's mean; runs within 1.5 times the median steps a minute stay in,
    whatever their host's bf16 peak (a Xeon with AMX: six times the peak, the same steps)."""
    ttq = load_benchmark("time_to_quality")

    def run(bleu: float, steps: int, bf16: float) -> dict:
        return {"preset": "multi30k_en_de", "budget_minutes": 60.0, "train_minutes": 58.0, "steps": steps,
                "test": {"test_2016_flickr": {"bleu": bleu}}, "peaks_gflops": {"fp32": 180.0, "bf16": bf16}}

    slow, slower, fast, amx = run(40.0, 8700, 410.0), run(39.0, 8100, 395.0), run(41.2, 15600, 948.0), run(39.5, 8127, 2459.0)
    typical, faster = ttq.split_by_host([slow, slower, fast, amx], [slow, slower, fast, amx])
    assert typical == [slow, slower, amx] and faster == [fast]
    assert ttq.budget_means(typical) == [(58.0, pytest.approx(39.5))]
    assert ttq.split_by_host([slow, fast], [slow, slower, fast]) == ([slow], [fast])
    half_hour = dict(slow, budget_minutes=30.0, train_minutes=28.0, steps=4100)  # the same pace: stays in
    assert ttq.split_by_host([half_hour], [slow, slower, half_hour]) == ([half_hour], [])
    assert ttq.split_by_host([amx], []) == ([amx], [])


def test_lowercase_trains_and_scores_lowercased_text_as_a_recipe_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """--lowercase (Transformer-Tiny's setting): the run trains on lowercased copies of the
    files (its vocabulary has no capital), its record is flagged and fingerprinted apart from
    the cased recipe's, and the table lists it apart with no cased BLEU, off the chart."""
    import gzip

    ttq = load_benchmark("time_to_quality")
    data = tmp_path / "data"
    write_multi30k(data, ("en", "de"), lines=40, splits=("train", "val", "test_2016_flickr"), seed=1)
    for path in data.glob("*.gz"):  # capitals to lose: "W12 w3 W7"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            words = handle.read().split(" ")
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(" ".join(w.upper() if i % 2 == 0 else w for i, w in enumerate(words)))
    argv = ["time_to_quality.py", "--preset", "multi30k_en_de", "--budgets", "0.02", "--data", str(data),
            "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results.jsonl"), "--json", "--lowercase",
            *SMALL]
    monkeypatch.setattr(sys, "argv", argv)
    assert ttq.main() == 0
    (record,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    copies = tmp_path / "runs" / "lowercased_data"
    for path in data.glob("*.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as original, gzip.open(copies / path.name, "rt", encoding="utf-8") as copy:
            cased, lowered = original.read(), copy.read()
        assert lowered.splitlines() == [line.lower() for line in cased.splitlines()] and cased != lowered
    pieces = [line.split("\t")[0] for line in (Path(record["run"]) / "tokenizer.vocab").read_text().splitlines()]
    assert not any(piece.isupper() for piece in pieces) and any(piece.islower() for piece in pieces)
    assert record["lowercase"] is True
    overrides = record["overrides"]
    assert record["recipe"] == ttq.recipe("multi30k_en_de", overrides, True) != ttq.recipe("multi30k_en_de", overrides)
    assert ttq.recipe("multi30k_en_de", ["--train.seed=2"], True) != ttq.recipe("multi30k_en_de", ["--train.seed=2"])
    assert Path(record["run"]) != ttq.run_folder(tmp_path / "runs", "multi30k_en_de", 0.05, overrides, again=False)

    scores = {"test_2016_flickr": {"bleu": 41.3, "bleu_lc_tok": 41.25, "chrf": 66.04}}
    cased = {"preset": "multi30k_en_de", "budget_minutes": 60.0, "train_minutes": 59.4, "steps": 8123,
             "valid_bleu": 41.0, "test": scores, "recipe": ttq.recipe("multi30k_en_de", [])}
    lowered = dict(cased, steps=7500, recipe=ttq.recipe("multi30k_en_de", [], True), lowercase=True)
    half = dict(lowered, budget_minutes=30.0, steps=3900, recipe=ttq.recipe("multi30k_en_de", ["--model.dropout=0.2"], True))
    runs = ttq.todays_runs([cased, lowered, half], "multi30k_en_de")
    assert runs[""] == [cased] and runs[ttq.LOWERCASED] == [lowered]
    assert runs[" (dropout 0.2)"] == [] and runs[" (dropout 0.2)" + ttq.LOWERCASED] == [half]
    assert ttq.markdown_table([lowered, cased, half]).splitlines()[2:] == [
        "| multi30k_en_de | 60 | 59.4 | 8,123 | 41.0 | 41.3 / 41.2 / 66.0 |  |",
        "| multi30k_en_de (lowercased text) | 60 | 59.4 | 7,500 | 41.0 | - / 41.2 / 66.0 |  |",
        "| multi30k_en_de (dropout 0.2) (lowercased text) | 30 | 59.4 | 3,900 | 41.0 | - / 41.2 / 66.0 |  |"]
    drawn = []
    monkeypatch.setattr(ttq, "chart_point", lambda run: drawn.append(run) or (run["train_minutes"], 41.3))
    ttq.draw_chart([cased, lowered, half], tmp_path / "chart.png")
    assert drawn and all(run is cased for run in drawn)
