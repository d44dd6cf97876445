"""What the browser tests share (tests/viz/test_plugin_browser.py, tests/viz/test_plugin_browser_zh.py): the
tab served by the project's launcher on a module's ``tiny_run`` (``board``), headless Chromium (``driver``),
the page opened (``tab``) and the helpers that wait for it and read what it shows. The DOM hooks used are
listed at the top of ``viz/tab/static/index.js``. Skipped without chromium, chromedriver and selenium
(``pytestmark``).
"""

import contextlib
import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER),
                                    ("selenium", importlib.util.find_spec("selenium"))) if not found]
LINE_MIN_WEIGHT = 0.02  # the lines view leaves out lighter lines (viz/tab/static/lines.js)
WAIT = 20  # seconds, the bound of a wait for the page (the first translation gets longer)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (apt-get install chromium "
                                             "chromium-driver; pip install selenium)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The plugin's HTTP routes, read with urllib as the frontend reads them with fetch."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, route: str, **params):
        url = f"{self.base}/data/plugin/attention/{route}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            return {"status": error.code, **json.load(error)}


@pytest.fixture(scope="module")
def board(tiny_run, tmp_path_factory):
    """``python -m viz.tab`` serving the tiny run's log directory; (base URL, Api, the run's
    entry)."""
    logdir = tiny_run.parent.parent
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    api = Api(base)
    with open(tmp_path_factory.mktemp("tensorboard") / "tensorboard.log", "w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "viz.tab", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield base, api, _wait_for_runs(process, api, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_for_runs(process, api: Api, log) -> dict:
    """The first run the plugin lists, once TensorBoard has read it (bounded: 60 s)."""
    deadline = time.monotonic() + 60
    runs = []
    while not runs:  # TensorBoard reads the event files in the background: wait until the run is listed
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            pytest.fail(f"the launcher did not serve the run within 60 s:\n{log.read()[-3000:]}")
        try:
            runs = api.get("runs")["runs"]
        except (OSError, KeyError, ValueError):  # not listening yet, or no runs read yet
            pass
        time.sleep(0.3)
    return runs[0]


@pytest.fixture(scope="module")
def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    browser.set_page_load_timeout(WAIT)
    try:
        yield browser
    finally:
        browser.quit()


def wait(driver, condition, message: str, seconds: float = WAIT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(lambda d: condition(), message)


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


@pytest.fixture
def tab(board, driver):
    """The ATTENTION tab opened inside TensorBoard's own page, the driver switched into its iframe."""
    return open_tab(board, driver)


def open_tab(board, driver):
    """:func:`tab`, for a test that first changes what the page will be served (:func:`answers_rewritten`)."""
    base, api, run = board
    driver.switch_to.default_content()
    driver.get("about:blank")  # a fresh page for every test, not just a hash change
    driver.get(f"{base}/#attention")
    frame = wait(driver, lambda: css(driver, "iframe"), "TensorBoard shows no ATTENTION iframe")[0]
    driver.switch_to.frame(frame)
    wait(driver, lambda: css(driver, "#grid .head-cell") and css(driver, "#detail .matrix"),
         "the grid never drew")
    return driver, api, run


@contextlib.contextmanager
def answers_rewritten(driver, transform: str):
    """Pages opened inside pass every answer of the tab's data routes through ``transform``, a JavaScript
    function ``(route, answer) => answer``, before the page reads it; the page's uncaught errors are kept in
    ``window.pageErrors``. The way to show the page data a trained run does not have (a diverged run's
    nulls, a best head that is not the first)."""
    script = """
      if (new URLSearchParams(location.search).get("name") === "attention") {  // the tab's iframe
        window.pageErrors = [];
        addEventListener("error", (e) => window.pageErrors.push(String(e.message)));
        addEventListener("unhandledrejection", (e) => window.pageErrors.push(String(e.reason)));
        const transform = (TRANSFORM);
        const original = window.fetch.bind(window);
        window.fetch = async (url, init) => {
          const response = await original(url, init);
          const route = new URL(url, location.href).pathname.split("/").pop();
          if (!response.ok || route === "runs") return response;
          // JSON.stringify writes NaN as null, as the backend does.
          return new Response(JSON.stringify(transform(route, await response.json())),
            {status: response.status, headers: {"Content-Type": "application/json"}});
        };
      }
    """.replace("TRANSFORM", transform)
    added = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": script})
    try:
        yield
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": added["identifier"]})


def page_errors(driver) -> list[str]:
    return driver.execute_script("return window.pageErrors")


def tokens(driver, axis: str) -> list[str]:
    found = css(driver, f'#detail .matrix .token[data-axis="{axis}"]')
    return [t.get_attribute("textContent")
            for t in sorted(found, key=lambda t: int(t.get_attribute("data-index")))]


def highlighted(driver) -> set[tuple[str, str, int]]:
    """(element kind, axis, index) of every matrix element of the detail view that carries `highlight`."""
    return {("token" if "token" in e.get_attribute("class") else "band", e.get_attribute("data-axis"),
             int(e.get_attribute("data-index"))) for e in css(driver, "#detail .matrix .highlight")}


def cells(driver, which: str = "") -> set[tuple[int, int]]:
    """(layer, head) of the grid's cells, or of those with a class, e.g. ``which=".best"``."""
    return {(int(c.get_attribute("data-layer")), int(c.get_attribute("data-head")))
            for c in css(driver, f"#grid .head-cell{which}")}
