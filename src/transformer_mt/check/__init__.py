"""`transformer-mt check FILE[:NAME]`: a learner's own Transformer code checked against the
paper, beside the doctor (diagnosis/), which reads runs. The learner's file runs in a child
process; each check is one function with a stable id, judged on what their model does, not on
where a step is written, with reference values from the paper's formulas and model/.

    learner/             (below) their file imported, NAME built, the conventions, the masks, recording
    check/subject.py     the model as the checks see it: built at the checks' sizes, the batch, one pass
    check/behaviour.py   mask, causal, padding, source_used, output, dropout, gradients
    check/attention.py   attention (equation 1), heads, projections
    check/positions.py   positional_encoding, embedding_scale, embedding_init
    check/layers.py      feed_forward (equation 2), layer_norm
    check/structure.py   residual, shared_layers, cloned_init, parameter_count
    check/copy_task.py   learns_copy: the copy task trained on their model
    check/result.py      pass / fail / not_checked, the limits and their reasons
    check/report.py      CHECKS in order, run_checks, the text and JSON reports
    check/child.py       the child process and the parent's side of it
"""
