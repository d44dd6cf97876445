"""Which word each token belongs to: the bridge from the model's subwords to the words a gold alignment links.

A gold set links words, the model reads tokens. The model reads a pair's words joined by single spaces, and
each token belongs to the word whose characters it spells (``Tokenizer.encode_spans`` gives each token's
characters, ``data.pairs.word_spans`` each word's), whatever the tokenizer and also for scripts written
without spaces. Tokens that spell no word's characters (a lone Metaspace ``▁``) belong to no word (``-1``);
so do the BOS and EOS the batch adds, which are not in these lists.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from data.pairs import Pair, word_spans
from data.tokenizer import Tokenizer

NO_WORD = -1


def token_words(tokens: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]) -> list[int]:
    """Per token, the index of the word whose ``[start, end)`` character span it overlaps most (the first of
    ties), or ``NO_WORD`` where it overlaps none.

    Args:
        tokens: each token's character span (``Tokenizer.encode_spans``); an empty span overlaps nothing.
        words: each word's character span, in order and disjoint (``data.pairs.word_spans``).
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


@dataclass(frozen=True)
class WordTokens:
    """One side of a pair as the model reads it: its token ids and the word each token belongs to."""

    ids: list[int]  # the tokens of the words joined by single spaces, no BOS or EOS
    words: list[int]  # per token, its word's index among the side's words, or NO_WORD
    count: int  # the number of words


def encode_words(tokenizer: Tokenizer, words: Sequence[str], text: str | None = None) -> WordTokens:
    """The tokens of ``text`` (default: ``words`` joined by single spaces), which spells ``words`` in order
    with or without spaces between them, and the word of each token.

    Raises:
        ValueError: ``words`` is empty, a word holds whitespace (it would be two words to the model), or
            ``text`` does not spell the words.
    """
    if not words:
        raise ValueError("no words to encode")
    for number, word in enumerate(words, start=1):
        if not word or any(character.isspace() for character in word):
            raise ValueError(f"word {number} ({word!r}) is empty or holds whitespace")
    text = " ".join(words) if text is None else text
    ids, spans = tokenizer.encode_spans(text)
    return WordTokens(ids, token_words(spans, word_spans(text, words)), len(words))


def encode_pair_words(
    pair: Pair, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> tuple[WordTokens, WordTokens]:
    """Both sides of a gold pair as the model reads them: a side written without spaces (its words listed in
    ``Pair.source_words`` / ``target_words``, the Han-script toy's target) as its own text, any other side
    as its words (``Pair.words``) joined by single spaces, whatever spacing the gold file had."""

    def side(name: str, tokenizer: Tokenizer) -> WordTokens:
        listed = pair.source_words if name == "source" else pair.target_words
        return encode_words(tokenizer, pair.words(name), getattr(pair, name) if listed is not None else None)

    return side("source", src_tokenizer), side("target", tgt_tokenizer)
