"""The doctor: `transformer-mt doctor RUN` names why a Transformer translates poorly, with
the run's own numbers.

    diagnosis/case.py      what is read of a run, an imported checkpoint or a config
    diagnosis/finding.py   a Finding: id, value, threshold, what it means, the fix, the measured cost
    diagnosis/thresholds.py  every threshold, with its reason
    diagnosis/weights.py   embedding_scale, cloned_init, tied_scale
    diagnosis/text.py      unknown_words, truncation
    diagnosis/metrics.py   memorization, schedule, undertrained
    diagnosis/outputs.py   source_ignored, length, repetition
    diagnosis/report.py    `diagnose`: every check on one case; the text and JSON reports

It reads runs and never trains. Each check is one function of a Case that returns a
Finding, None when the case passes, or raises NotChecked when the case has nothing to
measure it with (a config has no metrics yet)."""
