"""Chinese, Japanese and Korean tokens in every picture: drawn with an installed CJK font, or one warning
that says how to install one, never silent boxes."""

import copy
import os
import subprocess
import sys
import warnings

import matplotlib
import numpy as np
import pytest
from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

from tests.conftest import REPO
from viz import fonts
from viz.plots import attention_grid, attention_heatmap, new_figure

CHINESE = ["我", "喜欢", "猫", "。"]
JAPANESE = ["私", "は", "猫", "が", "好き", "です"]

needs_cjk_font = pytest.mark.skipif(
    not fonts.cjk_fonts(), reason="no CJK font installed (apt-get install fonts-noto-cjk)"
)


def font_files(text_artist) -> list[str]:
    """The font files matplotlib searches, in order, for the glyphs of ``text_artist``."""
    files = []
    for family in text_artist.get_fontproperties().get_family():
        properties = font_manager.FontProperties(family=family)
        files.append(font_manager.findfont(properties, fallback_to_default=False))
    return files


def drawing_font(text_artist, character: str) -> str | None:
    """The first of ``font_files`` that has a glyph for ``character`` (as matplotlib's fallback picks)."""
    return next((f for f in font_files(text_artist) if FT2Font(f).get_char_index(ord(character))), None)


def missing_glyph_warnings(figure) -> list[str]:
    """matplotlib's own 'Glyph ... missing from font(s)' warnings while the figure is drawn."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure.canvas.draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


@needs_cjk_font
def test_chinese_and_japanese_tokens_are_drawn_with_a_cjk_font():
    figure = attention_heatmap(np.full((4, 6), 1 / 6), CHINESE, JAPANESE, "cross layer 1 head 1")
    axes = figure.axes[0]
    labels = [*axes.get_yticklabels(), *axes.get_xticklabels()]
    assert [label.get_text().replace("\n", "") for label in labels] == CHINESE + JAPANESE
    for label in labels:
        for character in label.get_text().replace("\n", ""):
            font = drawing_font(label, character)
            assert font is not None, f"no font for {character!r}"
            assert "DejaVu" not in font, f"{character!r} would be drawn with {font}"
    assert missing_glyph_warnings(figure) == []


@needs_cjk_font
def test_latin_text_keeps_matplotlibs_font():
    figure = new_figure(2, 1)
    text = figure.text(0.1, 0.5, "cat </s>")
    assert "DejaVuSans" in drawing_font(text, "c")


def test_without_the_fallback_the_glyphs_would_be_missing():
    """What the fallback prevents, shown by matplotlib itself: DejaVu Sans alone has no Han or kana."""
    figure = new_figure(2, 1)
    figure.text(0.1, 0.5, "我喜欢猫", family="DejaVu Sans")
    assert len(missing_glyph_warnings(figure)) >= 4


@pytest.fixture
def no_cjk_font(monkeypatch):
    """A machine where matplotlib finds no CJK font, and no warning given yet in this process."""
    monkeypatch.setattr(fonts, "installed_families", lambda: {"DejaVu Sans", "DejaVu Serif"})
    monkeypatch.setattr(fonts, "_warned", False)
    fonts.cjk_fonts.cache_clear()
    yield
    fonts.cjk_fonts.cache_clear()


def test_cjk_tokens_without_a_cjk_font_warn_once_saying_how_to_install_one(no_cjk_font):
    assert fonts.cjk_fonts() == ()
    with pytest.warns(UserWarning, match="apt-get install fonts-noto-cjk") as caught:
        attention_heatmap(np.full((4, 6), 1 / 6), CHINESE, JAPANESE)
    assert len(caught) == 1 and "'我'" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second figure: no second warning
        attention_heatmap(np.full((4, 6), 1 / 6), CHINESE, JAPANESE)


def test_without_a_cjk_font_the_hint_is_the_only_warning_not_one_per_missing_glyph(no_cjk_font, monkeypatch):
    monkeypatch.setitem(matplotlib.rcParams, "font.family", [fonts.LATIN])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = attention_heatmap(np.full((4, 6), 1 / 6), CHINESE, JAPANESE)
        figure.canvas.draw()
        attention_heatmap(np.full((4, 6), 1 / 6), CHINESE, JAPANESE).canvas.draw()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "apt-get install fonts-noto-cjk" in messages[0], messages


# Draws Chinese tokens in a fresh process and prints how many glyphs matplotlib found missing, and the hint.
DRAW_CHINESE = """
import warnings
import numpy as np
from viz.plots import attention_heatmap
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    attention_heatmap(np.full((3, 4), 0.25), ["I", "like", "tea"], ["我", "喜欢", "茶", "。"]).canvas.draw()
messages = [str(w.message) for w in caught]
print(sum("missing from font" in m for m in messages), sum("fonts-noto-cjk" in m for m in messages))
"""


@needs_cjk_font
def test_a_font_cache_written_before_the_cjk_font_was_installed_still_draws_chinese(tmp_path):
    """matplotlib reads its font list from a cache written when it first ran: a learner who installed
    fonts-noto-cjk afterwards has a list without it. Such a list, written here, still draws Chinese."""
    stale = copy.copy(font_manager.fontManager)
    stale.ttflist = [entry for entry in stale.ttflist if not FT2Font(entry.fname).get_char_index(ord("我"))]
    assert len(stale.ttflist) < len(font_manager.fontManager.ttflist)
    font_manager.json_dump(stale, tmp_path / f"fontlist-v{font_manager.FontManager.__version__}.json")
    done = subprocess.run([sys.executable, "-c", DRAW_CHINESE], cwd=REPO, capture_output=True, text=True,
                          check=False, env={**os.environ, "MPLCONFIGDIR": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0"], "missing glyphs, and the hint, with a stale cache"


def test_latin_tokens_without_a_cjk_font_do_not_warn(no_cjk_font):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attention_heatmap(np.full((2, 2), 0.5), ["the", "cat"], ["le", "chat"])
    assert fonts._warned is False


KEYS = ["▁我", "喜欢", "。", "tea", "</s>", "▁", "茶…"]


@pytest.mark.parametrize("figure", ["heatmap", "grid"])
def test_cjk_column_labels_stand_upright_one_character_under_the_other(figure):
    """Han, kana and Hangul read top to bottom, as in vertical writing; other labels are turned to read
    bottom to top; row labels are never turned."""
    if figure == "heatmap":
        axes = attention_heatmap(np.full((2, 7), 1 / 7), ["喜欢", "I"], KEYS).axes[0]
    else:
        axes = attention_grid([np.full((2, 2, 7), 1 / 7)], ["喜欢", "I"], KEYS).axes[0]
    columns = [(label.get_text(), label.get_rotation()) for label in axes.get_xticklabels()]
    assert columns == [("▁\n我", 0), ("喜\n欢", 0), ("。", 0), ("tea", 90), ("</s>", 90), ("▁", 90),
                       ("茶…", 90)]
    rows = [(label.get_text(), label.get_rotation()) for label in axes.get_yticklabels()]
    assert rows == [("喜欢", 0), ("I", 0)]


@pytest.mark.parametrize(("token", "upright"), [
    ("我", True), ("▁我", True), ("ですが", True), ("한국", True), ("。", True), ("", False), ("▁", False),
    ("a我", False), ("我…", False), ("tea", False),
])
def test_which_tokens_stand_upright(token, upright):
    assert fonts.stands_upright(token) is upright


@pytest.mark.parametrize("text", ["我", "は", "カ", "한", "，", "？", "𠀋"])
def test_cjk_text_is_recognised(text):
    assert fonts.has_cjk(text)


@pytest.mark.parametrize("text", ["cat", "Katze", "кот", "</s>", "▁the", "é"])
def test_other_scripts_are_not_cjk(text):
    assert not fonts.has_cjk(text)


def test_a_family_the_user_chose_is_left_alone(monkeypatch):
    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["serif"])
    fonts.use_script_fonts()
    assert matplotlib.rcParams["font.family"] == ["serif"]


def test_every_figure_the_project_makes_starts_with_the_font_setup():
    """Each module that makes a matplotlib figure itself (rather than through viz.plots.new_figure) calls
    use_script_fonts first, so that no PNG it writes draws CJK tokens as boxes."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    makers = re.compile(r"\bFigure\(|plt\.subplots\(|plt\.figure\(|pyplot\.figure\(")
    found = []
    for path in sorted(root.glob("[!.]*/**/*.py")):
        if path.parts[len(root.parts)] in ("tests", "node_modules"):
            continue
        text = path.read_text(encoding="utf-8")
        for match in makers.finditer(text):
            found.append(path.relative_to(root).as_posix())
            assert "use_script_fonts()" in text[: match.start()], f"{path}: a figure before the font setup"
    assert {"viz/plots.py", "bench/alignment_curve.py", "bench/explanation_curve.py"} <= set(found)
