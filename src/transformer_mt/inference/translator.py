"""Translator: a trained run directory as a function from sentences to hypotheses.

The CLI, the trainer's validation, the web server and notebooks all go through one
entry point, `Translator.search(lines, settings, nbest)`. Decoding settings (beam,
n-best, length penalty, length limits, precision) are arguments of each call, never
state a call changes and restores, so concurrent calls cannot see each other's settings:

    from transformer_mt import Translator
    translator = Translator.from_run("runs/demo")
    translator.translate(["forty-two"])            # ['zweiundvierzig'], the run's settings
    translator.translate(["forty-two"], beam=1)    # greedy, for this call only

`steps`, `attention` and `explain` look inside one translation: the search step by step
(decoding/trace.py) and the attention of a forced pass with equation 1 (inference/translation_inspection.py).
"""

from __future__ import annotations

import logging
import unicodedata
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from transformer_mt.common.config import ConfigError, DecodeConfig, replace
from transformer_mt.data.batching import pad_sequences
from transformer_mt.common.specials import BOS_ID, EOS_ID, NEVER_EMITTED, PAD_ID, SPECIAL_IDS, UNK_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.decoding.beam import beam_search, gnmt_penalty
from transformer_mt.decoding.greedy import greedy_decode, max_lengths
from transformer_mt.decoding.trace import Trace, trace_beam_search
from transformer_mt.common.device import autocast, resolve_device, resolve_precision
from transformer_mt.common.errors import UserError
from transformer_mt.inference.translation_inspection import AttentionMaps, explain_query, forced_pass
from transformer_mt.model.recording import AttentionRecorder
from transformer_mt.model.transformer import EncoderDecoder
from transformer_mt.runs.quantize import check_dtype, int8_device, int8_precision, is_int8, prepare_model
from transformer_mt.runs.directory import RunDir, load_run_model

if TYPE_CHECKING:
    from transformer_mt.interop.ctranslate2_engine import CTranslate2Engine

log = logging.getLogger("transformer_mt")


@dataclass(frozen=True)
class Hypothesis:
    """One translation of a sentence.

    ids: the subword ids the search produced (no bos, eos or padding); tokens: their
    pieces; text: the detokenised translation; finished: whether it ended with eos (not
    at the length limit); score: log P(Y | X) / lp(Y) with lp(Y) = ((5 + |Y|) / 6) ** alpha
    and |Y| the emitted tokens, eos included: the same whatever the beam (alpha 0 gives
    the plain log-probability)."""

    text: str
    tokens: list[str]
    ids: list[int]
    score: float
    finished: bool = True


EMPTY = Hypothesis("", [], [], 0.0)


def distinct(hypotheses: list[Hypothesis], n: int) -> list[Hypothesis]:
    """The first `n` hypotheses of different texts, best first: a beam often finishes one
    translation in two subword segmentations, and a list of alternatives should not show it twice."""
    seen: dict[str, Hypothesis] = {}
    for hypothesis in hypotheses:
        seen.setdefault(hypothesis.text, hypothesis)
    return list(seen.values())[:n]


def decode_settings(defaults: DecodeConfig, beam: int | None = None, nbest: int = 1, **changes: Any) -> DecodeConfig:
    """The settings of one call: `defaults` with `changes`, validated. With no `beam`,
    the default beam widened to `nbest` if needed; a `beam` given smaller than `nbest`
    is an error (the CLI and the server apply this same rule)."""
    if nbest < 1:
        raise UserError(f"nbest must be at least 1, got {nbest}")
    try:
        settings = replace(defaults, beam=beam if beam is not None else max(defaults.beam, nbest), **changes)
        settings.validate()
    except TypeError as err:
        raise UserError(f"unknown decoding setting ({err})") from None
    except ConfigError as err:
        raise UserError(str(err)) from None
    if nbest > settings.beam:
        raise UserError(f"nbest ({nbest}) cannot exceed beam ({beam}); raise the beam or lower nbest")
    return settings


def has_text(line: str) -> bool:
    """Whether `line` has a character other than white space, control characters (such as
    NUL) and invisible format characters (such as the soft hyphen): only those lines are
    translated; the others give an empty translation."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf") for ch in line)


def check_line(line: object, number: int) -> str:
    """A line the tokenizer can take, or a UserError naming the input line."""
    if not isinstance(line, str):
        raise UserError(f"input {number}: expected text, got {type(line).__name__}")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UserError(f"input {number}: not valid Unicode text ({err.reason} at character {err.start}); "
                        "send UTF-8 text") from None
    return line


class Translator:
    """Batched translation with a model, its tokenizer and default decoding settings.

    Beam 1 with n-best 1 decodes with `greedy_decode`, anything else with `beam_search`;
    neither emits pad or bos (NEVER_EMITTED, banned after the softmax over all outputs).
    Inputs are sorted by length into batches of about `batch_tokens` source tokens and the
    outputs put back in input order. A line without text gives an empty output; an input
    longer than the model's positional table allows (model.max_positions - 1 subwords)
    is truncated to it with a warning. The model and the defaults are never changed by a
    call: a Translator may serve several threads (attention excepted, see there)."""

    def __init__(
        self, model: EncoderDecoder, tokenizer: Tokenizer, defaults: DecodeConfig, device: torch.device,
        engine: "CTranslate2Engine | None" = None,
        no_engine_because: str = "this Translator was made without one (Translator.from_run loads it)",
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.defaults = defaults
        self.device = device
        self.int8 = is_int8(model)  # int8 Linear layers take float32 activations: no bf16 autocast
        self.max_source = model.max_positions - 1  # room for eos
        self.engine = engine  # CTranslate2 where the run can have it (from_run); None: torch only
        self.no_engine_because = no_engine_because  # why there is no CTranslate2 engine, for decode.engine
        self._fallbacks_said: set[str] = set()

    @classmethod
    def from_run(
        cls,
        path: str | Path,
        device: str = "auto",
        checkpoint: str = "best",
        dtype: str = "float32",
        **decode_overrides: Any,
    ) -> "Translator":
        """Load config, tokenizer and weights of a run directory.

        `checkpoint`: best, last or average; `dtype`: float32, bfloat16 to cast the
        weights, or int8 for int8 Linear layers on the CPU (runs/quantize.py; it decodes with
        precision fp32); `decode_overrides`: DecodeConfig fields that become this
        translator's defaults, such as beam=4, length_penalty=0.6, batch_tokens=2048, precision='bf16'."""
        check_dtype(dtype)
        if dtype == "int8":
            device = int8_device(device)
            decode_overrides["precision"] = int8_precision(decode_overrides.get("precision", "fp32"))
        run = RunDir(Path(path))
        cfg, tokenizer, model = load_run_model(run, checkpoint, arch="encoder_decoder")
        defaults = decode_settings(cfg.decode, **decode_overrides)
        engine, no_engine_because = None, "decode.engine is torch"
        if defaults.engine != "torch":
            from transformer_mt.interop.ctranslate2_engine import load_engine, refused

            engine, no_engine_because = load_engine(run, checkpoint, cfg, model, tokenizer, dtype)
            if defaults.engine == "ctranslate2" and no_engine_because:  # said at once, not at the first search
                raise refused(no_engine_because)
        return cls(prepare_model(model, dtype), tokenizer, defaults, resolve_device(device), engine, no_engine_because)

    def settings(self, beam: int | None = None, nbest: int = 1, **changes: Any) -> DecodeConfig:
        """This translator's defaults with the changes of one call (see `decode_settings`);
        a beam wider than the target vocabulary is refused: its first step could not fill it."""
        if self.int8 and "precision" in changes:
            changes["precision"] = int8_precision(changes["precision"])
        settings = decode_settings(self.defaults, beam, nbest, **changes)
        vocabulary = self.model.tgt_vocab_size
        if settings.beam > vocabulary:
            raise UserError(f"beam {settings.beam} is wider than the target vocabulary ({vocabulary} subwords): "
                            f"a beam cannot hold more hypotheses than there are tokens to choose from; "
                            f"use a beam of at most {vocabulary}")
        return settings

    # ---- the entry point -------------------------------------------------------------
    def search(self, lines: list[str], settings: DecodeConfig | None = None, nbest: int = 1,
               raw_nbest: bool = False) -> list[list[Hypothesis]]:
        """The `nbest` best hypotheses of each line, best first, in input order; a line
        without text gives [EMPTY]. `settings` defaults to the translator's defaults.
        The hypotheses are distinct translations (`distinct`: of two subword segmentations of
        one text, the better scored), so a line may have fewer than `nbest`; `raw_nbest` keeps
        every hypothesis the beam finished, as fairseq and Marian list them."""
        settings = settings if settings is not None else self.settings(nbest=nbest)
        if nbest > settings.beam:
            raise UserError(f"nbest ({nbest}) cannot exceed beam ({settings.beam})")
        if nbest > 1 and not raw_nbest:  # all the beam finished, then the distinct texts among them
            return [distinct(row, nbest) for row in self.search(lines, settings, settings.beam, raw_nbest=True)]
        ids = self.encode_sources(lines, settings.unknown_words)
        found: list[list[tuple[list[int], float, bool]]] = [[] for _ in lines]
        precision = resolve_precision(settings.precision, self.device)
        engine = self.engine_for(settings, nbest, precision)
        with torch.inference_mode(), autocast(self.device, precision):
            for batch in self._batches(ids, settings.batch_tokens):
                sources = [ids[i] for i in batch]
                # source lengths, eos and masked unknown words included: what the output limit reads
                lengths = torch.tensor([len(source) for source in sources], device=self.device)
                rows = None
                if engine is not None:
                    rows = engine.decode_batch(sources, self._output_limits(lengths, settings).tolist(), settings, nbest)
                if rows is None:  # torch's search (also where CTranslate2 chose pad or bos)
                    rows = self._decode_batch(pad_sequences(sources).to(self.device), lengths, settings, nbest)
                for i, row in zip(batch, rows):
                    found[i] = row
        return [[self._hypothesis(*h) for h in row] if row else [EMPTY] for row in found]

    def engine_for(self, settings: DecodeConfig, nbest: int, precision: str) -> "CTranslate2Engine | None":
        """The one place that chooses what searches a call (decode.engine): CTranslate2 where the run
        has an engine and `settings` let it give torch's outputs, else torch (None). decode.engine
        ctranslate2 refuses what it cannot map; auto says once why it uses torch."""
        if settings.engine == "torch" or (self.engine is None and settings.engine == "auto"):
            return None
        from transformer_mt.interop.ctranslate2_engine import mismatch, refused

        reason = self.no_engine_because if self.engine is None else mismatch(settings, nbest, self.device, precision)
        if reason is None:
            try:
                self.engine.translator()  # exported on first use
                return self.engine
            except UserError as err:  # a run folder that cannot be written, say
                if settings.engine == "ctranslate2":
                    raise
                self.engine, self.no_engine_because = None, str(err)
                reason = self.no_engine_because
        if settings.engine == "ctranslate2":
            raise refused(reason)
        if reason not in self._fallbacks_said:
            self._fallbacks_said.add(reason)
            log.info("decoding with torch, not CTranslate2: %s", reason)
        return None

    def translate(self, lines: list[str], **settings: Any) -> list[str]:
        """Translations of `lines` (the best hypothesis' text); `settings` change the
        defaults for this call (beam=1, length_penalty=1.0, ...)."""
        return [row[0].text for row in self.search(lines, self.settings(**settings))]

    def translate_nbest(self, lines: list[str], n: int, raw_nbest: bool = False,
                        **settings: Any) -> list[list[tuple[str, float]]]:
        """The n best distinct (text, score) of each line, best first (see `search` and
        `Hypothesis.score`)."""
        found = self.search(lines, self.settings(nbest=n, **settings), n, raw_nbest)
        return [[(h.text, h.score) for h in row] for row in found]

    # ---- the steps ---------------------------------------------------------------------
    def encode_sources(self, lines: list[str], unknown_words: str = "unk") -> list[list[int]]:
        """The encoder input of each line (checked; [] for a line without text): its subword
        ids framed by `encoder_input`, with a warning for each truncated line.
        `unknown_words` "pad" (decode.unknown_words) turns each <unk> into the padding id,
        which the source mask hides from every attention (the study notes' translate);
        the word keeps its position, so the words after it keep theirs."""
        checked = [check_line(line, number) for number, line in enumerate(lines, start=1)]
        ids = self.tokenizer.encode([line if has_text(line) else "" for line in checked])
        if unknown_words == "pad":
            ids = [[PAD_ID if i == UNK_ID else i for i in seq] for seq in ids]
        framed = []
        for number, (line, seq) in enumerate(zip(checked, ids), start=1):
            source = self.encoder_input(seq) if has_text(line) else []
            if source and len(source) <= len(seq):
                log.warning("input %d has %d subwords; truncated to %d", number, len(seq), len(source) - 1)
            framed.append(source)
        return framed

    def source_pieces(self, sentence: str) -> list[str]:
        """The pieces of what the encoder reads for `sentence`, one per encoder position (the
        source side's labels on the page): framed as its ids are, eos as its piece."""
        eos = self.tokenizer.source_id_to_piece([EOS_ID])[0]
        return self.encoder_input(self.tokenizer.pieces(sentence), eos)

    def encoder_input(self, ids: list, eos: Any = EOS_ID) -> list:
        """What the encoder reads for a sentence's subword ids (or, with `eos` a piece, their
        pieces): the tokenizer's frame (`frame_source`: the ids then eos, or the study notes'
        <sos> ... <eos>), within what the positional table allows."""
        return self.tokenizer.frame_source(ids, eos, self.max_source)

    @staticmethod
    def _batches(ids: list[list[int]], batch_tokens: int) -> list[list[int]]:
        """Indices of non-empty inputs, longest first, cut into batches of ~batch_tokens."""
        order = sorted((i for i, s in enumerate(ids) if s), key=lambda i: -len(ids[i]))
        batches, current = [], []
        for i in order:
            width = len(ids[current[0]]) if current else len(ids[i])
            if current and width * (len(current) + 1) > batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        return batches + ([current] if current else [])

    def _decode_batch(self, src: torch.Tensor, lengths: torch.Tensor, settings: DecodeConfig,
                      nbest: int) -> list[list[tuple]]:
        """(ids without specials, normalised score, finished) of the n-best of each row of
        src (B, S), whose sources have `lengths` (B,) tokens (eos included)."""
        alpha = settings.length_penalty
        limits = self._output_limits(lengths, settings)
        if settings.beam == 1 and nbest == 1:
            tokens, scores = greedy_decode(self.model, src, limits, BOS_ID, EOS_ID, PAD_ID, banned=NEVER_EMITTED)
            tokens, scores = tokens[:, None], scores[:, None]
            emitted = tokens.ne(PAD_ID).sum(-1).cpu()  # (B, 1) tokens emitted, eos included
            scores = scores.float().cpu() / torch.tensor([[gnmt_penalty(int(n), alpha)] for n in emitted[:, 0]])
        else:
            tokens, scores = beam_search(self.model, src, settings.beam, limits, BOS_ID, EOS_ID, PAD_ID,
                                         length_penalty=alpha, nbest=nbest, banned=NEVER_EMITTED)
        return [
            [([i for i in row if i not in SPECIAL_IDS], float(s), EOS_ID in row)
             for row, s in zip(rows.tolist(), row_scores.tolist())]
            for rows, row_scores in zip(tokens.cpu(), scores.float().cpu())
        ]

    def _output_limits(self, src_lengths: torch.Tensor, settings: DecodeConfig) -> torch.Tensor:
        """Most output subwords per source of `src_lengths` (eos included): a * length + b,
        capped by the positional table."""
        return max_lengths(src_lengths, settings.max_len_a, settings.max_len_b).clamp(max=self.max_source)

    def _hypothesis(self, ids: list[int], score: float, finished: bool) -> Hypothesis:
        return Hypothesis(self.tokenizer.decode([ids])[0], self.tokenizer.id_to_piece(ids), ids, score, finished)

    # ---- looking inside (decoding/trace.py, inference/translation_inspection.py) ---------------------------------
    def steps(self, sentence: str, settings: DecodeConfig | None = None, top_k: int = 5,
              prefix: list[str] | None = None) -> Trace:
        """The beam search of one sentence step by step (decoding/trace.py), after the
        forced target subwords `prefix` (pieces, as `Hypothesis.tokens` gives them).
        Without a prefix it ends with the translation `search` gives with `settings`.
        Not thread-safe: it hooks the shared model's cross-attention."""
        settings = settings if settings is not None else self.defaults
        src_ids = self.encode_sources([sentence], settings.unknown_words)[0]
        if not src_ids:
            raise UserError("the sentence to decode is empty")
        forced = [self._piece_id(piece) for piece in prefix or []]
        limit = int(self._output_limits(torch.tensor([len(src_ids)]), settings))
        src = torch.tensor([src_ids], device=self.device)  # (1, S)
        with torch.inference_mode(), autocast(self.device, resolve_precision(settings.precision, self.device)):
            return trace_beam_search(self.model, src, settings.beam, limit, BOS_ID, EOS_ID, PAD_ID,
                                     settings.length_penalty, top_k, forced, banned=NEVER_EMITTED)

    def attention(self, sentence: str, hypothesis: Hypothesis | None = None,
                  settings: DecodeConfig | None = None) -> AttentionMaps:
        """Attention weights of one sentence and a translation of it: the output is
        teacher-forced through the model once with every MultiHeadAttention recorded
        (inspection.forced_pass). The output is `hypothesis` when given (one already found,
        for example by a batched search: its very ids, not a re-tokenisation of its text),
        else the best hypothesis of `settings` (default: the translator's defaults).
        Not thread-safe: it hooks the shared model's attention modules."""
        with self._forced_pass(sentence, hypothesis, settings) as (maps, _):
            return maps

    def explain(self, sentence: str, hypothesis: Hypothesis, kind: str, layer: int, head: int,
                query: int) -> dict[str, Any]:
        """Equation 1 for one query of one head, with the numbers of this sentence:
        q.k_j for every key j, divided by sqrt(d_k), the mask, and the softmax of the row
        (which equals the weights `attention` shows). layer, head, query count from 0."""
        with self._forced_pass(sentence, hypothesis, None) as (maps, recorded):
            return explain_query(self.model, maps, recorded, kind, layer, head, query)

    def hypothesis_of(self, pieces: list[str]) -> Hypothesis:
        """The output given as subword pieces (as `Hypothesis.tokens`, optionally ending
        with </s>), for showing its attention."""
        eos = self.tokenizer.id_to_piece([EOS_ID])[0]
        finished = bool(pieces) and pieces[-1] == eos
        ids = [self._piece_id(piece) for piece in (pieces[:-1] if finished else pieces)]
        return self._hypothesis(ids, 0.0, finished)

    def _piece_id(self, piece: str) -> int:
        """The id of a target subword a user forces; unknown pieces and specials are refused."""
        found = self.tokenizer.piece_to_id(piece)
        if found in SPECIAL_IDS or (found == UNK_ID and piece != self.tokenizer.id_to_piece([UNK_ID])[0]):
            raise UserError(f"prefix token {piece!r} is not a subword of this model's vocabulary")
        return found

    @contextmanager
    def _forced_pass(self, sentence: str, hypothesis: Hypothesis | None,
                     settings: DecodeConfig | None) -> Iterator[tuple[AttentionMaps, AttentionRecorder]]:
        """`inspection.forced_pass` of `sentence` and `hypothesis` (by default the best of
        `settings`); inside the block the recorder still holds what it saw."""
        settings = settings if settings is not None else self.defaults
        src_ids = self.encode_sources([sentence], settings.unknown_words)[0]
        if not src_ids:
            raise UserError("the sentence to show attention for is empty")
        if hypothesis is None:  # torch's search, as the views that look inside it use
            hypothesis = self.search([sentence], replace(settings, engine="torch"))[0][0]
        output = hypothesis.ids[: self.max_source] + ([EOS_ID] if hypothesis.finished or not hypothesis.ids else [])
        src = torch.tensor([src_ids], device=self.device)  # (1, S)
        precision = resolve_precision(settings.precision, self.device)
        with forced_pass(self.model, self.tokenizer, src, output, hypothesis.text, precision) as found:
            yield found
