"""Which writing system a corpus side is in, read from its text: what its tokenization and conversion follow.

Chinese and Japanese are written without spaces between words, and Chinese, Japanese and Korean use full-width
punctuation that NFKC normalisation would fold into ASCII. Rather than trusting a language code (``zh``,
``cmn``, ``zh-TW``, ``jpn``: every corpus names its languages its own way), the data module looks at the
characters: :func:`script_shares` counts them, :func:`text_handling` turns the counts into the tokenizer's
settings, and :func:`is_chinese` tells Chinese (Han without Kana) from Japanese (Han with Kana).

    >>> shares = script_shares(["我们明天去北京。", "Tom 买了三本书。"])
    >>> round(shares["han"], 2), shares["kana"]
    (0.71, 0.0)
    >>> text_handling(["我们明天去北京。"])
    TextHandling(pre_tokenize='cjk', normalization='nfc')
    >>> text_handling(["Zwei Hunde spielen im Schnee."])
    TextHandling(pre_tokenize='whitespace', normalization='nfkc')

A corpus whose Chinese or Japanese is already segmented into words with spaces (KFTT's Japanese, by MeCab)
keeps its words: only runs of Han and Kana longer than a word usually is are split into characters.

    >>> text_handling(["日本 の 水墨 画 を 一変 さ せ た 。"])
    TextHandling(pre_tokenize='whitespace', normalization='nfc')
"""

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import islice
from typing import Any, Literal

from data.pairs import Pair, word_spans

PreTokenize = Literal["whitespace", "cjk"]
Normalization = Literal["nfkc", "nfc"]
ChineseScript = Literal["simplified", "traditional"]
# OpenCC's conversions into each script (phrase-aware: 头发 / 頭髮, not character by character).
OPENCC_CONFIGS = {"simplified": "t2s", "traditional": "s2t"}

# A side counts as written in a script when at least this share of its non-space characters are of it: a
# Chinese or Japanese side is mostly Han or Kana (Tatoeba's Chinese: about 90%), an English side with a few
# names in Han characters is not.
SCRIPT_SHARE = 0.1
# Japanese writes Kana in almost every sentence (particles, endings); Chinese none. A Han side with less Kana
# than this share of its Han characters is Chinese.
CHINESE_MAX_KANA_PER_HAN = 0.05
# Between spaces, a run holding Han or Kana is a word where it averages at most this many characters (KFTT's
# Japanese, segmented by MeCab: 1.6) and a clause where it is longer (Tatoeba's Chinese: 6.4).
SEGMENTED_MAX_CHARS = 3.0
_SAMPLE_TEXTS = 5000  # the first texts of a side tell its script; reading 3 million would add nothing

# Unicode blocks, as (first, last) code points.
_HAN = ((0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))
_KANA = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
_HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))
_SCRIPTS = {"han": _HAN, "kana": _KANA, "hangul": _HANGUL}


def _script(character: str) -> str | None:
    point = ord(character)
    for name, blocks in _SCRIPTS.items():
        if any(first <= point <= last for first, last in blocks):
            return name
    return None


def script_shares(texts: Iterable[str]) -> dict[str, float]:
    """The share of the non-space characters of ``texts`` (the first 5,000) that are ``han``, ``kana`` and
    ``hangul``, and under ``run`` the mean length in characters of the space-separated runs that hold Han or
    Kana; all 0.0 for no such characters."""
    counts = dict.fromkeys(_SCRIPTS, 0)
    total = run_characters = runs = 0
    for text in islice(texts, _SAMPLE_TEXTS):
        for run in text.split():
            total += len(run)
            scripts = [_script(character) for character in run if ord(character) >= 0x1100]
            for script in scripts:
                if script is not None:
                    counts[script] += 1
            if "han" in scripts or "kana" in scripts:
                run_characters += len(run)
                runs += 1
    shares = {name: count / total if total else 0.0 for name, count in counts.items()}
    return {**shares, "run": run_characters / runs if runs else 0.0}


@dataclass(frozen=True)
class TextHandling:
    """How a subword tokenizer treats a side's text (``data.tokenizer.Tokenizer.train``'s arguments).

    ``pre_tokenize``: ``cjk`` (each Han and Kana character a piece of its own before subwords are learnt)
    for Chinese or Japanese written without spaces, else ``whitespace``. ``normalization``: ``nfc`` for
    Chinese, Japanese and Korean text, whose full-width punctuation NFKC would turn into ASCII, else ``nfkc``.
    """

    pre_tokenize: PreTokenize
    normalization: Normalization


def text_handling(texts: Iterable[str]) -> TextHandling:
    """The :class:`TextHandling` for a corpus side (or both sides of a shared vocabulary) from its text."""
    shares = script_shares(texts)
    han_or_kana = shares["han"] + shares["kana"] >= SCRIPT_SHARE
    without_spaces = han_or_kana and shares["run"] > SEGMENTED_MAX_CHARS
    east_asian = han_or_kana or shares["hangul"] >= SCRIPT_SHARE
    return TextHandling("cjk" if without_spaces else "whitespace", "nfc" if east_asian else "nfkc")


def script_language(texts: Iterable[str]) -> str | None:
    """The language a side's script tells where words are not written apart: ``zh`` for Chinese (Han, next to
    no Kana), ``ja`` for Japanese (Han and Kana), else None (Latin, Hangul: written with spaces). BLEU's
    tokenizer follows it where no language says otherwise (``analysis.metrics.bleu_tokenizer``).

        >>> script_language(["我们明天去北京。"]), script_language(["私は猫が好きです。"])
        ('zh', 'ja')
        >>> script_language(["Zwei Hunde spielen im Schnee."]) is None
        True
    """
    shares = script_shares(texts)
    if shares["han"] + shares["kana"] < SCRIPT_SHARE:
        return None
    return "zh" if shares["kana"] < CHINESE_MAX_KANA_PER_HAN * shares["han"] else "ja"


def is_chinese(texts: Iterable[str]) -> bool:
    """Whether a corpus side is written in Chinese characters: Han, and (unlike Japanese) next to no Kana."""
    shares = script_shares(texts)
    return shares["han"] >= SCRIPT_SHARE and shares["kana"] < CHINESE_MAX_KANA_PER_HAN * shares["han"]


def check_chinese_script(script: str | None) -> None:
    """Refuse (ValueError) a ``chinese_script`` that is none of OpenCC's targets, or any without OpenCC."""
    if script not in (None, *OPENCC_CONFIGS):
        raise ValueError(f"chinese_script must be simplified, traditional or None: {script!r}")
    if script is not None and importlib.util.find_spec("opencc") is None:
        raise ValueError(f"chinese_script={script!r} needs OpenCC: pip install -e .[cjk]")


@cache
def chinese_converter(script: ChineseScript) -> Callable[[str], str]:
    """OpenCC's conversion of Chinese text into ``script`` (``pip install -e .[cjk]``), made once: its
    dictionaries take a while to load, and every sentence a run reads goes through it."""
    import opencc  # optional: only runs with ``chinese_script`` need it

    return opencc.OpenCC(OPENCC_CONFIGS[script]).convert


def chinese_sides_of(train: Sequence[Pair], script: ChineseScript, warn: Callable[[str], Any]) -> tuple:
    """The sides of the training pairs that are Chinese, which ``chinese_script`` converts; ``warn`` is told
    where neither is."""
    sides = tuple(side for side in ("source", "target") if is_chinese(getattr(p, side) for p in train))
    if not sides:
        warn(f"chinese_script={script!r}: neither side of the training pairs is Chinese; unchanged")
    return sides


def saved_chinese_sides(
    saved: object, script: ChineseScript | None, vocabularies: Iterable[Sequence[str]]
) -> tuple[str, ...] | None:
    """The sides ``script`` converts, as a checkpoint ``saved`` them (a list of ``source`` and ``target``);
    one saved before they were recorded (None) has them read off the source and target ``vocabularies``,
    learnt from the converted text. None where neither says.

    Raises:
        ValueError: ``saved`` is not a list of ``source`` and ``target``.
    """
    if saved is not None and not (isinstance(saved, list) and set(saved) <= {"source", "target"}):
        raise ValueError(f"chinese_sides must be a list of source and target, got {saved!r:.60}")
    if saved is None and script is not None:
        saved = [side for side, tokens in zip(("source", "target"), vocabularies) if is_chinese(tokens)]
    return None if saved is None else tuple(saved)


def converted_fields(pair: Pair, sides: Sequence[str], read: Callable[[str, str], str]) -> dict[str, Any]:
    """The fields of ``pair`` for ``sides``, each text converted by ``read(text, side)`` and, where the pair
    lists that side's words (the toy in Han script), the words too: cut from the converted text where
    conversion kept its length, so that each is converted in context (只 in 一只狗 becomes 隻; alone it stays
    只), else one by one."""
    fields: dict[str, Any] = {}
    for side in sides:
        text, words = getattr(pair, side), getattr(pair, f"{side}_words")
        converted = read(text, side)
        if words is None:
            fields[side] = converted
            continue
        spans = word_spans(text, words)
        if len(converted) == len(text):
            fields[side], fields[f"{side}_words"] = converted, tuple(converted[a:b] for a, b in spans)
            continue
        pieces, end = [], 0
        for (a, b), word in zip(spans, words, strict=True):
            pieces += [text[end:a], read(word, side)]
            end = b
        fields[side], fields[f"{side}_words"] = "".join(pieces) + text[end:], tuple(pieces[1::2])
    return fields
