"""The built-in toy datasets: a small synthetic translation task, plus the classic copy and reverse tasks.

No download and no files: a seeded generator makes every split. The translation task is worth watching
attention learn, because its word order differs from the source in three learnable ways:

* **source** (English-like, SVO): ``[det] [numeral] adjective* noun`` noun phrases, a past-tense verb, an
  optional object, an optional prepositional phrase, and optionally a second clause after
  ``and``/``but``/``while``.
* **target** (an invented language, SOV): noun phrases are ``[det] noun adjective* [numeral]`` (adjectives
  and numerals follow the noun), prepositions become postpositions (``np postposition``), the verb comes last
  in its clause, and the prepositional phrase moves in front of the object: ``subject [pp] [object] verb``.
* **agreement**: determiners and adjectives agree in number with their noun (``lo``/``li``, ``-e``/``-es``),
  and the verb agrees with the number of its subject (``-a``/``-an``). Source verbs and adjectives carry no
  number, so getting these right needs context, not just the aligned word.

Every target word translates exactly one source word through a fixed lexicon, so the gold alignment is a
permutation: cross-attention should learn to point each target word at its source word, wherever it is.

    >>> translate("the big cats saw a dog".split())
    (['li', 'kati', 'grandes', 'un', 'hundo', 'vidan'], ((0, 0), (2, 1), (1, 2), (4, 3), (5, 4), (3, 5)))

With ``phenomena=True`` the translation task gains the alignment phenomena of real language pairs, each with
its gold links, so that alignment methods can be told apart where a permutation is too easy:

* **one-to-many**: every verb becomes an auxiliary and the verb (``ha vida``), both linked to the source verb;
* **many-to-one**: a determiner followed by a numeral is not translated apart; the numeral carries both
  (``the two cats`` → ``kati du``: ``du`` is linked to ``the`` and ``two``);
* **unaligned source words**: the singular ``the`` is dropped (the target has no definite singular article);
* **unaligned target words**: a particle ``ja`` follows every transitive verb, linked to nothing.

    >>> words, links = translate("the two big cats saw the dog".split(), phenomena=True)
    >>> words
    ['kati', 'grandes', 'du', 'hundo', 'ha', 'vidan', 'ja']
    >>> links  # the second "the" (5) and "ja" (6) have none; "du" (2) has two, "saw" (4) two
    ((3, 0), (2, 1), (0, 2), (1, 2), (6, 3), (4, 4), (4, 5))

With ``script="han"`` the target is written in Chinese characters, in real Chinese words of one or two
characters (the lexicon is ``data.toy_han``), without spaces: a pair's ``target`` is its words joined with
nothing between them and its ``target_words`` lists them, the segmentation its links index. The order is
Chinese: the source's (SVO, adjectives before the noun) but for the prepositional phrase, which comes before
the verb in a frame: ``subject [在 np 下] verb [了] [object]``. Nouns have no plural. The alignment phenomena
are those of Chinese:

* **measure words** (one-to-many): a numeral becomes the numeral and the measure word of its noun
  (``two cats`` → 两只猫, ``three books`` → 三本书), both linked to the numeral; ``a``, ``this`` and
  ``every`` take one too (一只, 这只, 每只), both linked to the determiner;
* **frames** (one-to-many, apart): a preposition becomes a word before its noun phrase and a localizer after
  it, both linked to the preposition (``under the table`` → 在桌子下);
* **an aspect particle** (unaligned target word): 了 follows every verb of an action (not the states 喜欢
  liked, 认识 knew, 爱 loved, 害怕 feared), linked to nothing;
* **no articles** (unaligned source word): ``the`` has no translation.

    >>> words, links = translate("the two big cats saw a dog".split(), script="han")
    >>> "".join(words), words
    ('两只大猫看见了一只狗', ['两', '只', '大', '猫', '看见', '了', '一', '只', '狗'])
    >>> links  # "the" (0) and 了 (5) have none; "two" (1) has 两 and 只, "a" (5) has 一 and 只
    ((1, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 6), (5, 7), (6, 8))

Copy and reverse use random strings of the letters ``a`` to ``z``; their alignments are the identity and the
anti-diagonal.
"""

import random
import string
from collections.abc import Sequence
from typing import ClassVar, Literal, NamedTuple

from data import toy_han as han
from data.pairs import Pair
from data.reader import CorpusOptions, CorpusReader, SplitName, TextSide

Script = Literal["latin", "han"]

# --- The lexicon: source word -> target stem or word --------------------------------------------------------

# fmt: off
# (singular, plural, target stem); the target noun is stem + "o" (singular) or stem + "i" (plural).
NOUNS: tuple[tuple[str, str, str], ...] = (
    ("cat", "cats", "kat"), ("dog", "dogs", "hund"), ("bird", "birds", "pask"), ("horse", "horses", "keval"),
    ("mouse", "mice", "mus"), ("child", "children", "infan"), ("man", "men", "vir"),
    ("woman", "women", "virin"), ("teacher", "teachers", "instru"), ("farmer", "farmers", "farm"),
    ("king", "kings", "reg"), ("queen", "queens", "regin"), ("doctor", "doctors", "kurac"),
    ("student", "students", "stud"), ("girl", "girls", "puel"), ("boy", "boys", "puer"),
    ("friend", "friends", "amik"), ("baker", "bakers", "bakist"), ("sailor", "sailors", "marist"),
    ("soldier", "soldiers", "soldat"), ("table", "tables", "tabl"), ("chair", "chairs", "seg"),
    ("house", "houses", "dom"), ("garden", "gardens", "gard"), ("river", "rivers", "riv"),
    ("tree", "trees", "arb"), ("car", "cars", "aut"), ("boat", "boats", "ship"), ("book", "books", "libr"),
    ("letter", "letters", "letr"), ("apple", "apples", "pom"), ("cake", "cakes", "kuk"),
    ("ball", "balls", "bal"), ("box", "boxes", "kest"), ("door", "doors", "pord"),
    ("window", "windows", "fenest"), ("city", "cities", "urb"), ("village", "villages", "vilag"),
    ("hill", "hills", "mont"), ("bridge", "bridges", "pont"),
)

# source adjective -> target stem; the target adjective is stem + "e" (singular noun) or stem + "es" (plural)
ADJECTIVES: dict[str, str] = {
    "big": "grand", "small": "pikol", "red": "rug", "blue": "blu", "green": "verd", "old": "vet",
    "young": "jun", "happy": "felic", "sad": "trist", "tall": "alt", "quick": "rapid", "slow": "lant",
    "quiet": "kviet", "loud": "laut", "brave": "brav", "clever": "sag", "lazy": "pigr", "hungry": "famel",
    "angry": "koler", "gentle": "mild", "strange": "strang", "bright": "hel", "dark": "obskur",
    "white": "blank", "black": "nigr", "yellow": "flav", "heavy": "pez", "soft": "mol", "cold": "frid",
    "warm": "varm",
}

# source past-tense verb -> target stem; the target verb is stem + "a" (singular subject) or + "an" (plural)
TRANSITIVE_VERBS: dict[str, str] = {
    "saw": "vid", "liked": "plac", "chased": "cas", "found": "trov", "followed": "sekv", "helped": "help",
    "visited": "vizit", "painted": "pentr", "carried": "port", "watched": "observ", "called": "vok",
    "pushed": "pus", "heard": "aud", "fed": "nutr", "met": "renkont", "knew": "kon", "loved": "am",
    "feared": "tim", "taught": "dosk", "drew": "desegn", "caught": "kapt", "washed": "lav",
}
INTRANSITIVE_VERBS: dict[str, str] = {
    "slept": "dorm", "ran": "kur", "sang": "kant", "danced": "danc", "laughed": "rid", "waited": "atend",
    "smiled": "smil", "cried": "plor", "jumped": "salt", "swam": "nag", "arrived": "alven",
}

# source determiner -> (target singular form or None, target plural form or None, may a numeral follow it)
DETERMINERS: dict[str, tuple[str | None, str | None, bool]] = {
    "the": ("lo", "li", True),
    "a": ("un", None, False),
    "this": ("sto", None, False),
    "every": ("ogni", None, False),
    "these": (None, "sti", True),
    "some": (None, "kelki", False),
}
NUMERALS: dict[str, str] = {
    "two": "du", "three": "tri", "four": "kvar", "five": "kin", "six": "ses", "seven": "sep", "eight": "ok",
    "nine": "nov", "ten": "dek", "eleven": "dekun", "twelve": "dekdu",
}
# source preposition -> target postposition
PREPOSITIONS: dict[str, str] = {
    "in": "ene", "on": "sur", "near": "apud", "under": "sub", "behind": "malan", "with": "kun",
    "without": "sen", "beside": "flank",
}
# fmt: on
CONJUNCTIONS: dict[str, str] = {"and": "kaj", "but": "sed", "while": "dum"}
AUXILIARY = "ha"  # with ``phenomena``: before every verb, linked to it (one-to-many)
PARTICLE = "ja"  # with ``phenomena``: after every transitive verb, linked to nothing

_NOUN_NUMBER: dict[str, tuple[str, bool]] = {
    word: (stem, plural) for sg, pl, stem in NOUNS for word, plural in ((sg, False), (pl, True))
}
_SINGULAR: dict[str, str] = {word: sg for sg, pl, _ in NOUNS for word in (sg, pl)}
_VERBS: dict[str, tuple[str, bool]] = {
    **{w: (stem, True) for w, stem in TRANSITIVE_VERBS.items()},
    **{w: (stem, False) for w, stem in INTRANSITIVE_VERBS.items()},
}


def _check_lexicon() -> None:
    """Every source word has one category and every target word one meaning, so translation is a function."""
    source = [*_NOUN_NUMBER, *ADJECTIVES, *_VERBS, *DETERMINERS, *NUMERALS, *PREPOSITIONS, *CONJUNCTIONS]
    assert len(source) == len(set(source)), "a source word is listed twice"
    target = [stem + s for _, _, stem in NOUNS for s in ("o", "i")]
    target += [stem + s for stem in ADJECTIVES.values() for s in ("e", "es")]
    target += [stem + s for stem, _ in _VERBS.values() for s in ("a", "an")]
    target += [form for sg, pl, _ in DETERMINERS.values() for form in (sg, pl) if form is not None]
    target += [*NUMERALS.values(), *PREPOSITIONS.values(), *CONJUNCTIONS.values(), AUXILIARY, PARTICLE]
    assert len(target) == len(set(target)), "two source words translate to the same target word"
    # The Han-script lexicon covers exactly the source words (its target words need not be distinct).
    for name, ours, theirs in (
        ("nouns", {sg for sg, _, _ in NOUNS}, han.NOUNS),
        ("adjectives", ADJECTIVES, han.ADJECTIVES),
        ("verbs", _VERBS, han.VERBS),
        ("determiners", DETERMINERS, han.DETERMINERS),
        ("numerals", NUMERALS, han.NUMERALS),
        ("prepositions", PREPOSITIONS, han.PREPOSITIONS),
        ("conjunctions", CONJUNCTIONS, han.CONJUNCTIONS),
    ):
        assert set(ours) == set(theirs), f"data.toy_han's {name} differ: {set(ours) ^ set(theirs)}"
    assert han.STATIVE_VERBS <= set(TRANSITIVE_VERBS)


_check_lexicon()

# --- Translation: parse the source, emit each target word with the index of the source word it translates ---

_Emitted = list[tuple[str, tuple[int, ...]]]  # (target word, the indices of the source words it translates)


class _NounPhrase(NamedTuple):
    """A source noun phrase ``[det] [numeral] adjective* noun``, each part the index of its word."""

    det: int | None
    numeral: int | None
    adjectives: tuple[int, ...]
    noun: int
    plural: bool


class _Clause(NamedTuple):
    """A source clause ``[conjunction] subject verb [object] [preposition noun-phrase]``, by word index."""

    conjunction: int | None
    subject: _NounPhrase
    verb: int
    obj: _NounPhrase | None  # None exactly when the verb is intransitive
    preposition: int | None
    pp: _NounPhrase | None


class _Parser:
    """A recursive-descent parser of the source grammar; each target language emits words from its parse."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.i = 0

    def _peek(self) -> str | None:
        return self.words[self.i] if self.i < len(self.words) else None

    def _fail(self, expected: str) -> ValueError:
        found = f"{self._peek()!r}" if self._peek() is not None else "the end of the sentence"
        return ValueError(
            f"not a toy-language sentence: expected {expected} at word {self.i}, found {found} "
            f"in {' '.join(self.words)!r}"
        )

    def sentence(self) -> list[_Clause]:
        clauses = [self.clause(None)]
        while (word := self._peek()) is not None:
            if word not in CONJUNCTIONS:
                raise self._fail("a conjunction or the end of the sentence")
            self.i += 1
            clauses.append(self.clause(self.i - 1))
        return clauses

    def clause(self, conjunction: int | None) -> _Clause:
        subject = self.noun_phrase()
        verb = self._peek()
        if verb not in _VERBS:
            raise self._fail("a verb")
        verb_index = self.i
        self.i += 1
        obj = self.noun_phrase() if _VERBS[verb][1] else None
        prep_index = pp = None
        if self._peek() in PREPOSITIONS:
            prep_index = self.i
            self.i += 1
            pp = self.noun_phrase()
        return _Clause(conjunction, subject, verb_index, obj, prep_index, pp)

    def noun_phrase(self) -> _NounPhrase:
        det = numeral = None
        if self._peek() in DETERMINERS:
            det = self.i
            self.i += 1
        if self._peek() in NUMERALS and (det is None or DETERMINERS[self.words[det]][2]):
            numeral = self.i
            self.i += 1
        adjectives = []
        while self._peek() in ADJECTIVES:
            adjectives.append(self.i)
            self.i += 1
        noun = self._peek()
        if noun not in _NOUN_NUMBER:
            raise self._fail(
                "a noun" if adjectives or det is not None or numeral is not None else "a noun phrase"
            )
        if det is None and numeral is None:
            raise self._fail("a determiner or numeral before the noun")
        plural = _NOUN_NUMBER[noun][1]
        if numeral is not None and not plural:
            raise self._fail("a plural noun after a numeral")
        if det is not None and DETERMINERS[self.words[det]][1 if plural else 0] is None:
            raise self._fail(f"a {'singular' if plural else 'plural'} noun after {self.words[det]!r}")
        self.i += 1
        return _NounPhrase(det, numeral, tuple(adjectives), self.i - 1, plural)


def _latin(words: Sequence[str], clauses: list[_Clause], phenomena: bool) -> _Emitted:
    """The invented SOV target: verb last, the prepositional phrase (as a postpositional one) before the
    object; ``phenomena`` as in the module's docstring."""
    out: _Emitted = []
    for c in clauses:
        if c.conjunction is not None:
            out.append((CONJUNCTIONS[words[c.conjunction]], (c.conjunction,)))
        out += _latin_noun_phrase(words, c.subject, phenomena)
        if c.pp is not None:
            assert c.preposition is not None
            out += _latin_noun_phrase(words, c.pp, phenomena)
            out.append((PREPOSITIONS[words[c.preposition]], (c.preposition,)))
        if c.obj is not None:
            out += _latin_noun_phrase(words, c.obj, phenomena)
        verb = (_VERBS[words[c.verb]][0] + ("an" if c.subject.plural else "a"), (c.verb,))
        if phenomena:
            out += [(AUXILIARY, (c.verb,)), verb, *([(PARTICLE, ())] if c.obj is not None else [])]
        else:
            out.append(verb)
    return out


def _latin_noun_phrase(words: Sequence[str], np: _NounPhrase, phenomena: bool) -> _Emitted:
    """``[det] noun adjective* [numeral]``, determiner and adjectives agreeing with the noun in number."""
    out: _Emitted = []
    plural = np.plural
    if np.det is not None:
        form = DETERMINERS[words[np.det]][1 if plural else 0]
        assert form is not None  # the parser checked the agreement
        # With phenomena, the numeral carries a determiner before it, and the singular "the" is dropped.
        merged = phenomena and np.numeral is not None
        dropped = phenomena and words[np.det] == "the" and not plural
        if not (merged or dropped):
            out.append((form, (np.det,)))
    out.append((_NOUN_NUMBER[words[np.noun]][0] + ("i" if plural else "o"), (np.noun,)))
    out += [(ADJECTIVES[words[a]] + ("es" if plural else "e"), (a,)) for a in np.adjectives]
    if np.numeral is not None:
        carried = (np.det, np.numeral) if phenomena and np.det is not None else (np.numeral,)
        out.append((NUMERALS[words[np.numeral]], carried))
    return out


def _han(words: Sequence[str], clauses: list[_Clause]) -> _Emitted:
    """The Chinese-order target: ``subject [preposition np localizer] verb [了] [object]``."""
    out: _Emitted = []
    for c in clauses:
        if c.conjunction is not None:
            out.append((han.CONJUNCTIONS[words[c.conjunction]], (c.conjunction,)))
        out += _han_noun_phrase(words, c.subject)
        if c.pp is not None:
            assert c.preposition is not None
            before, localizer = han.PREPOSITIONS[words[c.preposition]]
            out += [(before, (c.preposition,)), *_han_noun_phrase(words, c.pp)]
            if localizer is not None:
                out.append((localizer, (c.preposition,)))
        out.append((han.VERBS[words[c.verb]], (c.verb,)))
        if words[c.verb] not in han.STATIVE_VERBS:
            out.append((han.PERFECTIVE, ()))
        if c.obj is not None:
            out += _han_noun_phrase(words, c.obj)
    return out


def _han_noun_phrase(words: Sequence[str], np: _NounPhrase) -> _Emitted:
    """``[det] [numeral measure-word] adjective* noun``; a measure word links to the word that asks for it."""
    noun, measure = han.NOUNS[_SINGULAR[words[np.noun]]]
    out: _Emitted = []
    if np.det is not None:
        alone, before_numeral, counted = han.DETERMINERS[words[np.det]]
        word = before_numeral if np.numeral is not None else alone
        out += [(w, (np.det,)) for w in (word, measure if counted else None) if w is not None]
    if np.numeral is not None:
        out += [(han.NUMERALS[words[np.numeral]], (np.numeral,)), (measure, (np.numeral,))]
    out += [(han.ADJECTIVES[words[a]], (a,)) for a in np.adjectives]
    out.append((noun, (np.noun,)))
    return out


def translate(
    source_words: Sequence[str], *, phenomena: bool = False, script: Script = "latin"
) -> tuple[list[str], tuple[tuple[int, int], ...]]:
    """Translate a toy-language sentence word by word, reordering and inflecting by the rules above.

    Returns the target words and the gold alignment ``(source_index, target_index)`` sorted by target index
    (then source index). Without ``phenomena`` it is a permutation; with it, a target word may have two
    links or none, and a source word two or none (see the module's docstring). ``script="han"``: the
    target in Chinese characters, its own order and phenomena (``phenomena`` does not apply).
    Raises ``ValueError`` naming the offending word if ``source_words`` is not a sentence of the language.
    """
    if script not in ("latin", "han"):
        raise ValueError(f"script must be 'latin' or 'han', got {script!r}")
    if phenomena and script != "latin":
        raise ValueError(f"phenomena are a variant of script 'latin'; script {script!r} has its own")
    clauses = _Parser(source_words).sentence()
    emitted = _han(source_words, clauses) if script == "han" else _latin(source_words, clauses, phenomena)
    links = tuple((src, tgt) for tgt, (_, sources) in enumerate(emitted) for src in sorted(sources))
    return [word for word, _ in emitted], links


# --- Generation ---------------------------------------------------------------------------------------------

MIN_WORDS, MAX_WORDS = 3, 25
_ADJECTIVE_LIST = tuple(ADJECTIVES)
_TRANSITIVE_LIST = tuple(TRANSITIVE_VERBS)
_INTRANSITIVE_LIST = tuple(INTRANSITIVE_VERBS)
_NUMERAL_LIST = tuple(NUMERALS)
_PREPOSITION_LIST = tuple(PREPOSITIONS)
_CONJUNCTION_LIST = tuple(CONJUNCTIONS)
_SYMBOLS = tuple(string.ascii_lowercase)


def _noun_phrase(rng: random.Random, out: list[str]) -> None:
    r = rng.random()
    if r < 0.5:  # singular
        out.append(rng.choice(("the", "the", "a", "this", "every")))
        plural = False
    elif r < 0.7:  # plural with a determiner only
        out.append(rng.choice(("the", "these", "some")))
        plural = True
    elif r < 0.85:  # plural with determiner and numeral
        out += (rng.choice(("the", "these")), rng.choice(_NUMERAL_LIST))
        plural = True
    else:  # plural with a bare numeral
        out.append(rng.choice(_NUMERAL_LIST))
        plural = True
    r = rng.random()
    for _ in range(0 if r < 0.45 else 1 if r < 0.8 else 2):
        out.append(rng.choice(_ADJECTIVE_LIST))
    out.append(rng.choice(NOUNS)[1 if plural else 0])


def _clause(rng: random.Random, out: list[str]) -> None:
    _noun_phrase(rng, out)
    if rng.random() < 0.65:
        out.append(rng.choice(_TRANSITIVE_LIST))
        _noun_phrase(rng, out)
    else:
        out.append(rng.choice(_INTRANSITIVE_LIST))
    if rng.random() < 0.4:
        out.append(rng.choice(_PREPOSITION_LIST))
        _noun_phrase(rng, out)


def _toy_sentence(rng: random.Random) -> list[str]:
    """One source sentence of the toy language with 3 to 25 words."""
    while True:
        out: list[str] = []
        _clause(rng, out)
        if rng.random() < 0.35:
            out.append(rng.choice(_CONJUNCTION_LIST))
            _clause(rng, out)
        if len(out) <= MAX_WORDS:
            return out


def _symbol_string(rng: random.Random) -> list[str]:
    """A random string of 3 to 25 letters for the copy and reverse tasks."""
    return rng.choices(_SYMBOLS, k=rng.randint(MIN_WORDS, MAX_WORDS))


def _make_pair(task: str, words: list[str], phenomena: bool = False, script: Script = "latin") -> Pair:
    if task == "translate":
        target, alignment = translate(words, phenomena=phenomena, script=script)
        if script == "han":  # written without spaces: the words the links index are listed
            return Pair(" ".join(words), "".join(target), alignment, target_words=tuple(target))
    elif task == "copy":
        target, alignment = words, tuple((i, i) for i in range(len(words)))
    else:  # reverse
        n = len(words)
        target, alignment = words[::-1], tuple((n - 1 - j, j) for j in range(n))
    return Pair(" ".join(words), " ".join(target), alignment)


def make_toy_splits(
    *,
    task: Literal["translate", "copy", "reverse"] = "translate",
    split: Literal["random", "length"] = "random",
    train_size: int = 50_000,
    val_size: int = 1_000,
    test_size: int = 1_000,
    seed: int = 1234,
    max_train_words: int = 12,
    phenomena: bool = False,
    script: Script = "latin",
) -> dict[str, list[Pair]]:
    """Generate the train, val and test splits of a toy task, deterministically from ``seed``.

    Args:
        task: ``"translate"`` (the toy language pair), ``"copy"`` or ``"reverse"`` (random letter strings).
        split: ``"random"``: all splits from the same distribution of 3 to 25 words. ``"length"``: train
            and val hold sentences of at most ``max_train_words`` words and test only longer ones, to measure
            length generalisation (in the spirit of SCAN's length split).
        train_size, val_size, test_size: number of pairs in each split.
        seed: the same seed gives the same splits; another seed gives different ones.
        max_train_words: the length threshold of the ``"length"`` split; unused by ``"random"``.
        phenomena: ``"translate"`` only: one-to-many, many-to-one and unaligned words in the translations
            (see the module's docstring); the source sentences are the same as without.
        script: ``"translate"`` only: ``"latin"`` (the invented language) or ``"han"`` (the target in
            Chinese characters, without spaces, each pair listing its ``target_words``; see the module's
            docstring); the source sentences are the same for both.

    Returns:
        ``{"train": [...], "val": [...], "test": [...]}``. No source sentence occurs twice, within or across
        splits, so the splits are disjoint.
    """
    if task not in ("translate", "copy", "reverse"):
        raise ValueError(f"task must be 'translate', 'copy' or 'reverse', got {task!r}")
    if split not in ("random", "length"):
        raise ValueError(f"split must be 'random' or 'length', got {split!r}")
    if phenomena and task != "translate":
        raise ValueError(f"phenomena are a variant of the translate task, not of {task!r}")
    if script not in ("latin", "han"):
        raise ValueError(f"script must be 'latin' or 'han', got {script!r}")
    if script != "latin" and task != "translate":
        raise ValueError(f"script {script!r} is a variant of the translate task, not of {task!r}")
    if phenomena and script != "latin":
        raise ValueError(f"phenomena are a variant of script 'latin'; script {script!r} has its own")
    sizes = {"train": train_size, "val": val_size, "test": test_size}
    if train_size < 1 or val_size < 0 or test_size < 0:
        raise ValueError(f"need train_size >= 1 and val_size, test_size >= 0, got {sizes}")
    if split == "length" and not MIN_WORDS <= max_train_words < MAX_WORDS:
        raise ValueError(f"max_train_words must be in [{MIN_WORDS}, {MAX_WORDS - 1}], got {max_train_words}")

    rng = random.Random(seed)
    sample = _toy_sentence if task == "translate" else _symbol_string
    # Two pools: "short" feeds train + val, "long" feeds test. With the random split everything is "short".
    limit = max_train_words if split == "length" else MAX_WORDS
    wanted = (
        {"short": train_size + val_size, "long": test_size}
        if split == "length"
        else {"short": train_size + val_size + test_size, "long": 0}
    )
    pools: dict[str, list[list[str]]] = {"short": [], "long": []}
    seen: set[tuple[str, ...]] = set()
    draws, max_draws = 0, 50 * (train_size + val_size + test_size) + 10_000
    while any(len(pools[k]) < wanted[k] for k in pools):
        if draws == max_draws:
            got = {k: len(v) for k, v in pools.items()}
            raise ValueError(
                f"could not draw {wanted} distinct {task} sentences (split={split!r}, "
                f"max_train_words={max_train_words}) in {max_draws} tries; got {got}"
            )
        draws += 1
        words = sample(rng)
        key = tuple(words)
        name = "short" if len(words) <= limit else "long"
        if len(pools[name]) < wanted[name] and key not in seen:
            seen.add(key)
            pools[name].append(words)
    # Frequent sentences are drawn first; shuffle so no split gets more of them than another.
    for pool in pools.values():
        rng.shuffle(pool)
    short, long = pools["short"], pools["long"]
    chunks = {
        "train": short[:train_size],
        "val": short[train_size : train_size + val_size],
        "test": long if split == "length" else short[train_size + val_size :],
    }
    return {
        name: [_make_pair(task, words, phenomena, script) for words in chunk]
        for name, chunk in chunks.items()
    }


# --- The toy tasks as the data module reads them (data.registry) -------------------------------------------


class ToyTranslation(CorpusReader):
    """``toy``: the toy translation task, generated from ``seed`` (no files; :func:`make_toy_splits`).

    Options (``toy``, a ``data.reader.ToyOptions``): ``train_size``, ``val_size``, ``test_size``: pairs in
    each split. ``split``: ``random`` (one distribution) or ``length`` (test sentences longer than any seen in
    training, which holds at most ``max_train_words`` words). ``phenomena``: translations with one-to-many,
    many-to-one and unaligned words, each with its gold links, where explanation methods can be told apart.
    ``script``: ``latin`` (the invented target language) or ``han``: the target in Chinese characters, without
    spaces, with measure words and an unaligned aspect particle; ``han`` needs a subword tokenizer (``bpe``
    unless one is named, whose ``pre_tokenize`` picks ``cjk`` for the target) and makes ``target_lang`` ``zh``
    (so that BLEU is tokenized as Chinese). Word-level tokens otherwise.
    """

    reads_files = False
    reads: ClassVar[frozenset[str]] = frozenset({"toy.phenomena", "toy.script"})
    task: ClassVar[Literal["translate", "copy", "reverse"]] = "translate"

    def __init__(self, name: str, options: CorpusOptions) -> None:
        super().__init__(name, options)
        toy = options.toy
        if toy.script not in ("latin", "han"):
            raise ValueError(f"toy.script must be latin or han, got {toy.script!r}")
        if toy.script != "latin" and toy.phenomena:
            raise ValueError(f"toy.phenomena is a variant of toy.script 'latin'; {toy.script!r} has its own")
        self.tokenizer = "bpe" if toy.script == "han" else "word"
        if toy.script == "han":  # Chinese, whatever target_lang says: BLEU's tokenizer follows it
            self.target_lang = "zh"

    def check_tokenizer(self, kind: str) -> None:
        if self.options.toy.script == "han" and kind == "word":
            raise ValueError(
                "toy.script 'han' writes its target without spaces, so a word-level tokenizer would make "
                "each sentence one token: use tokenizer bpe or unigram"
            )

    def read(self) -> dict[SplitName, list[Pair]]:
        toy = self.options.toy
        return make_toy_splits(  # type: ignore[return-value]
            task=self.task, split=toy.split, train_size=toy.train_size, val_size=toy.val_size,
            test_size=toy.test_size, seed=self.options.seed, max_train_words=toy.max_train_words,
            phenomena=toy.phenomena, script=toy.script,
        )

    def origin(self, split: SplitName, index: int, side: TextSide = "source") -> tuple[str, int | None]:
        return f"{self.name} {split} pair {index + 1}", None


class CopyTask(ToyTranslation):
    """``copy``: random strings of the letters a to z, their targets the same (the ``toy.*`` options as for
    ``toy``, but for ``toy.phenomena`` and ``toy.script``)."""

    reads: ClassVar[frozenset[str]] = frozenset()
    task = "copy"


class ReverseTask(CopyTask):
    """``reverse``: as ``copy``, each target the reversed string."""

    task = "reverse"
