"""learns_copy: the Annotated Transformer's first example, the copy task, trained on a fresh
model from the learner's own builder, with greedy decoding of held-out sequences every
EVALUATE_EVERY steps: it passes as soon as the model copies them, and fails if it still does
not after STEPS. Every equation can hold and a model still not learn (the study notes'
N(0, 1) embeddings drown the positions): this is the end-to-end test that it learns."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from transformer_mt.common.specials import PAD_ID
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.learner.building import Sizes
from transformer_mt.learner.model import LearnerModel, LearnerSource, build_learner
from transformer_mt.check.result import NotChecked, Outcome, failed, passed
from transformer_mt.check.subject import Subject

SIZES = Sizes(src_vocab=11, tgt_vocab=11, N=2, d_model=64, d_ff=128, h=4, dropout=0.0)
LENGTH = 10  # tokens per sequence, the first one the start symbol, as the Annotated Transformer's data_gen
START = 1
BATCH = 32
STEPS = 1000
WARMUP = 60  # steps of linear warmup to LEARNING_RATE (a post-norm model needs it), then down to 0
LEARNING_RATE = 2e-3
HELD_OUT = 100
EVALUATE_EVERY = 100  # steps between greedy decodings of the held-out sequences (~3% of the training time)
EXACT = 0.9  # the share of held-out sequences copied exactly that passes
MAX_SECONDS = 120  # a model this slow at these sizes is not checked, rather than keep the learner waiting
SEED = 0  # the model's draws and the batches'


def copy_batch(size: int, generator: torch.Generator) -> torch.Tensor:
    """(size, LENGTH) sequences of ids 1 .. 10, each starting with 1."""
    data = torch.randint(1, SIZES.tgt_vocab, (size, LENGTH), generator=generator)
    data[:, 0] = START
    return data


def copied(model: LearnerModel, src: torch.Tensor) -> float:
    """The share of the sequences `src` (N, LENGTH) that greedy decoding (decoding/greedy.py, as
    `translate` decodes) copies exactly after the start symbol. The copy task has no end symbol:
    its eos is the padding id, which is never emitted."""
    model.eval()
    tokens, _ = greedy_decode(model, src, LENGTH - 1, START, PAD_ID, PAD_ID, use_cache=False, banned=(PAD_ID,))
    model.train()
    return float((tokens[:, : LENGTH - 1] == src[:, 1:]).all(1).float().mean())


def trained(subject: Subject) -> tuple[int, float, float, float]:
    """(steps, held-out exact match, the last steps' mean loss, seconds): Adam on the copy task
    until the model copies EXACT of the held-out sequences (decoded every EVALUATE_EVERY steps) or
    for STEPS steps. The learning rate warms up over WARMUP steps, then falls to 0 at STEPS."""
    source = LearnerSource(subject.path, subject.name, subject.masks.encoding)
    model = build_learner(subject.module, source, SIZES, SEED)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98), eps=1e-9)
    generator = torch.Generator().manual_seed(SEED)
    held_out = copy_batch(HELD_OUT, torch.Generator().manual_seed(12345))
    started, losses, exact = time.perf_counter(), [], 0.0
    for step in range(1, STEPS + 1):
        for group in optimizer.param_groups:
            group["lr"] = LEARNING_RATE * min(step / WARMUP, (STEPS - step + 1) / (STEPS - WARMUP))
        data = copy_batch(BATCH, generator)
        src, tgt_in, tgt_out = data, data[:, :-1], data[:, 1:]
        out = model.teacher_forced(src, tgt_in)  # (B, T, V)
        # cross_entropy's log_softmax leaves log-probabilities as they are: one loss for both conventions
        loss = F.cross_entropy(out.reshape(-1, out.size(-1)).float(), tgt_out.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if time.perf_counter() - started > MAX_SECONDS:
            raise NotChecked(f"{step} of {STEPS} training steps took over {MAX_SECONDS} s at d_model "
                             f"{SIZES.d_model}: too slow to check here")
        if (step % EVALUATE_EVERY == 0 or step == STEPS) and (exact := copied(model, held_out)) >= EXACT:
            break
    return step, exact, sum(losses[-50:]) / len(losses[-50:]), time.perf_counter() - started


def learns_copy(subject: Subject) -> Outcome:
    with torch.enable_grad():
        steps, exact, loss, seconds = trained(subject)
    what = (f"after {steps} steps of Adam ({seconds:.0f} s; d_model {SIZES.d_model}, N {SIZES.N}, batches of "
            f"{BATCH}) the model copies {exact:.0%} of {HELD_OUT} held-out sequences exactly (final loss {loss:.2f})")
    if exact >= EXACT:
        return passed(what)
    return failed(f"{what}; a correct Transformer copies over {EXACT:.0%} within {STEPS} steps",
                  "fix the failed checks above first; with every equation right, look at the initialisation "
                  "(embedding_init, cloned_init)")
