"""The learner's code that `transformer-mt check` is tested on: two correct implementations
(annotated.py, tutorial.py) and, as patches of them, the study notes' defects, the bugs a
learner writes (each must fail its check) and the choices the paper leaves open (each must
pass). A patch is a list of (text, replacement) pairs, each text found exactly once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
Patch = tuple[tuple[str, str], ...]

XAVIER_LOOP = """    for weights in model.parameters():  # re-draw every matrix: the deep copies start equal
        if weights.dim() > 1:
            nn.init.xavier_uniform_(weights)
"""


@dataclass(frozen=True)
class Case:
    """`base` ("annotated" or "tutorial") with `patch` applied; `fails`: the check it must fail."""

    name: str
    base: str
    patch: Patch
    fails: str = ""

    def source(self) -> str:
        text = (HERE / f"{self.base}.py").read_text(encoding="utf-8")
        for old, new in self.patch:
            assert text.count(old) == 1, f"{self.name}: {old!r} is not in {self.base}.py exactly once"
            text = text.replace(old, new)
        return text

    def write(self, folder: Path) -> Path:
        path = folder / f"{self.name}.py"
        path.write_text(self.source(), encoding="utf-8")
        return path


# The study notes' make_model: deep copies never re-drawn, nn.Embedding's N(0, 1) times sqrt(d_model).
NOTES = Case("notes", "annotated", ((XAVIER_LOOP, ""),))

BUGS = [
    # the Annotated Transformer's convention
    Case("inverted_mask", "annotated", (("masked_fill(~mask.bool(), -1e9)", "masked_fill(mask.bool(), -1e9)"),), "causal"),
    Case("no_scale", "annotated", (("scale = 1 / math.sqrt(query.size(-1))", "scale = 1"),), "attention"),
    Case("scale_by_d_k", "annotated", (("scale = 1 / math.sqrt(query.size(-1))", "scale = 1 / query.size(-1)"),),
         "attention"),
    Case("softmax_over_queries", "annotated", (("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),),
         "attention"),
    Case("heads_merged_without_transpose", "annotated",
         (("concat = heads.transpose(1, 2).reshape(", "concat = heads.reshape("),), "heads"),
    Case("no_w_o", "annotated", (("return self.linears[3](concat)", "return concat"),), "heads"),
    Case("sin_cos_swapped", "annotated", (("table[:, 0::2] = torch.sin(pos * freq)", "table[:, 0::2] = torch.cos(pos * freq)"),
                                          ("table[:, 1::2] = torch.cos(pos * freq)", "table[:, 1::2] = torch.sin(pos * freq)")),
         "positional_encoding"),
    Case("no_target_positions", "annotated", (("nn.Sequential(Embeddings(d_model, tgt_vocab), c(position))",
                                               "nn.Sequential(Embeddings(d_model, tgt_vocab))"),), "positional_encoding"),
    Case("embeddings_not_scaled", "annotated", (("return math.sqrt(self.d_model) * self.lut(x)", "return self.lut(x)"),),
         "embedding_scale"),
    Case("no_residual", "annotated", (("return x + self.dropout(sublayer(self.norm(x)))",
                                       "return self.dropout(sublayer(self.norm(x)))"),), "residual"),
    Case("norm_divides_by_variance", "annotated", (("/ (x.std(dim=-1, keepdim=True) + self.eps)",
                                                    "/ (x.var(dim=-1, keepdim=True) + self.eps)"),), "layer_norm"),
    Case("no_relu", "annotated", (("hidden = F.relu(self.w_1(x))", "hidden = self.w_1(x)"),), "feed_forward"),
    Case("dropout_in_eval", "annotated", (("return self.w_2(self.dropout(hidden))", "return self.w_2(F.dropout(hidden, 0.1))"),),
         "dropout"),
    Case("one_encoder_layer_object", "annotated",
         (("        self.layers = clones(layer, N)\n        self.norm = LayerNorm(layer.size)\n\n    def forward(self, x, mask):",
           "        self.layers = nn.ModuleList([layer] * N)\n        self.norm = LayerNorm(layer.size)\n\n"
           "    def forward(self, x, mask):"),), "shared_layers"),
    Case("decoder_attends_to_itself", "annotated", (("self.src_attn(y, memory, memory, src_mask)",
                                                     "self.src_attn(y, y, y, tgt_mask)"),), "source_used"),
    Case("generator_returns_logits", "annotated", (("return F.log_softmax(self.proj(x), dim=-1)", "return self.proj(x)"),),
         "output"),
    Case("upper_triangular_mask", "annotated", (("dtype=torch.bool).tril()", "dtype=torch.bool).triu()"),), "mask"),
    Case("padding_never_masked", "annotated", (("src_mask = (src != pad).unsqueeze(1)",
                                                "src_mask = torch.ones_like(src, dtype=torch.bool).unsqueeze(1)"),),
         "padding"),
    Case("embeddings_detached", "annotated", (("* self.lut(x)", "* self.lut(x).detach()"),), "gradients"),
    Case("no_decoder_mask", "annotated", (("self.self_attn(y, y, y, tgt_mask)", "self.self_attn(y, y, y, None)"),),
         "causal"),
    Case("masked_after_softmax", "annotated", (("scores = scores.masked_fill(~mask.bool(), -1e9)\n    p_attn = torch.softmax(scores, dim=-1)",
                                                "p_attn = torch.softmax(scores, dim=-1)\n    if mask is not None:\n"
                                                "        p_attn = p_attn.masked_fill(~mask.bool(), 0.0)"),), "attention"),
    Case("positions_by_batch_row", "annotated", (('self.register_buffer("pe", table.unsqueeze(0))',
                                                  'self.register_buffer("pe", table.unsqueeze(1))'),
                                                 ("x + self.pe[:, : x.size(1)]", "x + self.pe[: x.size(0)]")),
         "positional_encoding"),
    Case("log_softmax_over_positions", "annotated", (("F.log_softmax(self.proj(x), dim=-1)", "F.log_softmax(self.proj(x), dim=1)"),),
         "output"),
    # the assembled tutorial's convention
    Case("softmax_over_heads", "tutorial", (("F.softmax(scores, dim=-1)", "F.softmax(scores, dim=1)"),), "attention"),
    Case("scores_times_mask", "tutorial", (("scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)",
                                            "scores = scores * mask.unsqueeze(1)"),), "attention"),
    Case("one_map_for_q_and_k", "tutorial", (("k = self.k_linear(k)", "k = self.q_linear(k)"),), "projections"),
    Case("heads_split_without_transpose", "tutorial",
         tuple((f"{x} = self.{x}_linear({x}).view(bs, -1, self.h, self.d_k).transpose(1, 2)",
                f"{x} = self.{x}_linear({x}).view(bs, self.h, -1, self.d_k)") for x in "qkv"), "heads"),
    Case("diagonal_hidden", "tutorial", (("diagonal=1)", "diagonal=0)"),), "mask"),
    Case("no_residual_around_ffn", "tutorial", (("self.norm_3(x + self.dropout_3(self.ff(x)))",
                                                 "self.norm_3(self.dropout_3(self.ff(x)))"),), "residual"),
    Case("norm_over_positions", "tutorial", (("x.mean(dim=-1, keepdim=True), x.std(dim=-1, keepdim=True)",
                                              "x.mean(dim=1, keepdim=True), x.std(dim=1, keepdim=True)"),), "layer_norm"),
    Case("exponent_doubled", "tutorial", (("angle = pos / 10000 ** (i / d_model)\n"
                                           "                pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)",
                                           "pe[pos, i] = math.sin(pos / 10000 ** (2 * i / d_model))\n"
                                           "                pe[pos, i + 1] = math.cos(pos / 10000 ** (2 * (i + 1) / d_model))"),),
         "positional_encoding"),
    Case("scaled_positions", "tutorial", (("x = x * math.sqrt(self.d_model)\n        return self.dropout(x + self.pe[:, : x.size(1)])",
                                           "return self.dropout((x + self.pe[:, : x.size(1)]) * math.sqrt(self.d_model))"),),
         "positional_encoding"),
    Case("probabilities_out", "tutorial", (("return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask))",
                                            "return F.softmax(self.out(self.decoder(trg, e_outputs, src_mask, trg_mask)), -1)"),),
         "output"),
    Case("dropout_never_given", "tutorial", (("opt.d_ff, opt.dropout)", "opt.d_ff, 0.0)"),), "dropout"),
    Case("encoder_ignores_n", "tutorial", (("get_clones(EncoderLayer(d_model, heads, d_ff, dropout), N)",
                                            "get_clones(EncoderLayer(d_model, heads, d_ff, dropout), 1)"),), "shared_layers"),
    Case("scale_by_sqrt_d_model", "tutorial", (("/ math.sqrt(self.d_k)", "/ math.sqrt(self.d_model)"),), "attention"),
    Case("cross_attention_unmasked", "tutorial", (("self.attn_2(x, e_outputs, e_outputs, src_mask)",
                                                   "self.attn_2(x, e_outputs, e_outputs, None)"),), "padding"),
    Case("tutorial_never_redrawn", "tutorial", (("    for p in model.parameters():\n        if p.dim() > 1:\n"
                                                 "            nn.init.xavier_uniform_(p)\n", ""),), "cloned_init"),
    Case("n01_target_embeddings", "tutorial", (("    return model\n", "    nn.init.normal_(model.decoder.embed.embed.weight)\n"
                                                                   "    return model\n"),), "embedding_init"),
    Case("an_unused_projection", "annotated", (("clones(nn.Linear(d_model, d_model), 4)",
                                                "clones(nn.Linear(d_model, d_model), 5)"),), "parameter_count"),
    Case("no_ffn_bias", "tutorial", (("self.linear_2 = nn.Linear(d_ff, d_model)",
                                      "self.linear_2 = nn.Linear(d_ff, d_model, bias=False)"),), "feed_forward"),
]

# What the paper leaves open: every one passes every check.
OPEN_CHOICES = [
    Case("post_norm", "annotated", (("return x + self.dropout(sublayer(self.norm(x)))",
                                     "return self.norm(x + self.dropout(sublayer(x)))"),)),
    Case("pytorch_layer_norm", "annotated", (("self.norm = LayerNorm(size)", "self.norm = nn.LayerNorm(size)"),)),
    Case("tied_output", "annotated", (("    return model\n", "    model.generator.proj.weight = model.tgt_embed[0].lut.weight\n"
                                                         "    return model\n"),)),
    Case("all_tied", "annotated", (("    attn = MultiHeadedAttention(h, d_model, dropout)\n",
                                    "    assert src_vocab == tgt_vocab, 'one vocabulary'\n"
                                    "    attn = MultiHeadedAttention(h, d_model, dropout)\n"),
                                   ("    return model\n", "    model.src_embed[0].lut.weight = model.tgt_embed[0].lut.weight\n"
                                                         "    model.generator.proj.weight = model.tgt_embed[0].lut.weight\n"
                                                         "    return model\n"))),
    Case("halves_layout", "annotated", (("table[:, 0::2] = torch.sin(pos * freq)\n        table[:, 1::2] = torch.cos(pos * freq)",
                                         "table = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)"),)),
    Case("learned_positions", "annotated", (('self.register_buffer("pe", table.unsqueeze(0))',
                                             "self.pe = nn.Parameter(table.unsqueeze(0))"),)),
    Case("true_means_hidden", "annotated", (("masked_fill(~mask.bool(), -1e9)", "masked_fill(mask.bool(), -1e9)"),
                                            ("dtype=torch.bool).tril()", "dtype=torch.bool).triu(1)"),
                                            ("src_mask = (src != pad).unsqueeze(1)", "src_mask = (src == pad).unsqueeze(1)"),
                                            ("tgt_mask = (tgt != pad).unsqueeze(1) & subsequent_mask",
                                             "tgt_mask = (tgt == pad).unsqueeze(1) | subsequent_mask"))),
    Case("look_ahead_function_only", "annotated", (("def create_masks(", "def _masks("),)),
    Case("additive_masks", "annotated", (
        ("scores = scores.masked_fill(~mask.bool(), -1e9)", "scores = scores + mask"),
        ("allowed = torch.ones(size, size, dtype=torch.bool).tril()",
         "allowed = torch.zeros(size, size).masked_fill(torch.ones(size, size, dtype=torch.bool).triu(1), -1e9)"),
        ("src_mask = (src != pad).unsqueeze(1)", "src_mask = torch.zeros(src.shape).masked_fill(src == pad, -1e9).unsqueeze(1)"),
        ("tgt_mask = (tgt != pad).unsqueeze(1) & subsequent_mask(tgt.size(1))",
         "tgt_mask = torch.zeros(tgt.shape).masked_fill(tgt == pad, -1e9).unsqueeze(1) + subsequent_mask(tgt.size(1))"))),
    # the layer order of the tutorial seed 003's components come from: Norm before each sub-layer, a final Norm
    Case("pre_norm", "tutorial", (
        ("        x = self.norm_1(x + self.dropout_1(self.attn(x, x, x, mask)))\n"
         "        return self.norm_2(x + self.dropout_2(self.ff(x)))",
         "        x2 = self.norm_1(x)\n        x = x + self.dropout_1(self.attn(x2, x2, x2, mask))\n"
         "        x2 = self.norm_2(x)\n        return x + self.dropout_2(self.ff(x2))"),
        ("        x = self.norm_1(x + self.dropout_1(self.attn_1(x, x, x, trg_mask)))\n"
         "        x = self.norm_2(x + self.dropout_2(self.attn_2(x, e_outputs, e_outputs, src_mask)))\n"
         "        return self.norm_3(x + self.dropout_3(self.ff(x)))",
         "        x2 = self.norm_1(x)\n        x = x + self.dropout_1(self.attn_1(x2, x2, x2, trg_mask))\n"
         "        x2 = self.norm_2(x)\n        x = x + self.dropout_2(self.attn_2(x2, e_outputs, e_outputs, src_mask))\n"
         "        x2 = self.norm_3(x)\n        return x + self.dropout_3(self.ff(x2))"),
        ("        self.layers = get_clones(EncoderLayer(d_model, heads, d_ff, dropout), N)\n",
         "        self.layers = get_clones(EncoderLayer(d_model, heads, d_ff, dropout), N)\n        self.norm = Norm(d_model)\n"),
        ("            x = layer(x, mask)\n        return x", "            x = layer(x, mask)\n        return self.norm(x)"),
        ("        self.layers = get_clones(DecoderLayer(d_model, heads, d_ff, dropout), N)\n",
         "        self.layers = get_clones(DecoderLayer(d_model, heads, d_ff, dropout), N)\n        self.norm = Norm(d_model)\n"),
        ("            x = layer(x, e_outputs, src_mask, trg_mask)\n        return x",
         "            x = layer(x, e_outputs, src_mask, trg_mask)\n        return self.norm(x)"))),
    Case("log_probabilities_out", "tutorial", (("return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask))",
                                                "return F.log_softmax(self.out(self.decoder(trg, e_outputs, src_mask, "
                                                "trg_mask)), -1)"),)),
    Case("no_mask_functions", "tutorial", (("def nopeak_mask(", "def _future_hidden("),
                                           ("def create_masks(", "def _masks("),
                                           ("& nopeak_mask(", "& _future_hidden("))),
]
