"""The ATTENTION tab's JavaScript: its unit tests (tests/js, node's built-in runner) and ESLint over
viz/tab/static, so that the README's test command covers them. Both need node; ESLint also ``npm ci``."""

import shutil
import subprocess

import pytest

from tests.conftest import REPO

NODE = shutil.which("node")
ESLINT = REPO / "node_modules" / ".bin" / "eslint"
LINTED = ["viz/tab/static", "tests/js", "eslint.config.js"]

needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (apt-get install nodejs npm)")


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=120)


@needs_node
def test_the_tabs_javascript_passes_its_unit_tests():
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "js").glob("*.test.mjs"))
    assert files, "no tests/js/*.test.mjs"
    done = run(NODE, "--test", "--test-reporter=tap", *files)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = [line for line in done.stdout.splitlines() if line.startswith("# pass ")]
    assert passed and int(passed[0].split()[-1]) > 0, done.stdout  # it ran tests, not nothing


@needs_node
@pytest.mark.skipif(not ESLINT.exists(), reason="ESLint is not installed (npm ci installs it)")
def test_the_tabs_javascript_passes_eslint():
    done = run(NODE, str(ESLINT), "--max-warnings", "0", *LINTED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_js_tests_vocabulary_is_the_routes():
    """tests/js/vocabulary.json stands in for ./vocabulary in the unit tests; it must be what the route serves
    (regenerate: python -c "import json; from viz.tab.plugin import vocabulary; print(json.dumps(vocabulary(),
    ensure_ascii=False, indent=1))" > tests/js/vocabulary.json)."""
    import json

    from viz.tab.plugin import vocabulary

    assert json.loads((REPO / "tests" / "js" / "vocabulary.json").read_text(encoding="utf-8")) == vocabulary()
