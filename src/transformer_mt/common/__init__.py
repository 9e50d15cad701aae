"""The leaves every layer may use; none imports a package module above this one.

    common/config.py           typed, validated configs: YAML presets, dotted overrides (imports nothing)
    common/specials.py         the fixed special ids pad 0, unk 1, bos 2, eos 3 (data, models and learners)
    common/errors.py           UserError and the errors the CLI turns into one line
    common/files.py            the one atomic write; the one JSON reader whose errors are one line
    common/device.py           device and precision: bf16 detection, autocast
    common/evaluation.py       sacreBLEU BLEU and chrF with their signatures, exact match
    common/paper_equations.py  equation 3's rate and section 5.4's smoothed distribution, for training and figures
"""
