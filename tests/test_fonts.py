"""Chinese, Japanese and Korean tokens in every picture: drawn with an installed CJK font, or one warning
that says how to install one, never silent boxes."""

import warnings

import matplotlib
import numpy as np
import pytest
from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

from viz import fonts
from viz.plots import attention_heatmap, new_figure

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
    assert [label.get_text() for label in labels] == CHINESE + JAPANESE
    for label in labels:
        for character in label.get_text():
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


def test_latin_tokens_without_a_cjk_font_do_not_warn(no_cjk_font):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attention_heatmap(np.full((2, 2), 0.5), ["the", "cat"], ["le", "chat"])
    assert fonts._warned is False


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

    root = Path(__file__).resolve().parent.parent
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
