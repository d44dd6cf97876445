#!/usr/bin/env bash
# This project's Multi30k recipe and JoeyNMT's documented Transformer recipe (its IWSLT14 GPU recipe, untuned
# for a CPU hour; bench/peers/joeynmt_tune.py tunes one built for the hour), side by side on the same machine for the
# same hour, one CPU thread each, then both scored on test2016 (beam 5) by the same sacreBLEU:
#
#   bash bench/peers/joeynmt.sh [CORPORA_DIR] [OUT_DIR]     # defaults: ../shared/corpora, results_joeynmt
#   MINUTES=4 bash bench/peers/joeynmt.sh ...               # a smoke run of the whole pipeline (figures meaningless)
#   JOEYNMT_VENV=DIR bash bench/peers/joeynmt.sh ...        # JoeyNMT's environment elsewhere than bench/.joeynmt-venv
#
# 1 h 10 min or more: JoeyNMT's data preparation (a few minutes), the hour of training, then JoeyNMT's beam
# search on its core while this project's run is evaluated on the other (how long JoeyNMT's beam search takes
# for a model trained for an hour is not yet measured: its decoder re-reads the whole prefix at every step). JoeyNMT's own virtual environment is made first if missing (bench/.joeynmt-venv,
# a few minutes; not timed). Writes to OUT_DIR: multi30k.log and joeynmt.log (training), runs/ (this
# project's run), joeynmt/ (JoeyNMT's run), and one JSON line each in multi30k_test2016.json and
# joeynmt_test2016.json; the last lines printed compare them.
set -euo pipefail

corpora=${1:-../shared/corpora}
out=${2:-results_joeynmt}
minutes=${MINUTES:-60}
venv=${JOEYNMT_VENV:-bench/.joeynmt-venv}
data="$corpora/multi30k"
if [ ! -f "$data/train.de" ]; then
    echo "skipped: no Multi30k in $data (give the corpora folder as the first argument)"
    exit 0
fi
if [ -e "$out" ]; then
    echo "error: $out exists (an earlier run?); move it away first" >&2
    exit 1
fi
if ! [[ "$minutes" =~ ^[0-9]+$ ]] || [ "$minutes" -lt 1 ] || [ "$minutes" -gt 1439 ]; then
    echo "error: MINUTES must be a whole number of minutes from 1 to 1439, got '$minutes'" >&2
    exit 1
fi
mkdir -p "$out"
export OMP_NUM_THREADS=1

# The environment first, so that installing it does not eat into either run's hour.
python bench/peers/joeynmt_baseline.py --venv "$venv" --venv-only

max_time=$(printf "00:%02d:%02d:00" $((minutes / 60)) $((minutes % 60)))
python train.py --config configs/multi30k.yaml --data.path "$data" --trainer.max_time "$max_time" \
    --trainer.logger.init_args.save_dir "$out/runs" >"$out/multi30k.log" 2>&1 &
ours=$!
python bench/peers/joeynmt_baseline.py --data "$data" --minutes "$minutes" --threads 1 --out "$out/joeynmt" \
    --venv "$venv" >"$out/joeynmt.log" 2>&1 &
joey=$!

wait "$ours"
run=$(ls -d "$out/runs/multi30k"/version_* | sort -t_ -k2 -n | tail -1)
# The recipe's decoding settings, chosen on the validation set (README): beam 5, length penalty 1.0.
python evaluate.py "$run/checkpoints/last.ckpt" --beam-size 5 --length-penalty 1.0 --test-split test2016 \
    --quiet | tail -1 >"$out/multi30k_test2016.json"
wait "$joey"
grep '^joeynmt result: ' "$out/joeynmt.log" | tail -1 | sed 's/^joeynmt result: //' >"$out/joeynmt_test2016.json"

python - "$out" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
ours = json.loads((out / "multi30k_test2016.json").read_text())
joey = json.loads((out / "joeynmt_test2016.json").read_text())
print(f"test2016, beam 5: this project {ours['bleu']:.1f} BLEU (chrF {ours['chrf']:.1f}), "
      f"JoeyNMT's documented recipe {joey['bleu']:.1f} BLEU (chrF {joey['chrf']:.1f}, {joey['updates']} updates in "
      f"{joey['train_minutes']:.1f} min)")
print(f"signatures: {ours.get('signature', '?')} | {joey['signature']}")
EOF
