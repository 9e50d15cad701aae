"""Beam search one step at a time, recorded: what the learner's page shows (POST /api/steps).

The search is `beam_search`'s own: the same `BeamState` (the best 2k candidates, the pool
of finished hypotheses, the stopping rule) and the same cached decoder calls, for one
sentence, so the translation it ends with is the one `translate` gives. Each step records
the candidates it considered (kept, finished or pruned, with their parent), the k most
probable next tokens of the best open hypothesis, and where that hypothesis' query looked
in the source (its cross-attention row, per layer and head).

A forced `prefix` is emitted first, token by token, as one hypothesis (its probabilities
recorded all the same); the beam search then continues from it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_mt.decoding.beam import BeamState, BeamStep, gnmt_penalty
from transformer_mt.decoding.source import EncodedSource, encode_source
from transformer_mt.model.recording import AttentionRecorder
from transformer_mt.model.transformer import EncoderDecoder

KEPT, FINISHED, PRUNED = "kept", "finished", "pruned"


@dataclass
class Candidate:
    """One extension considered at a step: its emitted ids (eos included when it finished),
    score (summed log-probability; divided by the length penalty once finished), status
    (kept, finished or pruned) and parent (its index among the previous step's kept ones)."""

    ids: list[int]
    score: float
    status: str
    parent: int


@dataclass
class Step:
    """One decoding step. top_ids/top_probs: the most probable next tokens of the best open
    hypothesis; chosen: the best candidate's token, its probability given its parent, and
    that parent; cross: (L, H, S) cross-attention of the best hypothesis' query."""

    forced: bool
    top_ids: list[int]
    top_probs: list[float]
    chosen: int
    chosen_prob: float
    chosen_from: int
    cross: torch.Tensor
    candidates: list[Candidate]


@dataclass
class Trace:
    steps: list[Step]
    ids: list[int]  # the best finished hypothesis, eos included if it ended with one
    score: float


def _next_token(source: EncodedSource, tokens: torch.Tensor,
                recorded: AttentionRecorder) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (rows, V) float32 of the position after `tokens`' last one, and the
    cross-attention (L, H, S) of row 0's query, read from the recorded weights."""
    model = source.model
    logits = model.generator.logits(source.decode(tokens)[:, -1]).float()
    try:
        cross = torch.stack([recorded.weights(module)[0, :, -1].float().cpu()
                             for module in model.attention_layers()["cross"]])
    except (KeyError, RuntimeError):  # a learner's attention that gives no weights (on SDPA): none shown
        cross = torch.zeros(0, 0, 0)
    return logits, cross


def _top(logits: torch.Tensor, top_k: int, banned: tuple[int, ...] = ()) -> tuple[list[int], list[float], torch.Tensor]:
    """The top_k tokens of one row of logits with their probabilities (normalised over
    every output; `banned` ones left out), and its log-probs."""
    log_probs = logits.log_softmax(dim=-1)
    if banned:
        log_probs[list(banned)] = float("-inf")
    probs, ids = log_probs.exp().topk(min(top_k, logits.size(-1)))
    return ids.tolist(), probs.tolist(), log_probs


def _beam_step(step: BeamStep, parents: list[list[int]], length: int, alpha: float,
               log_probs: torch.Tensor) -> tuple[list[Candidate], int, float, int]:
    """The candidates of `step` (sentence 0), best first, and the best one's token,
    probability given its parent, and parent index."""
    top_scores, origin, token, finishing = step.top_scores[0], step.origin[0], step.token[0], step.finishing[0]
    kept = set(step.keep[0].tolist())
    candidates = []
    for rank, (score, parent, tok, done) in enumerate(zip(top_scores.tolist(), origin.tolist(), token.tolist(),
                                                         finishing.tolist())):
        if score == float("-inf"):
            continue
        status = FINISHED if done else KEPT if rank in kept else PRUNED
        shown = score / gnmt_penalty(length, alpha) if done else score
        candidates.append(Candidate(parents[parent] + [tok], shown, status, parent))
    best_parent, best_token = int(origin[0]), int(token[0])
    return candidates, best_token, float(log_probs[best_parent, best_token].exp()), best_parent


@torch.inference_mode()
def trace_beam_search(
    model: EncoderDecoder, src: torch.Tensor, beam: int, max_len: int, bos_id: int, eos_id: int, pad_id: int,
    length_penalty: float = 0.6, top_k: int = 5, prefix: list[int] | None = None, banned: tuple[int, ...] = (),
) -> Trace:
    """Beam search over one source (1, S), step by step (see the module docstring).
    `max_len` as in `beam_search` (outputs hold at most max_len + 1 tokens with eos; a
    longer forced prefix raises it); `banned` as in `beam_search`."""
    prefix = prefix or []
    source = encode_source(model, src, pad_id)
    tokens, steps, logprob = torch.tensor([[bos_id]], device=src.device), [], 0.0
    with model.recorded_attention(model.attention_layers()["cross"]) as recorded:
        logits, cross = _next_token(source, tokens, recorded)
        for forced in prefix:  # one hypothesis: the forced tokens, then the search
            top_ids, top_probs, log_probs = _top(logits[0], top_k, banned)
            logprob += float(log_probs[forced])
            emitted = tokens[0, 1:].tolist() + [forced]
            steps.append(Step(True, top_ids, top_probs, forced, float(log_probs[forced].exp()), 0, cross,
                              [Candidate(emitted, logprob, KEPT, 0)]))
            tokens = torch.cat([tokens, tokens.new_tensor([[forced]])], dim=1)
            logits, cross = _next_token(source, source.newest(tokens), recorded)
        limit = max(max_len, len(prefix)) + 1  # + eos
        search = BeamState(1, beam, torch.tensor([limit], device=src.device), bos_id, pad_id, src.device)
        search.tokens, search.scores[0, 0] = tokens.repeat(beam, 1), logprob
        expand = torch.zeros(beam, dtype=torch.long, device=src.device)  # the one row -> k rows
        source.select(expand)
        logits = logits.index_select(0, expand)
        for length in range(len(prefix) + 1, limit + 1):
            top_ids, top_probs, _ = _top(logits[0], top_k, banned)
            parents = search.tokens[:, 1:].tolist()
            log_probs = logits.log_softmax(dim=-1)
            step = search.step(logits, length, eos_id, length_penalty, ban_eos=False, banned=banned)
            candidates, chosen, prob, parent = _beam_step(step, parents, length, length_penalty, log_probs)
            steps.append(Step(False, top_ids, top_probs, chosen, prob, parent, cross, candidates))
            if bool(search.done(length, length_penalty)[0]):
                break
            if source.cache is not None:
                source.cache.reorder(step.rows)
            logits, cross = _next_token(source, source.newest(search.tokens), recorded)
    best = search.finished_tokens[0, 0]
    return Trace(steps, best[best.ne(pad_id)].tolist(), float(search.finished_scores[0, 0]))
