"""The folder layout is the architecture: shared helpers import nothing above them; tests avoid bench/."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_shared_metrics_and_helpers_load_neither_lightning_nor_bench():
    """Training, evaluation and the benchmarks all import these; so may anything else."""
    code = (
        "import sys\n"
        "from analysis.metrics import score_translations, sentence_chrf, TranslationScores\n"
        "from analysis.flops import matmul_flops\n"
        "from tests.weight_surgery import suppress_eos\n"
        "loaded = sorted(m for m in ('lightning', 'bench', 'training', 'evaluation') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (``from x.y import z`` gives ``x``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_benchmark_tests_import_bench():
    importing = [p.name for p in sorted((REPO / "tests").glob("*.py")) if "bench" in imported_modules(p)]
    assert importing == ["test_bench.py"]
