"""The run directory and its weight files: what `train` writes and everything else reads.

    runs/directory.py     RunDir: config, tokenizer, checkpoints, best/average weights, snapshots
    runs/tensor_checks.py what every reader and writer of weight files checks (no NaN in or out)
    runs/quantize.py      the weights a model decodes with: float32, bfloat16 or int8
"""
