"""The ATTENTION tab on a run whose tokens are Chinese: the maps, the lines view, a hover, the statistics
table and "your own sentence" typed in Chinese show the characters the backend sends, and fit where they
are drawn.

The fixtures and helpers are the browser tests' own (tests/helpers/browser.py); only the run differs: a
tiny Chinese-to-English model of a few steps (seconds). Needs chromium, chromedriver and selenium, and a CJK
font for the screenshot to show characters (``apt-get install fonts-noto-cjk``).
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import train_chinese
from tests.helpers.browser import board, css, driver, open_tab, page_errors, pytestmark, tokens, wait
from viz.fonts import has_cjk, stands_upright

__all__ = ["board", "driver", "pytestmark"]  # the browser tests' fixtures and marks, used here

SENTENCE = "我喜欢狗。"
# Set to a path (docs/attention_tab_zh.png) to keep the screenshot the test takes; the run then trains long
# enough (a minute) to translate its sentences, so that the picture shows a model that has learned.
SCREENSHOT = os.environ.get("ATTENTION_TAB_ZH_SCREENSHOT")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The run ``board`` serves here: Chinese to English, its attention logged at every epoch (a few)."""
    epochs = 120 if SCREENSHOT else 3
    return train_chinese(
        tmp_path_factory.mktemp("zh-tab"), "--data.vocab_size", "60", "--trainer.max_epochs", str(epochs),
        "--attention.every_n_epochs", str(max(1, epochs // 6)), "--model.dropout", "0.0",
        chinese_source=True,
    )


def chinese(texts) -> list[str]:
    return [t for t in texts if has_cjk(t)]


def test_chinese_tokens_in_the_maps_lines_hover_statistics_and_your_sentence(board, driver, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver, api, run = open_tab(board, driver)
    data = api.get("attention", run=run["run"], step=run["steps"][-1], sentence=0)
    cross = data["kinds"]["cross"]
    assert chinese(cross["cols"]), f"the run's source tokens are not Chinese: {cross['cols']}"
    # The maps: the enlarged map's tokens are the backend's, Chinese characters unchanged.
    wait(driver, lambda: tokens(driver, "col") == cross["cols"], "the map's columns are not the API's tokens")
    assert tokens(driver, "row") == cross["rows"]
    # Column labels of Chinese tokens stand upright, read top to bottom; others are turned to read bottom to
    # top (set sideways, not upright, or the turn would stand them on their heads).
    for column in css(driver, '#detail .token[data-axis="col"]'):
        orientation, turn = driver.execute_script(
            "const s = getComputedStyle(arguments[0]); return [s.textOrientation, s.transform]", column)
        upright = stands_upright(column.get_attribute("textContent"))
        assert (orientation, turn == "none") == (("upright", True) if upright else ("sideways", False))
    assert any(stands_upright(t) for t in cross["cols"]), cross["cols"]
    # The lines view: every key token, written out, and each label inside the view.
    keys = css(driver, '#lines-view .lv-token[data-side="key"] text')
    shown = [driver.execute_script("return arguments[0].firstChild.nodeValue", k) for k in keys]
    assert [text.replace("…", "") for text in shown] == [t[: len(s.replace("…", ""))] for t, s in
                                                       zip(cross["cols"], shown)]  # whole, or shortened
    assert chinese(shown)
    view = css(driver, "#lines-view svg")[0].rect
    for key in keys:
        box = key.rect
        assert box["x"] + box["width"] <= view["x"] + view["width"] + 1, key.get_attribute("textContent")
    # A hover on a Chinese source token of the encoder's map lights it.
    css(driver, "#kind-encoder")[0].click()
    wait(driver, lambda: css(driver, '#detail[data-kind="encoder"]'), "the encoder never showed")
    i = next(i for i, t in enumerate(tokens(driver, "row")) if has_cjk(t))
    ActionChains(driver).move_to_element(
        css(driver, f'#detail .token[data-axis="row"][data-index="{i}"]')[0]
    ).perform()
    wait(driver, lambda: {t.get_attribute("textContent") for t in css(driver, "#detail .token.highlight")}
         == {data["kinds"]["encoder"]["rows"][i]}, "hovering a Chinese token did not light it")
    # The statistics table: a row per head of the kind shown.
    rows = css(driver, "#stats-table tbody tr")
    assert len(rows) == run["num_layers"]["encoder"] * run["num_heads"]
    # Your sentence, typed in Chinese: the route accepts it and answers Chinese tokens; the page shows them.
    expected = api.get("translate", run=run["run"], text=SENTENCE, beam=1)
    assert "".join(expected["kinds"]["cross"]["cols"]).replace("▁", "").startswith(SENTENCE)
    css(driver, "#translate-input")[0].send_keys(SENTENCE, Keys.ENTER)
    wait(driver, lambda: css(driver, "#translation"), "no translation appeared", seconds=90)
    assert css(driver, "#translation")[0].text == expected["translation"]
    wait(driver, lambda: css(driver, "#detail")[0].get_attribute("data-mode") == "custom", "no custom map")
    assert tokens(driver, "col") == expected["kinds"]["encoder"]["cols"]
    assert chinese(tokens(driver, "col"))
    page = driver.find_element("tag name", "body").text
    assert all(character in page for character in SENTENCE.rstrip("。"))
    assert css(driver, "#translate-input")[0].get_attribute("value") == SENTENCE
    assert page_errors(driver) is None or page_errors(driver) == []
    shot = tmp_path / "attention_tab_zh.png"
    driver.switch_to.default_content()
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if SCREENSHOT:
        Path(SCREENSHOT).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
