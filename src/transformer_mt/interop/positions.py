"""An interleaved run as a halves run, exactly: a permutation of the model dimension.

Marian and Pegasus (Hugging Face) add the sinusoid in the halves layout (the sines in the
first dimensions, the cosines of the same frequencies after them); the paper's layout,
ours by default, interleaves them (sin, cos, sin, cos, ...). The two tables hold the
same columns in another order: halves[:, j] = interleaved[:, PERM[j]] with
PERM = [0, 2, 4, ..., 1, 3, 5, ...].

The positions are added to the embeddings, so the table alone cannot be reordered; but
the whole residual stream can. Every operation on it is a linear map, an elementwise sum
or a LayerNorm (mean and variance over all coordinates do not depend on their order), so
permuting the d_model coordinates of every weight that reads or writes the stream
(embedding and output columns, the inputs of W^Q, W^K, W^V and W_1, the outputs of W^O
and W_2 with their biases, every LayerNorm's gain and bias) gives a model that computes
the same function with the halves table: the same logits up to float rounding (the sums
run in another order). The heads and the feed-forward's inner units are not touched.
The permutation moves numbers and changes none, so undoing it (the import) gives back
the very same weights."""

from __future__ import annotations

import torch

from transformer_mt.common.errors import UserError

# How each weight meets the residual stream, by the end of its name in our state dict.
READS_STREAM = ("lut.weight", "generator.proj.weight", "in_proj.weight", "w_1.weight")  # columns
WRITES_STREAM = ("out_proj.weight", "out_proj.bias", "w_2.weight", "w_2.bias", "norm.weight", "norm.bias")  # rows
APART = ("in_proj.bias", "w_1.bias", "generator.proj.bias")  # the heads, the inner units, the vocabulary


def interleaved_to_halves(d_model: int) -> torch.Tensor:
    """PERM: the interleaved coordinate behind each halves coordinate."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_state(state: dict[str, torch.Tensor], perm: torch.Tensor, where: str) -> dict[str, torch.Tensor]:
    """Our state dict with the residual stream's coordinates reordered: new coordinate j
    is old coordinate perm[j]. A weight of unknown role is refused: silently leaving it
    would give a model that computes something else."""
    out = {}
    for key, tensor in state.items():
        if key.endswith(READS_STREAM):
            out[key] = tensor[:, perm].clone()
        elif key.endswith(WRITES_STREAM):
            out[key] = tensor[perm].clone()
        elif key.endswith(APART):
            out[key] = tensor.clone()
        else:
            raise UserError(f"{where}: the weight {key} has no known role in the model dimension; "
                            "this model cannot be converted between positional layouts")
    return out


def to_halves(state: dict[str, torch.Tensor], d_model: int, where: str) -> dict[str, torch.Tensor]:
    """An interleaved model's weights as those of the equal halves model."""
    return permute_state(state, interleaved_to_halves(d_model), where)


def to_interleaved(state: dict[str, torch.Tensor], d_model: int, where: str) -> dict[str, torch.Tensor]:
    """The inverse of `to_halves`."""
    return permute_state(state, torch.argsort(interleaved_to_halves(d_model)), where)
