"""One cell of bench/gpu.sh's summary table, read from what a step wrote.

    python bench/gpu_summary.py pytest gpu_results/gpu_tests.log     # "5 passed"
    python bench/gpu_summary.py speed gpu_results/speed.json         # "training 1.27x, KV cache 5.3x"
    python bench/gpu_summary.py speed-rows gpu_results/speed.json    # rows: both models, packed vs padded
    python bench/gpu_summary.py evaluate gpu_results/toy_eval.json   # "BLEU 99.86, chrF 99.9,
                                                                        exact match 99.4%"
"""

import json
import re
import sys
from pathlib import Path


def pytest_metric(log: str) -> str:
    """pytest's final counts ("5 passed, 1 skipped"), from the last line that has them."""
    for line in reversed(log.strip().splitlines()):
        found = re.findall(r"\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected)", line)
        if found:
            return ", ".join(found)
    return "no pytest summary"


def speed_metric(results: dict) -> str:
    return (f"training {results['training']['ratio']:.2f}x nn.Transformer, "
            f"KV cache {results['decoding']['cache_ratio']:.1f}x re-run")


def speed_rows(results: dict) -> list[str]:
    """Table rows (``| what | wall time | metric |``) of the training figures of bench/speed.py's JSON: this
    project's model and the tutorial's side by side, in the precision measured, and packed against padded."""
    training = results["training"]
    precision = training.get("precision", "32-true")
    rows = []
    for name, label in (("ours", "model.Transformer"), ("tutorial", "nn.Transformer tutorial")):
        r = training[name]
        rows.append(
            f"| training: {label}, {precision} | - | {r['target_tokens_per_s']:,.0f} tgt tok/s, "
            f"{r['step_ms']:.1f} ms/step, {r['matmul_peak_fraction']:.1%} of peak |"
        )
    rows.append(f"| training: ours / tutorial | - | {training['ratio']:.2f}x |")
    packing = results.get("packing")
    if packing is not None:
        rows.append(
            f"| training: packed / padded, {packing['precision']} | - | {packing['ratio']:.2f}x "
            f"({packing['packed_target_tokens_per_s']:,.0f} vs {packing['padded_target_tokens_per_s']:,.0f} "
            f"tgt tok/s, {packing['padding_share']:.0%} padding) |"
        )
    return rows


def evaluate_metric(result: dict) -> str:
    return (f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.1f}, "
            f"exact match {100 * result['exact_match']:.1f}% "
            f"({result['data']}, beam {result['beam_size']})")


def cell(kind: str, path: Path) -> str:
    if not path.is_file():
        return f"missing {path}"
    text = path.read_text(encoding="utf-8", errors="replace")
    if kind == "pytest":
        return pytest_metric(text)
    lines = text.strip().splitlines()
    if not lines:
        return f"empty {path}"
    data = json.loads(lines[-1] if kind == "evaluate" else text)
    return speed_metric(data) if kind == "speed" else evaluate_metric(data)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("pytest", "speed", "evaluate", "speed-rows"):
        print("usage: python bench/gpu_summary.py {pytest,speed,evaluate,speed-rows} FILE", file=sys.stderr)
        return 2
    try:
        if argv[0] == "speed-rows":  # whole rows, printed only where the file is there to read
            path = Path(argv[1])
            if path.is_file():
                print("\n".join(speed_rows(json.loads(path.read_text(encoding="utf-8")))))
            return 0
        print(cell(argv[0], Path(argv[1])))
    except (json.JSONDecodeError, KeyError) as error:
        print(f"unreadable {argv[1]} ({type(error).__name__}: {error})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
