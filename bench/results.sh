#!/usr/bin/env bash
# Re-run the real-corpus runs of docs/results.md on a CPU, from the repository root:
#
#   bash bench/results.sh [CORPORA_DIR]      # default: ../shared/corpora
#
# About 4 h 15 min or more on a 2-core machine. Runs go two at a time, side by side, one CPU thread each
# (OMP_NUM_THREADS=1): on a 2-core CPU two one-thread runs together train about 1.6x faster than one run on
# both cores, and it gives the Multi30k recipe and its baseline exactly the same conditions.
# Every score is written as one JSON line to results/<name>.json; training logs go to results/<name>.log.
set -euo pipefail

corpora=${1:-../shared/corpora}
if [ -e results ]; then
    echo "error: results/ exists (an earlier reproduction?); move it away first" >&2
    exit 1
fi
export OMP_NUM_THREADS=1
mkdir results

latest_run() {  # the newest version folder of runs/<name>
    ls -d "runs/$1"/version_* | sort -t_ -k2 -n | tail -1
}

evaluate() {  # evaluate <result name> <run or checkpoint> [evaluate.py options...]
    local name=$1
    shift
    python evaluate.py "$@" --quiet | tail -1 | tee "results/$name.json"
}

# 1. Multi30k de->en: this project's recipe and the PyTorch tutorial's, one hour of training each, together.
python train.py --config configs/multi30k.yaml --data.path "$corpora/multi30k" >results/multi30k.log 2>&1 &
python bench/multi30k_baseline.py --data-path "$corpora/multi30k" --minutes 60 \
    --out results/multi30k_baseline >results/multi30k_baseline.log 2>&1 &
wait
run=$(latest_run multi30k)
# Decoding settings chosen on the validation set: beam 5 with length penalty 1.0 scored best there, and
# averaging the last checkpoints did not help once the cosine schedule had brought the learning rate to zero.
for split in test2016 test2017 mscoco2017; do
    evaluate "multi30k_$split" "$run/checkpoints/last.ckpt" --beam-size 5 --length-penalty 1.0 --test-split "$split"
    evaluate "multi30k_${split}_greedy" "$run/checkpoints/last.ckpt" --test-split "$split"
done
cat results/multi30k_baseline/results.json

# 2. SCAN: the simple split and the length split, together.
python train.py --config configs/scan.yaml --data.path "$corpora/scan" >results/scan_simple.log 2>&1 &
python train.py --config configs/scan.yaml --data.path "$corpora/scan" --data.scan_split length \
    --trainer.logger.init_args.name scan_length >results/scan_length.log 2>&1 &
wait
evaluate scan_simple "$(latest_run scan)/checkpoints/last.ckpt"
evaluate scan_length "$(latest_run scan_length)/checkpoints/last.ckpt"

# 3. The default model on the built-in toy data (python train.py as it is, on both cores).
unset OMP_NUM_THREADS
python train.py >results/toy.log 2>&1
evaluate toy "$(latest_run toy)/checkpoints/last.ckpt"

# 4. Multi30k de->en: this project's recipe and JoeyNMT's Transformer recipe, one hour each, together, one
# thread each (bench/peers/joeynmt.sh; docs/peers.md says what differs). Results in results/joeynmt/.
bash bench/peers/joeynmt.sh "$corpora" results/joeynmt
