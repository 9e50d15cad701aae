"""The learner's own Transformer: their file imported, their builder called, their model in
either convention the study notes use, and that model behind the interface the toolkit's
training, decoding and web page drive. One loader for every command: `check` reads the
model through it (check/ sits above), `train --model FILE[:NAME]` trains it and a run of it
translates, serves and resumes through it (runs/, inference/, training/ sit above).

    learner/loading.py       their file imported (no bytecode, a time limit), NAME found; one-line errors
    learner/building.py      NAME called with the arguments its signature takes, at given sizes; the probe batch
    learner/conventions.py   the two conventions, each owning its passes: encode/decode/generator, or
                             forward(src, trg, masks)
    learner/masks.py         their mask functions (and the padding id they hide), or the kit's masks in their encoding
    learner/faults.py        what PyTorch runs and training cannot take: state outside the state_dict, sequence-first
                             modules, dropout in eval mode, a failing backward pass, a tuple out
    learner/recording.py     module calls recorded; attention, feed-forward and norms found by behaviour
    learner/model.py         build_learner, the one way to build it, and LearnerModel: their model as training,
                             decoding and the page drive it
"""
