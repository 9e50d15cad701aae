#!/usr/bin/env bash
# Train on Multi30k and score the test sets with sacreBLEU.
#   benchmarks/multi30k.sh en-de [--json] [--section.key=value ...]
# Trains the multi30k_<src>_<tgt> preset into runs/multi30k_<src>_<tgt> (resuming if it
# exists), then reports cased BLEU, chrF (with signatures) and lowercased 13a-tokenized BLEU
# on test_2016_flickr and test_2017_flickr, and the training wall time.
# Reads ../shared/data/multi30k/ (see its README); run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
pair=${1:?usage: benchmarks/multi30k.sh en-de|de-en [--json] [overrides]}
shift
json=false
overrides=()
for arg in "$@"; do
  if [ "$arg" = "--json" ]; then json=true; else overrides+=("$arg"); fi
done
src=${pair%-*}; tgt=${pair#*-}
config=src/transformer_mt/configs/multi30k_${src}_${tgt}.yaml
run=${RUN_DIR:-runs/multi30k_${src}_${tgt}}
data=../shared/data/multi30k
[ -f "$config" ] || { echo "multi30k.sh: no config $config (pairs: en-de, de-en)" >&2; exit 2; }
[ -f "$data/train.$src.gz" ] || { echo "multi30k.sh: Multi30k not found in $data" >&2; exit 2; }
bin=.venv/bin
[ -x "$bin/transformer-mt" ] || bin=$(dirname "$(command -v transformer-mt)")

if [ -f "$run/config.yaml" ]; then
  "$bin/transformer-mt" train --run "$run"
else
  "$bin/transformer-mt" train "$config" --run "$run" "${overrides[@]}"
fi
results=()
for test in test_2016_flickr test_2017_flickr; do
  [ -f "$data/$test.$tgt.gz" ] || continue
  out=$("$bin/transformer-mt" evaluate "$run" --src "$data/$test.$src.gz" --ref "$data/$test.$tgt.gz" \
        --lowercase-tokenized --json)
  echo "$test:" >&2
  echo "$out" | sed '$d' >&2
  results+=("\"$test\": $(echo "$out" | tail -1)")
done
seconds=$("$bin/python" -c "import json,sys; print(max([json.loads(l).get('elapsed', 0) for l in open(sys.argv[1])] or [0]))" "$run/metrics.jsonl")
summary="{\"pair\": \"$pair\", \"train_seconds\": $seconds"
for r in "${results[@]}"; do summary="$summary, $r"; done
summary="$summary}"
if $json; then echo "$summary"; else echo "$summary" | "$bin/python" -m json.tool; fi
