"""CTranslate2 as the engine behind `Translator.search` (decode.engine: auto | ctranslate2).

The run's model is exported once (interop/ctranslate2.py's mapping) into the run folder,
`RUN/ctranslate2/CHECKPOINT/`, with the SHA-256 of the weights it was made from; an export
whose weights differ from the loaded model's is made again, so a run trained further or
averaged anew is never decoded from a stale copy.

CTranslate2 searches as `Translator.search` does, token for token (tests/integration/
test_ctranslate2_engine.py), only where the settings map exactly: float32 weights and
arithmetic on the CPU, unknown source words as <unk>, the best hypothesis only (its n-best
lists end by another rule), and greedy search or a beam with length penalty 0 (CTranslate2
divides a hypothesis' log-probability by |Y| ** alpha, we by the GNMT ((5 + |Y|) / 6) **
alpha: the same alpha can rank hypotheses differently). Greedy search picks each token by
its probability alone, so any alpha maps; its score is divided by the GNMT penalty here.
`mismatch` names the first setting that does not map. A batch where CTranslate2 chose pad
or bos, which torch's search bans, is searched by torch.

Threads: one intra-op thread on hosts of at most two cores, where a second thread slows
CTranslate2 down (docs/benchmarks.md, "Decoding speed"); CTranslate2's own choice (0) on
larger hosts."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import threading
from itertools import groupby

import torch

from transformer_mt.common.config import Config, DecodeConfig
from transformer_mt.common.specials import EOS_ID, NEVER_EMITTED, SPECIAL_IDS
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.decoding.beam import gnmt_penalty
from transformer_mt.common.errors import UserError
from transformer_mt.interop.ctranslate2 import METADATA, check_exportable, import_ctranslate2, write_model_folder
from transformer_mt.model.transformer import EncoderDecoder
from transformer_mt.runs.directory import RunDir, require_ours

log = logging.getLogger("transformer_mt")


def load_engine(run: RunDir, checkpoint: str, cfg: Config, model: EncoderDecoder, tokenizer: Tokenizer,
                dtype: str) -> tuple[CTranslate2Engine | None, str | None]:
    """The engine of a run's model, or None and why it cannot have one: weights other than
    float32, CTranslate2 not installed, a model CTranslate2 cannot hold. Which engine searches
    a given call is decided by `Translator.engine_for`."""
    try:
        require_ours(run, "CTranslate2")
    except UserError as err:
        return None, str(err)
    if dtype != "float32":
        return None, f"the weights are {dtype} (CTranslate2 gives torch's outputs from float32 weights only)"
    try:
        if importlib.util.find_spec("ctranslate2") is None:  # installed: imported at its first search, not here
            import_ctranslate2()  # its one line on how to install it
        check_exportable(cfg, tokenizer)
    except UserError as err:
        return None, str(err)
    return CTranslate2Engine(run, checkpoint, cfg, model, tokenizer), None


def refused(reason: str) -> UserError:
    """decode.engine ctranslate2 where CTranslate2 cannot give torch's outputs: one line."""
    return UserError(f"decode.engine is ctranslate2, but {reason}; use decode.engine auto or torch")


def mismatch(settings: DecodeConfig, nbest: int, device: torch.device, precision: str) -> str | None:
    """Why CTranslate2 would not give `Translator.search`'s outputs for these settings (None
    where it would), for float32 weights: `precision` is the resolved decode.precision."""
    if device.type != "cpu":
        return f"the device is {device.type} (the CTranslate2 engine runs on the CPU)"
    if precision != "fp32":
        return f"decode.precision is {precision} (CTranslate2 gives torch's outputs in float32 only)"
    if settings.unknown_words != "unk":
        return "decode.unknown_words is pad (CTranslate2 reads every source token)"
    if nbest > 1:
        return f"an n-best list of {nbest} (CTranslate2 collects finished hypotheses by another rule)"
    if settings.beam > 1 and settings.length_penalty != 0:
        return (f"beam {settings.beam} with length penalty {settings.length_penalty} (CTranslate2 divides by "
                "|Y| ** alpha, not the GNMT penalty; length penalty 0 or greedy search map exactly)")
    return None


def weights_digest(model: EncoderDecoder) -> str:
    """SHA-256 over the model's parameters and buffers, in state-dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def intra_threads() -> int:
    """One thread on a host of at most two cores (see the module docstring), else CTranslate2's choice."""
    return 1 if (os.cpu_count() or 1) <= 2 else 0


class CTranslate2Engine:
    """The run's model in CTranslate2, exported on first use and searched batch by batch."""

    def __init__(self, run: RunDir, checkpoint: str, cfg: Config, model: EncoderDecoder, tokenizer: Tokenizer) -> None:
        self.folder = (run.root / "ctranslate2" / checkpoint).resolve()
        self.run, self.checkpoint, self.cfg, self.model, self.tokenizer = run, checkpoint, cfg, model, tokenizer
        self.max_positions = model.positional.max_positions
        self._translator = None
        self._lock = threading.Lock()

    def translator(self):
        """The ctranslate2.Translator, exported again where the weights changed."""
        with self._lock:
            if self._translator is None:
                digest = weights_digest(self.model)
                if self._exported_digest() != digest:
                    write_model_folder(self.run, self.cfg, self.tokenizer, self.model, self.folder, "float32",
                                       {"checkpoint": self.checkpoint, "weights_sha256": digest})
                    log.info("exported the %s weights to CTranslate2 for decoding: %s", self.checkpoint, self.folder)
                ctranslate2, torch_threads = import_ctranslate2(), torch.get_num_threads()
                self._translator = ctranslate2.Translator(str(self.folder), device="cpu", compute_type="float32",
                                                          intra_threads=intra_threads(), inter_threads=1)
                torch.set_num_threads(torch_threads)  # its OpenMP setting would otherwise be torch's too
            return self._translator

    def _exported_digest(self) -> str | None:
        try:
            return json.loads((self.folder / METADATA).read_text(encoding="utf-8")).get("weights_sha256")
        except (OSError, ValueError):
            return None

    def decode_batch(self, sources: list[list[int]], limits: list[int], settings: DecodeConfig,
                     nbest: int) -> list[list[tuple[list[int], float, bool]]] | None:
        """(ids without specials, normalised score, finished) of the n-best of each source,
        as `Translator._decode_batch` gives them. `sources` end with eos (which CTranslate2
        adds itself); `limits` are the most output subwords of each (eos not counted), so
        rows of one limit are searched together. None where CTranslate2 chose pad or bos,
        which torch's search never emits (banned after the softmax; CTranslate2's
        suppress_sequences would ban them before it and change every score): that batch is
        torch's to search."""
        translator, eos = self.translator(), self.tokenizer.id_to_piece([EOS_ID])[0]
        found: list[list[tuple[list[int], float, bool]]] = [[] for _ in sources]
        rows = sorted(range(len(sources)), key=lambda i: limits[i])
        for limit, group in groupby(rows, key=lambda i: limits[i]):
            group = list(group)
            results = translator.translate_batch(
                [self.tokenizer.id_to_piece(sources[i][:-1]) for i in group], beam_size=settings.beam,
                num_hypotheses=nbest, length_penalty=0.0, min_decoding_length=0, max_decoding_length=limit + 1,
                max_input_length=self.max_positions, return_scores=True, return_end_token=True,
                max_batch_size=len(group))
            for i, result in zip(group, results):
                found[i] = [self._hypothesis(tokens, score, eos, settings) for tokens, score
                            in zip(result.hypotheses, result.scores)]
                if any(emitted is None for emitted in found[i]):
                    return None
        return found

    def _hypothesis(self, tokens: list[str], score: float, eos: str,
                    settings: DecodeConfig) -> tuple[list[int], float, bool] | None:
        finished = bool(tokens) and tokens[-1] == eos
        ids = [self.tokenizer.piece_to_id(piece) for piece in tokens]
        if any(i in NEVER_EMITTED for i in ids):
            return None
        if settings.beam == 1:  # greedy: CTranslate2's log-probability, divided as greedy's score is
            score /= gnmt_penalty(len(ids), settings.length_penalty)
        return [i for i in ids if i not in SPECIAL_IDS], float(score), finished
