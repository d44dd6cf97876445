"""Which word each token belongs to: the bridge from the model's subwords to the words a gold alignment links.

A gold set links words, the model reads tokens: a text that spells the words as the model's training text
would write them (``data.gold.as_trained``: the run's own line for the same sentence, otherwise the words
joined as its training text joins words, :func:`joined`). Each token belongs to the word whose characters
it spells (``Tokenizer.encode_spans`` gives each token's characters, :func:`word_characters` each word's),
whatever the tokenizer and also for scripts written without spaces. The text and the words are matched by
their characters, not by their spaces: they may be segmented, cased and normalised differently (``(`` in
the text for the gold's full-width ``（``, ``ISBN 4642051503`` for the gold's ``isbn4642051503``, the
MeCab segmentation ``なろ う`` for the gold's ``な ろ う``). Tokens that spell no word's characters (a lone
Metaspace ``▁``) belong to no word (``-1``); so do the BOS and EOS the batch adds, which are not in these
lists.

A token that spells two words belongs to the one it spells most of (:func:`token_words`), so the other has no
token of its own: MeCab's ``なろ`` is one token for the gold's two words ``な ろ``. Such a word is read
through the word that owns the token (:func:`word_readers`), and takes that word's links: whatever aligns
``な`` aligns ``ろ`` too, which is what the model, reading one token, can say of them.
"""

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from data.pairs import Pair
from data.special import SPECIALS
from data.tokenizer import Tokenizer

NO_WORD = -1


def loose_characters(text: str) -> tuple[str, list[int]]:
    """The characters of ``text`` as compared across segmentations: each in its NFKC form (``（`` is ``(``)
    and case-folded, whitespace left out; and, per character of that string, the index in ``text`` of the
    character it comes from."""
    folded, origin = [], []
    for index, character in enumerate(text):
        for loose in unicodedata.normalize("NFKC", character).casefold():
            if not loose.isspace():
                folded.append(loose)
                origin.append(index)
    return "".join(folded), origin


def word_characters(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """The ``[start, end)`` characters of ``text`` that spell each of ``words``, where ``text`` writes the
    words' characters in order up to whitespace, case and compatibility forms (:func:`loose_characters`).

    A word's span runs from its first character in ``text`` to its last, over any spaces the text has
    inside it (the gold's ``浄土真宗`` in a text that writes ``浄土 真宗``).

    Raises:
        ValueError: ``text`` does not spell ``words`` (names the first word whose characters differ).
    """
    loose_text, origin = loose_characters(text)
    spans, position = [], 0
    for number, word in enumerate(words, start=1):
        loose_word = loose_characters(word)[0]
        end = position + len(loose_word)
        if not loose_word or loose_text[position:end] != loose_word:
            at = origin[position] if position < len(origin) else len(text)
            raise ValueError(f"word {number} ({word!r}) is not at character {at} of {text!r}")
        spans.append((origin[position], origin[end - 1] + 1))
        position = end
    if position < len(loose_text):
        raise ValueError(f"{text!r} goes on after its {len(words)} words: {text[origin[position]:]!r}")
    return spans


def token_words(tokens: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]) -> list[int]:
    """Per token, the index of the word whose ``[start, end)`` character span it overlaps most (the first of
    ties: a token that spells two words belongs to the first), or ``NO_WORD`` where it overlaps none.

    Args:
        tokens: each token's character span (``Tokenizer.encode_spans``); an empty span overlaps nothing.
        words: each word's character span, in order (:func:`word_characters`).
    """
    owners = []
    for start, end in tokens:
        best, most = NO_WORD, 0
        for index, (word_start, word_end) in enumerate(words):
            if word_start >= end:
                break
            overlap = min(end, word_end) - max(start, word_start)
            if overlap > most:
                best, most = index, overlap
        owners.append(best)
    return owners


def word_readers(tokens: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]], owners: Sequence[int]
                 ) -> list[int]:
    """Per word, the word through whose tokens the model reads it: itself where it owns a token; where it
    owns none, the owner of the first token that spells any of its characters (the word a token mostly
    spells, for the word it spells the rest of); ``NO_WORD`` where no token spells any (a character the
    tokenizer drops).

    Args:
        tokens: each token's character span; ``words``: each word's; ``owners``: :func:`token_words` of them.
    """
    owned = set(owners) - {NO_WORD}

    def reader(index: int, word_start: int, word_end: int) -> int:
        if index in owned:
            return index
        return next((owner for (start, end), owner in zip(tokens, owners)
                     if owner != NO_WORD and min(end, word_end) > max(start, word_start)), NO_WORD)

    return [reader(index, *span) for index, span in enumerate(words)]


def _without_spaces(character: str) -> bool:
    """Whether text in ``character``'s script is written without spaces: Han, Kana and the full-width
    punctuation beside them (wide characters), but not Hangul, which Korean writes with spaces."""
    wide = unicodedata.east_asian_width(character) in ("W", "F")
    return wide and not unicodedata.name(character, "").startswith("HANGUL")


def joined(words: Sequence[str], tokenizer) -> str:
    """``words`` as the tokenizer's training text would write them: with a space between two words where it
    learnt from text segmented into words (this project's tokenizers, but for ``pre_tokenize="cjk"``); where
    it learnt from text as written (``cjk``, or an imported SentencePiece model), with no space next to
    Han, Kana or full-width punctuation (``1989 年 （ 平成`` is ``1989年（平成``)."""
    if getattr(tokenizer, "pre_tokenization", ("cjk",))[0] == "whitespace":
        return " ".join(words)
    text = words[0] if words else ""
    for word in words[1:]:
        text += ("" if _without_spaces(text[-1]) or _without_spaces(word[0]) else " ") + word
    return text


def known_characters(text: str, tokenizer) -> str:
    """``text`` with each character the tokenizer reads as unknown, and whose NFKC form it knows, in that
    form: a gold set's full-width ``（`` for a model that only ever read ``(`` (this project normalises
    Chinese and Japanese text with NFC, keeping full-width punctuation as its training text wrote it)."""
    out = []
    for character in text:
        compatible = unicodedata.normalize("NFKC", character)
        if (compatible != character and not compatible.isspace()
                and SPECIALS.unk_id in tokenizer.encode(character)
                and SPECIALS.unk_id not in tokenizer.encode(compatible)):
            character = compatible
        out.append(character)
    return "".join(out)


@dataclass(frozen=True)
class WordTokens:
    """One side of a pair as the model reads it: its token ids and the word each token belongs to."""

    ids: list[int]  # the tokens of the text read, no BOS or EOS
    words: list[int]  # per token, its word's index among the side's words, or NO_WORD
    count: int  # the number of words
    readers: list[int]  # per word, the word it is read through (word_readers)


def encode_words(tokenizer: Tokenizer, words: Sequence[str], text: str | None = None) -> WordTokens:
    """The tokens of ``text`` (default: ``words`` :func:`joined` as the tokenizer's training text would
    join them), which spells ``words`` in order up to whitespace, case and compatibility forms
    (:func:`word_characters`), each character the tokenizer does not know read in its NFKC form where it knows
    that (:func:`known_characters`); and the word of each token.

    Raises:
        ValueError: ``words`` is empty, a word holds whitespace (it would be two words to the model), or
            ``text`` does not spell the words.
    """
    if not words:
        raise ValueError("no words to encode")
    for number, word in enumerate(words, start=1):
        if not word or any(character.isspace() for character in word):
            raise ValueError(f"word {number} ({word!r}) is empty or holds whitespace")
    text = known_characters(joined(words, tokenizer) if text is None else text, tokenizer)
    ids, spans = tokenizer.encode_spans(text)
    characters = word_characters(text, words)
    owners = token_words(spans, characters)
    return WordTokens(ids, owners, len(words), word_readers(spans, characters, owners))


def encode_pair_words(
    pair: Pair, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> tuple[WordTokens, WordTokens]:
    """Both sides of a gold pair as the model reads them: a side whose words are listed apart from its text
    (``Pair.source_words`` / ``target_words``: a gold side read as the run's corpus writes it, or the
    Han-script toy's target) as its text, any other side as its words (``Pair.words``) :func:`joined`,
    whatever spacing the gold file had."""

    def side(name: str, tokenizer: Tokenizer) -> WordTokens:
        listed = pair.source_words if name == "source" else pair.target_words
        return encode_words(tokenizer, pair.words(name), getattr(pair, name) if listed is not None else None)

    return side("source", src_tokenizer), side("target", tgt_tokenizer)
