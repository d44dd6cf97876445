#!/usr/bin/env bash
# Everything this project can measure on a CUDA GPU, from the repository root:
#
#   bash bench/gpu.sh [--dry-run] [--only STEPS] [--max-time DD:HH:MM:SS] [MULTI30K_DIR]
#                                                     # default: ../shared/corpora/multi30k
#
# 1. the GPU tests (python -m pytest -m gpu), 2. bench/speed.py on CUDA (in the precision train.py would
# choose there; rows for this project's model and the tutorial's, side by side), 3. the default toy run and
# 4. the Multi30k recipe (skipped if MULTI30K_DIR does not exist), each training then evaluated on its
# last.ckpt. Each step is timed (wall time); one summary table ends the output. Logs, JSON and runs go to
# $GPU_OUT (default gpu_results/), which must not exist yet. --dry-run prints the commands and the table's
# rows without running anything (and needs no GPU). --only runs some of the steps (a comma-separated list of
# tests, speed, toy, multi30k), e.g. to split them over short sessions on a borrowed GPU; --max-time bounds the
# Multi30k run (its recipe's hour is cut short, the cosine_time schedule decaying over the shorter budget:
# say so beside its figure). Both runs stop at their max_epochs first on a fast GPU. PYTHON names the
# interpreter (default: python), e.g. PYTHON=python3 where no `python` is on the PATH.
set -euo pipefail

usage="usage: bash bench/gpu.sh [--dry-run] [--only tests,speed,toy,multi30k] [--max-time DD:HH:MM:SS] [MULTI30K_DIR]"
dry_run=0
only=tests,speed,toy,multi30k
max_time=
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry_run=1; shift ;;
        --only) only=${2:?$usage}; shift 2 ;;
        --max-time) max_time=${2:?$usage}; shift 2 ;;
        -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
        *) break ;;
    esac
done
for name in ${only//,/ }; do
    case $name in
        tests|speed|toy|multi30k) ;;
        *) echo "error: --only $only: unknown step '$name' (tests, speed, toy, multi30k)" >&2; exit 2 ;;
    esac
done
if [ -n "$max_time" ] && ! [[ $max_time =~ ^[0-9]{2}:[0-9]{2}:[0-9]{2}:[0-9]{2}$ ]]; then
    echo "error: --max-time $max_time: expected DD:HH:MM:SS, e.g. 00:00:05:00" >&2
    exit 2
fi
multi30k=${1:-../shared/corpora/multi30k}
# wanted <step>: whether --only names it
wanted() { [[ ",$only," == *",$1,"* ]]; }
out=${GPU_OUT:-gpu_results}
python=${PYTHON:-python}

if [ $dry_run = 0 ]; then
    if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "error: bench/gpu.sh needs a CUDA device and torch sees none (--dry-run prints the commands)" >&2
        exit 1
    fi
    if [ -e "$out" ]; then
        echo "error: $out exists (an earlier run?); move it away or set GPU_OUT" >&2
        exit 1
    fi
    mkdir -p "$out"
fi

rows=()
# step <name> <what> <metric kind> <metric file> <command...>: run the command (its output to $out/<name>.log),
# timed, and add a row to the summary.
step() {
    local name=$1 what=$2 kind=$3 file=$4
    shift 4
    echo "+ $*"
    if [ $dry_run = 1 ]; then
        rows+=("| $what | - | $([ "$kind" = "-" ] && echo "-" || echo "($kind of $file)") |")
        return
    fi
    local start end status=0
    start=$(date +%s.%N)
    "$@" >"$out/$name.log" 2>&1 || status=$?
    end=$(date +%s.%N)
    local seconds metric
    seconds=$("$python" -c "print(f'{$end - $start:.1f} s')")
    if [ $status = 0 ]; then
        metric=$([ "$kind" = "-" ] && echo "-" || "$python" bench/gpu_summary.py "$kind" "$file")
    else
        metric="FAILED (exit $status, see $out/$name.log)"
    fi
    rows+=("| $what | $seconds | $metric |")
}

if wanted tests; then
    step gpu_tests "GPU tests" pytest "$out/gpu_tests.log" "$python" -m pytest -m gpu tests/test_gpu.py -q -rs
fi
if wanted speed; then
    step speed "bench/speed.py --device cuda" speed "$out/speed.json" \
        "$python" bench/speed.py --device cuda --json "$out/speed.json"
    # The training figures side by side: this project's model and the tutorial's, and packed against padded.
    if [ $dry_run = 1 ]; then
        rows+=("| training: model.Transformer, nn.Transformer tutorial, packed / padded | - | (speed-rows of $out/speed.json) |")
    else
        mapfile -t speed_rows < <("$python" bench/gpu_summary.py speed-rows "$out/speed.json")
        rows+=("${speed_rows[@]}")
    fi
fi

if wanted toy; then
    toy="$out/runs/toy/gpu"
    step toy_train "toy: python train.py" - - "$python" train.py --trainer.logger.init_args.save_dir "$out/runs" \
        --trainer.logger.init_args.version gpu
    step toy_eval "toy: evaluate.py last.ckpt" evaluate "$out/toy_eval.log" \
        "$python" evaluate.py "$toy/checkpoints/last.ckpt" --quiet
fi

if ! wanted multi30k; then
    :
elif [ -d "$multi30k" ]; then
    m30k="$out/runs/multi30k/gpu"
    budget=()
    what="Multi30k: train.py --config configs/multi30k.yaml"
    if [ -n "$max_time" ]; then
        budget=(--trainer.max_time "$max_time")
        what="$what --trainer.max_time $max_time"
    fi
    step multi30k_train "$what" - - \
        "$python" train.py --config configs/multi30k.yaml --data.path "$multi30k" "${budget[@]}" \
        --trainer.logger.init_args.save_dir "$out/runs" --trainer.logger.init_args.version gpu
    step multi30k_eval "Multi30k: evaluate.py last.ckpt, beam 5" evaluate "$out/multi30k_eval.log" \
        "$python" evaluate.py "$m30k/checkpoints/last.ckpt" --beam-size 5 --length-penalty 1.0 --quiet
else
    echo "skipped: Multi30k (no folder $multi30k)"
    rows+=("| Multi30k | - | skipped: no folder $multi30k |")
fi

echo
echo "| what | wall time | metric |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
