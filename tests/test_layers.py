"""The folder layout is the architecture: each package imports only the packages below it, so that the import
graph goes one way (README, "How it is built"):

    model/       torch only
    data/        nothing of the model
    analysis/    plain tensors: neither the model nor the data code
    training/    model, data, analysis (its cli.py, train.py's body, also viz/ for the AttentionLogger)
    evaluation/  model, data, analysis, training (which loads a run's checkpoint); viz/'s drawing modules
    export/      model, data: evaluate.py scores its translations
    viz/         everything above but export; its drawing modules only analysis/
    train.py, evaluate.py, bench/: anything. Tests avoid bench/.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "data", "analysis", "training", "evaluation", "export", "viz")
# viz/'s modules that draw what they are given (tensors, arrays, token lists) and run nothing.
DRAWING = {"viz.plots", "viz.explain_figures", "viz.headview"}
BELOW = {
    "model": set(),
    "data": set(),
    "analysis": set(),
    "training": {"model", "data", "analysis"},
    "evaluation": {"model", "data", "analysis", "training"},
    "export": {"model", "data"},
    "viz": {"model", "data", "analysis", "training", "evaluation"},
}


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
    return {name.split(".")[0] for name in imported_dotted(path)}


def imported_dotted(path: Path) -> set[str]:
    """The full names of every module ``path`` imports, at the top or inside a function (``from x.y import z``
    gives ``x.y``; relative imports are not used in this project)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def layer_breaches(package: str) -> list[str]:
    """"module imports module" for every import of a project package that ``package`` may not use."""
    breaches = []
    for path in sorted((REPO / package).rglob("*.py")):
        me = module_name(path)
        for name in sorted(imported_dotted(path)):
            top = name.split(".")[0]
            if top not in PACKAGES or top == package and not (me in DRAWING and name not in DRAWING):
                continue
            allowed = top in BELOW[package]
            if me in DRAWING:  # a drawing module: analysis/ and the other drawing modules only
                allowed = top == "analysis" or name in DRAWING
            elif package == "evaluation" and name in DRAWING:
                allowed = True  # evaluation's reports draw their figures with viz's drawing modules
            elif me == "training.cli" and top == "viz":
                allowed = True  # the CLI assembles a run: the AttentionLogger is one of its callbacks
            if not allowed:
                breaches.append(f"{me} imports {name}")
    return breaches


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_packages_below_it(package):
    assert layer_breaches(package) == []


def test_the_layer_rule_sees_a_breach(tmp_path, monkeypatch):
    """The rule above can fail: a model module importing data, or export importing evaluation, is named."""
    for package, line in (("model", "from data.special import SPECIALS"),
                          ("export", "from evaluation.result import scored_result"),
                          ("viz", "from viz.maps import sentence_attention")):
        (tmp_path / package).mkdir()
        name = "plots.py" if package == "viz" else "breach.py"
        (tmp_path / package / name).write_text(f"{line}\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert layer_breaches("model") == ["model.breach imports data.special"]
    assert layer_breaches("export") == ["export.breach imports evaluation.result"]
    assert layer_breaches("viz") == ["viz.plots imports viz.maps"]


def test_only_the_benchmark_tests_import_bench():
    importing = [p.name for p in sorted((REPO / "tests").glob("*.py")) if "bench" in imported_modules(p)]
    assert importing == ["test_bench.py"]
