"""The work behind the web API: one Translator shared by every request.

Requests run in a thread pool; a lock makes each translation (and the attention pass,
which hooks the model's attention modules while it records them) run alone on the model. Decoding
settings are arguments of each `Translator.search` call, never state on the shared
translator, so concurrent requests cannot see each other's beam.

Requests that wait for the model are batched: a request queues its sentences, then
takes the lock; whoever holds it translates every queued request with the same beam and
n-best in one call, so under load the model decodes large batches instead of one short
sentence at a time. A request whose sentences were translated meanwhile just returns."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from transformer_mt.common.config import DecodeConfig
from transformer_mt.common.errors import UserError
from transformer_mt.data.corpus import CorpusError, iter_raw_lines
from transformer_mt.common.specials import SPECIAL_IDS
from transformer_mt.decoding.trace import Trace
from transformer_mt.diagnosis.case import open_case
from transformer_mt.diagnosis.report import diagnose
from transformer_mt.inference.translation_inspection import ATTENTION_KINDS, AttentionMaps, NoAttentionWeights
from transformer_mt.runs.directory import RunDir
from transformer_mt.inference.translator import Hypothesis, Translator, check_line, has_text

DECIMALS = 4  # attention weights in JSON are rounded to this many decimals
MAX_GROUP_SENTENCES = 128  # most sentences translated together for queued requests
EXAMPLE_SEARCH_LINES = 1000  # lines of a validation file looked at for the page's example
DOCTOR_SENTENCES = 100  # validation sentences the page's doctor translates


@dataclass(frozen=True)
class TranslateLimits:
    """What one request may ask for; beyond it the API answers 413 or 422."""

    max_chars: int = 2000
    max_sentences: int = 32
    max_beam: int = 8

    def as_dict(self) -> dict[str, int]:
        return {"max_chars": self.max_chars, "max_sentences": self.max_sentences, "max_beam": self.max_beam}


@dataclass(eq=False)
class Job:
    """The sentences of one request, waiting for the model."""

    sentences: list[str]
    settings: DecodeConfig
    nbest: int
    raw_nbest: bool = False
    hypotheses: list[list[Hypothesis]] | None = None
    error: BaseException | None = None


class TranslationService:
    """Translations, subword tokens and cross-attention for lists of sentences."""

    def __init__(self, translator: Translator, name: str = "model", limits: TranslateLimits = TranslateLimits(),
                 example: str = "", run: Path | None = None) -> None:
        """`example`: a sentence the page translates on opening ("" for none); `run`: the
        run folder the doctor reads (None: the page has no doctor)."""
        self.translator = translator
        self.name = name
        self.limits = limits
        self.example = example
        self.run = run
        self.doctor_lock = threading.Lock()
        self.report: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.queue_lock = threading.Lock()
        self.queue: list[Job] = []
        self.requests = 0
        self.batches = 0

    def info(self) -> dict[str, Any]:
        """What the page shows about the model: its sizes, device and the request limits."""
        model = self.translator.model
        layers = model.attention_layers()
        return {
            "status": "ok",
            "kind": "translation",
            "run": self.name,
            "device": str(self.translator.device),
            "n_layers": len(layers["encoder"]),
            "n_decoder_layers": len(layers["decoder"]),
            "n_heads": model.n_heads,
            "d_model": model.d_model,
            "vocab_size": len(self.translator.tokenizer),
            "default_beam": min(self.translator.defaults.beam, self.limits.max_beam),
            "example": self.example,
            "limits": self.limits.as_dict(),
            "requests": self.requests,
            "batches": self.batches,
        }

    def doctor(self) -> dict[str, Any]:
        """The doctor's report on the served run (diagnosis/), made once, on the first ask,
        from its own copy of the model: translations of up to DOCTOR_SENTENCES validation
        sentences never wait behind it."""
        if self.run is None:
            raise UserError("this server was started without a run folder; run `transformer-mt doctor RUN`")
        with self.doctor_lock:
            if self.report is None:
                self.report = diagnose(open_case(str(self.run), limit=DOCTOR_SENTENCES)).to_dict()
            return self.report

    def _take_group(self, job: Job) -> list[Job]:
        """`job` and the queued jobs that can share its decoding call, off the queue."""
        with self.queue_lock:
            group, size = [], 0
            for other in self.queue:
                same = (other.settings, other.nbest, other.raw_nbest) == (job.settings, job.nbest, job.raw_nbest)
                if other is job or (same and size + len(other.sentences) <= MAX_GROUP_SENTENCES):
                    group.append(other)
                    size += len(other.sentences)
            self.queue = [other for other in self.queue if other not in group]
        return group

    def _run_group(self, group: list[Job]) -> None:
        """Translate the sentences of every job in one call (caller holds the lock); if
        that fails, each job alone, so one bad request cannot fail the others."""
        self.batches += 1
        try:
            sentences = [s for job in group for s in job.sentences]
            hypotheses = self.translator.search(sentences, group[0].settings, group[0].nbest, group[0].raw_nbest)
        except Exception as err:
            if len(group) == 1:
                group[0].error = err
                return
            for job in group:
                self._run_group([job])
            return
        start = 0
        for job in group:
            job.hypotheses = hypotheses[start : start + len(job.sentences)]
            start += len(job.sentences)

    def _attention(self, sentence: str, best: Hypothesis, settings: DecodeConfig) -> AttentionMaps | None:
        if not best.ids:
            return None
        try:
            return self.translator.attention(sentence, best, settings)
        except NoAttentionWeights:  # a learner's model whose attention keeps no weights: the translation alone
            return None

    def settings(self, beam: int | None, nbest: int) -> DecodeConfig:
        """The decoding settings of a request: the run's, with `beam` when given (else the
        run's beam widened to `nbest`, within the server's limit)."""
        if beam is not None and beam > self.limits.max_beam:
            raise UserError(f"beam must be at most {self.limits.max_beam}, got {beam}")
        if beam is None:
            beam = min(max(self.translator.defaults.beam, nbest), self.limits.max_beam)
        return self.translator.settings(beam, nbest)

    def translate(self, sentences: list[str], beam: int | None, nbest: int, attention: bool,
                  raw_nbest: bool = False) -> dict[str, Any]:
        """The API's answer for `sentences` (see server/app.py for its fields); `beam`
        None means the run's default; the n-best lists hold distinct texts unless `raw_nbest`."""
        for number, sentence in enumerate(sentences, start=1):
            check_line(sentence, number)
        settings = self.settings(beam, nbest)
        start = time.perf_counter()
        job = Job(sentences, settings, nbest, raw_nbest)
        with self.queue_lock:
            self.queue.append(job)
        with self.lock:
            self.requests += 1
            if job.hypotheses is None and job.error is None:
                self._run_group(self._take_group(job))
            if job.error is not None:
                raise job.error
            hypotheses = job.hypotheses
            maps = [self._attention(s, h[0], settings) if attention else None for s, h in zip(sentences, hypotheses)]
        tokenizer = self.translator.tokenizer
        results = []
        for sentence, hyps, found in zip(sentences, hypotheses, maps):
            result: dict[str, Any] = {
                "source": sentence,
                "translation": hyps[0].text,
                "nbest": [{"text": h.text, "score": h.score} for h in hyps],
                "source_tokens": tokenizer.pieces(sentence) if has_text(sentence) else [],
                "target_tokens": hyps[0].tokens,
            }
            if attention:
                result["attention"] = attention_payload(found)
            results.append(result)
        return {
            "translations": [r["translation"] for r in results],
            "results": results,
            "beam": settings.beam,
            "nbest": nbest,
            "elapsed_ms": round(1000 * (time.perf_counter() - start), 2),
        }


    def steps(self, sentence: str, beam: int | None, top_k: int, prefix: list[str]) -> dict[str, Any]:
        """The decoding of one sentence step by step (see server/app.py for the fields);
        without a prefix its translation is the one `translate` gives with that beam."""
        check_line(sentence, 1)
        settings = self.settings(beam, 1)
        start = time.perf_counter()
        with self.lock:
            self.requests += 1
            trace = self.translator.steps(sentence, settings, top_k, prefix)
        tokenizer = self.translator.tokenizer
        output = [i for i in trace.ids if i not in SPECIAL_IDS]
        return {
            "source_tokens": self.translator.source_pieces(sentence),
            "beam": settings.beam,
            "top_k": top_k,
            "prefix": prefix,
            "translation": tokenizer.decode([output])[0],
            "target_tokens": tokenizer.id_to_piece(trace.ids),
            "score": trace.score,
            "steps": steps_payload(trace, tokenizer.id_to_piece),
            "elapsed_ms": round(1000 * (time.perf_counter() - start), 2),
        }

    def explain(self, sentence: str, target_tokens: list[str], kind: str, layer: int, head: int,
                query: int) -> dict[str, Any]:
        """Equation 1 opened up for one query of one head (Translator.explain)."""
        check_line(sentence, 1)
        if kind not in ATTENTION_KINDS:
            raise UserError(f"kind must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
        with self.lock:
            self.requests += 1
            hypothesis = self.translator.hypothesis_of(target_tokens)
            return self.translator.explain(sentence, hypothesis, kind, layer, head, query)


def example_sentence(run: str | Path, max_chars: int) -> str:
    """The first sentence of the run's validation source text (else its test source) of at
    most `max_chars` characters, so that the page opens with a translated example; "" when
    the run has none to read (an imported model, or corpus files that have moved). The
    files are the ones `RunDir.text_files` finds, as the plots find theirs."""
    run_dir = RunDir(Path(run))
    sources = []
    for split in ("valid", "test"):
        try:
            sources.append(run_dir.text_files((split,))[0])
        except ValueError:  # no config.yaml, or no such text (UserError and ConfigError are ValueErrors)
            continue
    return first_line(sources, max_chars)


def first_line(paths: Iterable[Path], max_chars: int) -> str:
    """The first line with text of at most `max_chars` characters among the first
    EXAMPLE_SEARCH_LINES lines of each of `paths` in turn; "" when none has one (a file
    that is missing or not text is passed over): the example a page opens with."""
    for path in paths:
        try:
            for number, raw in enumerate(iter_raw_lines(path), start=1):
                text = raw.decode("utf-8").strip()
                if has_text(text) and len(text) <= max_chars:
                    return text
                if number >= EXAMPLE_SEARCH_LINES:
                    break
        except (CorpusError, UnicodeDecodeError, OSError):
            continue
    return ""


def attention_payload(maps: AttentionMaps | None) -> dict[str, Any] | None:
    """Every attention as JSON, weights[layer][head][query][key] (layers and heads from 0
    here; the page shows them from 1): encoder self-attention over the source tokens,
    decoder self-attention over the decoder input tokens (<s> + output[:-1]) and
    cross-attention from the target tokens being produced to the source tokens."""
    if maps is None:
        return None
    return {
        "layers": maps.n_layers,
        "decoder_layers": maps.layers("decoder"),
        "heads": maps.n_heads,
        "source_tokens": maps.source,
        "target_tokens": maps.target,
        "decoder_input_tokens": maps.target_in,
        "cross": maps.cross.round(decimals=DECIMALS).tolist(),
        "encoder": maps.encoder.round(decimals=DECIMALS).tolist(),
        "decoder": maps.decoder.round(decimals=DECIMALS).tolist(),
    }


def steps_payload(trace: Trace, pieces: Callable[[list[int]], list[str]]) -> list[dict[str, Any]]:
    """The steps of a trace as JSON (token ids -> subword pieces)."""
    return [{
        "step": number,
        "forced": step.forced,
        "top_k": [{"token": token, "prob": round(prob, 6)} for token, prob in zip(pieces(step.top_ids), step.top_probs)],
        "chosen": {"token": pieces([step.chosen])[0], "prob": round(step.chosen_prob, 6), "from": step.chosen_from},
        "cross_attention": step.cross.round(decimals=DECIMALS).tolist(),
        "hypotheses": [{"tokens": pieces(c.ids), "score": round(c.score, 6), "status": c.status, "parent": c.parent}
                       for c in step.candidates],
    } for number, step in enumerate(trace.steps, start=1)]
