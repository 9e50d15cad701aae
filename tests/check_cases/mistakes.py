"""The mistakes a learner's file makes that `train --model` must meet as a learner needs (issue
105's sweep): each a patch of a correct file (cases.Case), with the outcome it must get: refused
before the first step in one line that says `says` (exit code 2, no run left), or trained with
a line that says `says`. `check`: the check id `transformer-mt check` fails it with, if any."""

from __future__ import annotations

from dataclasses import dataclass

from check_cases.cases import Case

REFUSED, TRAINED = "refused", "trained"


@dataclass(frozen=True)
class Mistake:
    case: Case
    outcome: str
    says: tuple[str, ...]
    check: str = ""


ENCODER_LAYERS = "        self.layers = clones(layer, N)\n        self.norm = LayerNorm(layer.size)\n\n    def forward(self, x, mask):"

MISTAKES = [
    # layers kept in a plain list: never trained, never put in eval mode, not in the run's weights
    Mistake(Case("layers_in_a_list", "annotated", (
        (ENCODER_LAYERS, ENCODER_LAYERS.replace("clones(layer, N)", "[copy.deepcopy(layer) for _ in range(N)]")),)),
        REFUSED, ("Encoder.layers", "plain Python list", "nn.ModuleList"), "registered"),
    Mistake(Case("layers_in_a_dict", "tutorial", (
        ("        self.layers = get_clones(EncoderLayer(d_model, heads, d_ff, dropout), N)\n",
         "        self.layers = {i: copy.deepcopy(EncoderLayer(d_model, heads, d_ff, dropout)) for i in range(N)}\n"),
        ("        for layer in self.layers:\n            x = layer(x, mask)",
         "        for layer in self.layers.values():\n            x = layer(x, mask)"))),
        REFUSED, ("Encoder.layers", "plain Python dict", "nn.ModuleDict"), "registered"),
    # dropout hard-coded on: eval mode is not deterministic; decoding turns it off
    Mistake(Case("dropout_forced_on", "annotated", (
        ("return x + self.dropout(sublayer(self.norm(x)))",
         "return x + F.dropout(sublayer(self.norm(x)), 0.1, training=True)"),)),
        TRAINED, ("F.dropout", "training=True", "eval mode"), "dropout"),
    # random numbers drawn in eval mode: no dropout to turn off, so decoding cannot be made deterministic
    Mistake(Case("noise_in_eval", "annotated", (
        ("return self.dropout(x + self.pe[:, : x.size(1)])",
         "return self.dropout(x + self.pe[:, : x.size(1)] + 0.01 * torch.randn_like(x))"),)),
        REFUSED, ("every dropout off", "random numbers"), "dropout"),
    # a padding id of their own in their mask function
    Mistake(Case("pad_id_one", "annotated", (
        ("src_mask = (src != pad).unsqueeze(1)", "src_mask = (src != 1).unsqueeze(1)"),
        ("tgt_mask = (tgt != pad).unsqueeze(1)", "tgt_mask = (tgt != 1).unsqueeze(1)"))),
        REFUSED, ("create_masks", "id 1", "pads with id 0"), "padding"),
    # nn.Transformer reading (length, batch, d_model)
    Mistake(Case("sequence_first", "torch_transformer", (("dropout,\n                                          batch_first=True)", "dropout,\n                                          batch_first=False)"),)),
        REFUSED, ("batch_first=False", "batch-first", "batch_first=True")),
    # (logits, attention) out, as seq2seq tutorials return
    Mistake(Case("tuple_output", "tutorial", (
        ("return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask))",
         "return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask)), e_outputs"),)),
        TRAINED, ("returns a tuple", "first")),
    # a residual added in place: the forward runs, the backward pass fails
    Mistake(Case("residual_in_place", "annotated", (
        ("        return x + self.dropout(sublayer(self.norm(x)))",
         "        x += self.dropout(sublayer(self.norm(x)))\n        return x"),)),
        REFUSED, ("residual_in_place.py:122:", "x += self.dropout(sublayer(self.norm(x)))", "in place",
                  "x = x + "), "gradients"),
    # a builder that ignores the sizes it is given
    Mistake(Case("ignores_sizes", "annotated", (
        ("    attn = MultiHeadedAttention(h, d_model, dropout)\n",
         "    d_model, d_ff = 128, 512\n    attn = MultiHeadedAttention(h, d_model, dropout)\n"),)),
        TRAINED, ("parameters", "the preset's own model has", "ignores")),
    # prints at import and in forward
    Mistake(Case("prints", "annotated", (
        ("import copy\n", "import copy\n\nfor i in range(1000):\n    print('loading', i)\n"),
        ("        return F.log_softmax(self.proj(x), dim=-1)",
         "        print('generator', x.shape)\n        return F.log_softmax(self.proj(x), dim=-1)"))),
        TRAINED, ()),
    # one vocabulary size for two vocabularies
    Mistake(Case("one_vocabulary", "annotated", (
        ("def make_model(src_vocab, tgt_vocab, N=6,", "def make_model(vocab, N=6,"),
        ("Embeddings(d_model, src_vocab)", "Embeddings(d_model, vocab)"),
        ("Embeddings(d_model, tgt_vocab)", "Embeddings(d_model, vocab)"),
        ("Generator(d_model, tgt_vocab)", "Generator(d_model, vocab)"))),
        REFUSED, ("one vocabulary size", "source", "target", "joint_vocab")),
]

BY_NAME = {mistake.case.name: mistake for mistake in MISTAKES}
