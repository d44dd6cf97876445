"""Fonts for tokens in any script: matplotlib falls back from DejaVu Sans to an installed CJK font.

matplotlib's default font, DejaVu Sans, has no Chinese, Japanese or Korean glyphs: without help it draws
their tokens as empty boxes. Since matplotlib 3.6 ``font.family`` may be a list, searched glyph by glyph, so
``use_script_fonts`` puts the first installed CJK font of each language after DejaVu Sans (Latin text looks
as before). Every figure of this project starts in ``viz.plots.new_figure``, which calls it, and every token
drawn passes ``check_glyphs``, which warns once per process, saying what to install, when CJK text meets a
machine without such a font; matplotlib's own warning for each glyph it then cannot draw is not repeated.

matplotlib reads its list of fonts from a cache written the first time it ran, so a CJK font installed since
(fonts-noto-cjk after a first run) is not in that list. When the list has no CJK font, ``cjk_fonts`` adds the
font files installed on the machine that it lacks (what rebuilding the cache would find), for this process.
"""

import re
import warnings
from collections.abc import Iterable
from functools import cache

import matplotlib
from matplotlib import font_manager

LATIN = "DejaVu Sans"  # matplotlib's own default, shipped with it
# Fonts with CJK glyphs, by language, most wanted first: Debian's fonts-noto-cjk (Noto Sans CJK is Adobe's
# Source Han Sans), then what macOS and Windows ship, then other Linux packages. Each has the glyphs of all
# three scripts' common characters; the language decides only which regional forms of a Han character.
CJK_FAMILIES = {
    "zh": ("Noto Sans CJK SC", "Source Han Sans SC", "Noto Sans SC", "PingFang SC", "Hiragino Sans GB",
           "Microsoft YaHei", "SimHei", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Noto Sans CJK TC",
           "Droid Sans Fallback"),
    "ja": ("Noto Sans CJK JP", "Source Han Sans JP", "Noto Sans JP", "Hiragino Sans", "Yu Gothic",
           "Meiryo", "MS Gothic", "IPAexGothic", "IPAGothic", "TakaoGothic"),
    "ko": ("Noto Sans CJK KR", "Source Han Sans KR", "Noto Sans KR", "Apple SD Gothic Neo",
           "Malgun Gothic", "NanumGothic", "UnDotum"),
}
# Han (with extensions A to F and compatibility ideographs), kana, Hangul, CJK punctuation and full-width
# forms (，？！): what DejaVu Sans cannot draw.
CJK_TEXT = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0003134f]"
)
# A token that stands upright in a column label, as in vertical writing: CJK characters only, after the ▁ that
# starts a word (one pattern, which the ATTENTION tab's page is served too).
UPRIGHT_TOKEN = re.compile(f"▁?{CJK_TEXT.pattern}+")
INSTALL_ADVICE = (
    "install one: `apt-get install fonts-noto-cjk` on Debian or Ubuntu (`dnf install "
    "google-noto-sans-cjk-fonts` on Fedora), or any of PingFang SC, Hiragino Sans, Microsoft YaHei, "
    "Yu Gothic or Malgun Gothic on macOS or Windows"
)
# matplotlib's warning for each glyph a font lacks: with no CJK font, the hint above says it once instead.
MISSING_GLYPH = r"Glyph \d+ .* missing from font"

_warned = False


def installed_families() -> set[str]:
    """The names of the font families matplotlib found on this machine."""
    return {entry.name for entry in font_manager.fontManager.ttflist}


def _first_of_each_language(installed: set[str]) -> tuple[str, ...]:
    chosen = [next((f for f in families if f in installed), None) for families in CJK_FAMILIES.values()]
    return tuple(dict.fromkeys(f for f in chosen if f is not None))


@cache
def cjk_fonts() -> tuple[str, ...]:
    """The first installed font of each of CJK_FAMILIES's languages (one font may serve all three), looked
    for again among the machine's font files when matplotlib's cached list has none."""
    chosen = _first_of_each_language(installed_families())
    if not chosen and add_uncached_fonts():
        chosen = _first_of_each_language(installed_families())
    return chosen


def add_uncached_fonts() -> int:
    """Add to matplotlib's font list (in this process) the font files of this machine it lacks, as found by
    fontconfig and in the usual font folders; return how many were added."""
    known = {entry.fname for entry in font_manager.fontManager.ttflist}
    added = 0
    for path in font_manager.findSystemFonts():
        if path in known:
            continue
        try:
            font_manager.fontManager.addfont(path)
        except (OSError, RuntimeError):  # FreeType cannot read it: skipped, as matplotlib's own scan does
            continue
        added += 1
    return added


def use_script_fonts() -> None:
    """Make matplotlib draw CJK glyphs with an installed CJK font, Latin ones with DejaVu Sans as before.

    Sets ``font.family`` (global, as any matplotlib style does) to DejaVu Sans followed by ``cjk_fonts()``,
    unless a user chose another family, which is left alone."""
    family = matplotlib.rcParams["font.family"]
    if list(family) in (["sans-serif"], [LATIN]):  # matplotlib's default, or this function's own
        matplotlib.rcParams["font.family"] = [LATIN, *cjk_fonts()]


def has_cjk(text: str) -> bool:
    return CJK_TEXT.search(text) is not None


def stands_upright(token: str) -> bool:
    """Whether ``token`` is drawn upright, one character under the other, in a column label: turned on its
    side like Latin text, Han, kana and Hangul would lie on their sides."""
    return UPRIGHT_TOKEN.fullmatch(token) is not None


def check_glyphs(texts: Iterable[str]) -> None:
    """Warn once per process when ``texts`` hold CJK characters that no installed font can draw, and silence
    matplotlib's warning for each of those glyphs from then on."""
    global _warned
    if _warned or cjk_fonts():
        return
    sample = next((text for text in texts if has_cjk(text)), None)
    if sample is None:
        return
    _warned = True
    warnings.warn(
        f"no font with Chinese, Japanese or Korean glyphs is installed, so tokens such as {sample!r} are "
        f"drawn as empty boxes in the pictures; " + INSTALL_ADVICE,
        stacklevel=2,
    )
    warnings.filterwarnings("ignore", message=MISSING_GLYPH, category=UserWarning)
