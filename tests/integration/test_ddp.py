"""Two CPU processes under torchrun (DDP, gloo) train exactly as one process that
averages the gradients of both ranks' batches."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer_mt.common.config import Config, load_config
from transformer_mt.data.batching import Batch, BatchStream
from transformer_mt.common.specials import PAD_ID
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import build_model
from transformer_mt.training.loss import LabelSmoothingLoss

from run_helpers import README_SCENARIO, WORLD_SIZE, exit_codes, max_difference, torchrun

STEPS = 6  # as in ddp_worker.py


def rank_loss(summed_loss: torch.Tensor, rank_tokens: int, all_tokens: int) -> torch.Tensor:
    """The loss one rank backpropagates, given its loss summed over its `rank_tokens`
    target tokens; DDP then averages the ranks' gradients (see `reference_run`).

    The trainer's normalisation: every rank divides by the step's global token count
    (`all_tokens`, summed over ranks) so that every token weighs the same, times
    WORLD_SIZE because DDP averages. (Dividing by each rank's own count instead,
    summed_loss / rank_tokens, follows the mean of per-rank means.)"""
    return summed_loss * WORLD_SIZE / all_tokens


def paper_rate(step: int, cfg: Config) -> float:
    """lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1."""
    d, warmup = cfg.model.d_model, cfg.train.warmup_steps
    return cfg.train.lr_scale * d**-0.5 * min(step**-0.5, step * warmup**-1.5)


def reference_run(cfg: Config, initial: dict, src: list, tgt: list, ranks: list[int]) -> dict:
    """Replay the training in one process: at each step take the batch each of `ranks`
    would take (BatchStream with rank r of WORLD_SIZE), compute each rank's loss as the
    trainer does, average the gradients over those ranks (what DDP's all-reduce does),
    and take one Adam step with the paper's rate. Returns the final weights."""
    model = build_model(cfg.model)
    model.load_state_dict(initial)
    model.train()
    params = list(model.parameters())
    # fused, as training's: this test is about the gradient averaging (test_schedule_loss checks
    # the fused update against the reference Adam, which rounds differently over many steps)
    optimizer = torch.optim.Adam(params, lr=0.0, betas=cfg.train.adam_betas, eps=cfg.train.adam_eps, fused=True)
    criterion = LabelSmoothingLoss(cfg.model.tgt_vocab_size, PAD_ID, cfg.train.label_smoothing)
    streams = [BatchStream(src, tgt, cfg.data.max_tokens, cfg.train.seed, rank, WORLD_SIZE) for rank in ranks]
    for step in range(1, STEPS + 1):
        batches: list[Batch] = [next(stream) for stream in streams]
        all_tokens = sum(batch.n_tokens for batch in batches)
        grads = []
        for batch in batches:
            model.zero_grad(set_to_none=True)
            states = model(batch.src, batch.tgt_in, padding_mask(batch.src, PAD_ID))
            real = batch.tgt_out != PAD_ID
            summed = criterion(model.generator.logits(states[real]), batch.tgt_out[real])
            rank_loss(summed, batch.n_tokens, all_tokens).backward()
            grads.append([p.grad.clone() for p in params])
        for p, *per_rank in zip(params, *grads):
            p.grad = sum(per_rank) / len(per_rank)
        for group in optimizer.param_groups:
            group["lr"] = paper_rate(step, cfg)
        optimizer.step()
    return model.state_dict()


@pytest.fixture(scope="module")
def launch(ddp_launch: tuple[Path, subprocess.CompletedProcess]) -> tuple[Path, subprocess.CompletedProcess]:
    """The suite's one torchrun launch of ddp_worker.py (tests/conftest.py)."""
    return ddp_launch


def test_torchrun_two_ranks_train_as_one_process_averaging_their_gradients(launch) -> None:
    out = launch[0]
    rank0 = torch.load(out / "rank0.pt", weights_only=True)
    rank1 = torch.load(out / "rank1.pt", weights_only=True)
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    saved = torch.load(out / "average" / "checkpoints" / f"step_{STEPS}.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[k], rank0[k]) for k in rank0)
    # fit destroyed the process group, and with it gloo's threads (none is left for interpreter shutdown)
    for r in range(WORLD_SIZE):
        threads = json.loads((out / f"rank{r}_threads.json").read_text())
        assert threads and not [name for name in threads if "gloo" in name], threads
    # both ranks map the one copy of the data rank 0 prepared (shared through the page cache)
    mapped = [json.loads((out / f"rank{r}_data.json").read_text()) for r in range(WORLD_SIZE)]
    prepared = (out / "average" / "prepared").resolve()
    for rank in mapped:
        assert rank["src"] == str(prepared / "train.src.ids") and rank["tgt"] == str(prepared / "train.tgt.ids")
        assert str(prepared / "train.src.ids") in rank["maps"]

    cfg = load_config(out / "average" / "config.yaml")
    assert cfg.model.dropout == 0.0 and cfg.train.accumulate == 1 and cfg.train.clip_norm == 0
    assert cfg.train.precision == "fp32" and cfg.train.schedule == "paper"  # reference_run's rate
    initial = torch.load(out / "initial.pt", weights_only=True)
    data = json.loads((out / "train_data.json").read_text(encoding="utf-8"))
    # the ranks share out the data: within an epoch, no example is in both ranks' batches
    # (these 6 steps span several epochs of the 400 pairs)
    streams = [BatchStream(data["src"], data["tgt"], cfg.data.max_tokens, cfg.train.seed, r, WORLD_SIZE)
               for r in range(WORLD_SIZE)]
    taken: list[dict[int, set[int]]] = [{}, {}]
    for _ in range(STEPS):
        for rank, stream in enumerate(streams):
            indices = stream.next_indices()
            taken[rank].setdefault(stream.epoch, set()).update(indices)
    assert streams[0].epoch >= 1 and taken[0].keys() == taken[1].keys()
    assert all(taken[0][epoch] and not taken[0][epoch] & taken[1][epoch] for epoch in taken[0])

    threads = torch.get_num_threads()
    # One thread, as the workers: the same kernels, the same rounding. With two, the
    # gradients of the attention key biases (zero in exact arithmetic, rounding noise in
    # practice) come out different, and Adam turns noise into full steps: 2e-4 apart.
    torch.set_num_threads(1)
    try:
        expected = reference_run(cfg, initial, data["src"], data["tgt"], ranks=[0, 1])
        rank0_alone = reference_run(cfg, initial, data["src"], data["tgt"], ranks=[0])
    finally:
        torch.set_num_threads(threads)
    # bit-identical in practice; the tolerance is far below one step's move (lr >= 3e-5).
    # Dividing each rank's loss by its own token count instead (rank_loss's docstring)
    # ends far from these weights.
    assert max_difference(rank0, expected) <= 1e-6
    # the comparison has teeth: rank 0's batches alone train to other weights, and
    # training moved the weights well beyond the tolerance
    assert max_difference(rank0_alone, expected) > 1e-4
    assert max_difference(initial, expected) > 1e-4


def test_a_time_cap_stops_every_rank_together(launch) -> None:
    """train.max_seconds is rank 0's clock, which every rank takes with each step's loss: the
    ranks stop at the same step, exit 0, leave a loadable checkpoint (a hang fails on the
    timeout) and say once what ended the run."""
    run = launch[0] / "time_cap"
    assert [codes["time_cap"] for codes in exit_codes(launch[0])] == [0] * WORLD_SIZE
    said = "train.max_seconds=1.5 ended it before step 100000 (--train.max_seconds=0 trains every step)"
    assert launch[1].stderr.count(said) == 1
    (last,) = list((run / "checkpoints").glob("step_*.pt"))
    state = torch.load(last, weights_only=True)
    # the step at which rank 0's clock passed 1.5 s (the checkpoint also holds its validation point)
    assert 0 < state["trainer"]["step"] < 100000 and state["trainer"]["elapsed"] >= 1.5


def test_a_budgeted_two_process_run_stops_both_ranks_together_within_its_budget(launch) -> None:
    """train.budget_minutes under torchrun: the ranks pace on rank 0's clock (taken with each
    step's all-reduce), so both validate and stop at the same steps (a hang fails on the
    timeout), every step annealed, inside the budget."""
    run = launch[0] / "budget"
    budget = 0.1 * 60
    assert [codes["budget"] for codes in exit_codes(launch[0])] == [0] * WORLD_SIZE
    last = sorted((run / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem.removeprefix("step_")))[-1]
    state = torch.load(last, weights_only=True)
    # the stop rule counts the next step and the closing validations as long as the last ones: on a
    # 6-second run one slower validation is a visible share, so a little over is allowed
    assert len(state["rng"]) == WORLD_SIZE and state["trainer"]["elapsed"] < 1.1 * budget
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    assert train[-1]["step"] == state["trainer"]["step"] > 5
    assert train[-1]["lr"] < 0.1 * max(e["lr"] for e in train)
    assert any(e["event"] == "valid" for e in events) and (run / "average.safetensors").is_file()


def test_a_nan_on_one_rank_stops_both_with_one_message(launch) -> None:
    """The loss is summed over the ranks, so a NaN on rank 1 alone stops both ranks at
    the same step, each with the one-line message; nothing non-finite is saved."""
    run, result = launch[0] / "nan", launch[1]
    assert all(codes["nan"] != 0 for codes in exit_codes(launch[0]))
    assert result.stderr.count("error: the loss became nan at step 3; nothing of that step was saved") == WORLD_SIZE
    assert [p.name for p in sorted((run / "checkpoints").glob("step_*.pt"))] == ["step_2.pt"]
    state = torch.load(run / "checkpoints" / "step_2.pt", weights_only=True)
    assert all(t.isfinite().all() for t in state["model"].values())


def readme_command() -> list[str]:
    """The README's torchrun line, as printed, with README_SCENARIO's overrides appended."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    line = re.search(r"`(torchrun --nproc_per_node 2 -m transformer_mt [^`]*)`", readme).group(1)
    command = shlex.split(line)
    command[0] = str(Path(sys.executable).with_name("torchrun"))
    return [*command, *README_SCENARIO]


def test_the_readme_command_resumes_exactly_after_its_launcher_is_killed(launch, tmp_path: Path) -> None:
    """The README's torchrun line on two CPU processes, dropout on (each rank draws its own):
    1. its launcher alone killed (SIGKILL) after the checkpoint of step 10: the workers end
       too (PR_SET_PDEATHSIG), the last checkpoint stays loadable;
    2. resumed with torchrun: the weights of the uninterrupted run, bit for bit; the
       uninterrupted run is the suite's launch's `nodes` (two launchers, one process each):
       every rank's random states saved, in rank order.
    Among the suite's slowest (~20 s): two torchrun launches (each rank imports torch and joins
    the process group) for the README's 20 steps, the fewest with a checkpoint to resume from."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = readme_command()
    run = tmp_path / command[command.index("--run") + 1]
    log = tmp_path / "killed.log"
    with open(log, "w", encoding="utf-8") as stderr:
        launcher = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True, env=env)
    try:
        deadline = time.time() + 240
        while not (run / "checkpoints" / "step_10.pt").exists():
            assert launcher.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.005)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=60)
        deadline = time.time() + 30
        while workers_of(run) and time.time() < deadline:
            time.sleep(0.1)
        assert not workers_of(run), "workers still running after their launcher was killed"
    finally:
        os.killpg(launcher.pid, signal.SIGKILL) if launcher.poll() is None else None
        subprocess.run(["pkill", "-9", "-f", str(run)])
    assert "a step takes 2 batch(es)" in log.read_text()
    assert not (run / "checkpoints" / "step_20.pt").exists()
    resumed = torchrun("train", "--run", str(run), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr
    assert resumed.stderr.count("finished at step") == 1  # rank 0 alone speaks
    assert resumed.stderr.count(": validation loss") == resumed.stderr.count("step 20: validation loss") == 1

    assert [codes["nodes"] for codes in exit_codes(launch[0])] == [0] * WORLD_SIZE
    uninterrupted = torch.load(launch[0] / "nodes" / "checkpoints" / "step_20.pt", weights_only=True)
    rng = uninterrupted["rng"]
    assert len(rng) == WORLD_SIZE and not torch.equal(rng[0]["torch"], rng[1]["torch"])
    resumed_weights = torch.load(run / "checkpoints" / "step_20.pt", weights_only=True)["model"]
    assert all(torch.equal(uninterrupted["model"][k], v) for k, v in resumed_weights.items())


def workers_of(run: Path) -> list[str]:
    """The ids of the processes (other than this one) whose command line names `run`."""
    found = subprocess.run(["pgrep", "-f", str(run)], capture_output=True, text=True).stdout.split()
    return [pid for pid in found if int(pid) != os.getpid()]
