"""Imports go one way: each package imports only the packages below it, with no exceptions, so that the
folder layout is the architecture (docs/architecture.md):

    model/       torch only
    data/        nothing of the model
    analysis/    plain tensors: neither the model nor the data code
    training/    model, data, analysis
    evaluation/  model, data, analysis, training (which loads a run's checkpoint): numbers, no drawing
    export/      model, data: evaluate.py scores its translations
    viz/         everything above but export: it draws what training and evaluation compute
    commands/    everything above: evaluate.py's subcommands, which read the command line, print and ask
                 viz/ to draw what evaluation/ and export/ compute
    train.py, evaluate.py, bench/: anything; train.py assembles a run, evaluate.py dispatches to commands/.
    Tests avoid bench/.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("model", "data", "analysis", "training", "evaluation", "export", "viz", "commands")
BELOW = {
    "model": set(),
    "data": set(),
    "analysis": set(),
    "training": {"model", "data", "analysis"},
    "evaluation": {"model", "data", "analysis", "training"},
    "export": {"model", "data"},
    "viz": {"model", "data", "analysis", "training", "evaluation"},
    "commands": {"model", "data", "analysis", "training", "evaluation", "export", "viz"},
}


def test_shared_metrics_and_helpers_load_neither_lightning_nor_bench():
    """Training, evaluation and the benchmarks all import these; so may anything else."""
    code = (
        "import sys\n"
        "from analysis.metrics import score_translations, sentence_chrf, TranslationScores\n"
        "from analysis.flops import matmul_flops\n"
        "from tests.helpers.weight_surgery import suppress_eos\n"
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
        for name in sorted(imported_dotted(path)):
            top = name.split(".")[0]
            if top in PACKAGES and top != package and top not in BELOW[package]:
                breaches.append(f"{module_name(path)} imports {name}")
    return breaches


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_packages_below_it(package):
    assert layer_breaches(package) == []


def test_the_layer_rule_sees_a_breach(tmp_path, monkeypatch):
    """The rule above can fail: a model module importing data, export importing evaluation, and the two
    imports that once ran upward (training hooking in viz's logger, evaluation drawing with viz), inside a
    function too, are named."""
    for package, line in (("model", "from data.special import SPECIALS"),
                          ("export", "from evaluation.result import scored_result"),
                          ("training", "from viz.logger import AttentionLogger"),
                          ("evaluation", "def draw():\n    from viz.plots import layer_head_matrix")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "breach.py").write_text(f"{line}\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert layer_breaches("model") == ["model.breach imports data.special"]
    assert layer_breaches("export") == ["export.breach imports evaluation.result"]
    assert layer_breaches("training") == ["training.breach imports viz.logger"]
    assert layer_breaches("evaluation") == ["evaluation.breach imports viz.plots"]


def interface_breaches(package: str) -> list[str]:
    """What in ``package`` reads the command line (argparse, a parameter named ``args``), prints or shows
    progress (tqdm)."""
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        interface = imported_modules(path) & {"argparse", "tqdm"}
        found += [f"{module_name(path)} imports {name}" for name in sorted(interface)]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                found.append(f"{module_name(path)}:{node.lineno} prints")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                if "args" in names:
                    found.append(f"{module_name(path)}:{node.lineno} {node.name} takes args")
    return found


@pytest.mark.parametrize("package", ["evaluation", "export"])
def test_below_the_subcommands_nothing_reads_the_command_line_prints_or_shows_progress(package):
    """commands/ reads evaluate.py's options, prints, shows progress bars and asks viz/ to draw; what it
    calls below takes plain values (paths, counts, dataclasses) and returns what it computed."""
    assert interface_breaches(package) == []


def test_the_interface_rule_sees_a_breach(tmp_path, monkeypatch):
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "breach.py").write_text(
        "from tqdm import tqdm\n\n\ndef score(args, run):\n    print(args.split)\n", encoding="utf-8"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert interface_breaches("evaluation") == [
        "evaluation.breach imports tqdm", "evaluation.breach:4 score takes args", "evaluation.breach:5 prints"
    ]


def test_only_the_benchmark_tests_import_bench():
    tests = REPO / "tests"
    importing = [p.relative_to(tests).as_posix() for p in sorted(tests.rglob("*.py"))
                 if "bench" in imported_modules(p)]  # fmt: skip
    # tests/bench/: the benchmarks' own; training/test_memory.py: bench/memory.py reads a run's memory log
    outside = [path for path in importing if not path.startswith("bench/")]
    assert outside == ["training/test_memory.py"]
    assert "bench/test_bench.py" in importing


def imported_test_modules(path: Path) -> list[str]:
    """The test modules ``path`` imports (``from tests import test_x``, ``from tests.x.test_y import z``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if any(part.startswith("test_") for part in name.split("."))]
    return found


def test_no_test_module_imports_another():
    """What several tests share is a fixture in conftest.py or a module of tests/helpers/, never a test
    module, so that moving or deleting one test file breaks no other."""
    tests = REPO / "tests"
    importing = {p.relative_to(tests).as_posix(): imported_test_modules(p) for p in tests.rglob("*.py")}
    assert {path: names for path, names in importing.items() if names} == {}


def test_the_test_import_rule_sees_a_breach(tmp_path):
    breach = tmp_path / "test_a.py"
    breach.write_text("from tests import test_train\nfrom tests.viz.test_plugin import serve\n"
                      "import tests.helpers.tab_client\n", encoding="utf-8")  # fmt: skip
    assert imported_test_modules(breach) == ["tests.test_train", "tests.viz.test_plugin.serve"]


def test_the_tests_mirror_the_packages():
    """tests/ has one folder per package it tests (tests/model/ for model/, ...), beside helpers/ (what
    several tests share) and js/ (the tab's JavaScript); the tests of train.py, evaluate.py's command line
    and what spans every package (imports, configs, the notebook, the GPU) sit at the top."""
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - {"helpers", "js"} <= {*PACKAGES, "bench"}, folders
