"""evaluate.py explain MODEL --hf --gold-alignments on Japanese: an imported Marian model whose SentencePiece
model learnt Japanese as it is written (no spaces) reads a gold set segmented into words with spaces (KyTea's,
with full-width punctuation) as its training text would present it, its words joined without spaces, and
each SentencePiece piece belongs to the gold word whose characters it spells (its offsets). Everything is
built here: a SentencePiece model trained on a few sentences and a small random MarianMTModel (no network)."""


import pytest
import torch

from tests.conftest import last_json, run_evaluate

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

import tests.helpers.marian_model as marian_tests
from data.words import NO_WORD, encode_words
from export.marian import load_marian

# KFTT's gold writes KyTea's words, full-width punctuation and lowercased English.
GOLD = [("足利 義満 （ あしかが よしみつ ） は 室町 幕府 の 将軍 。",
         "yoshimitsu ashikaga was a shogun of the muromachi shogunate ."),
        ("封号 は 日本 国王 。", "title of nobility : monarch of japan"),
        ("日本 の 水墨 画 を 一変 さ せ た 。", "he changed japanese ink painting ."),
        ("官位 は 従 一 位 太政 大臣 。", "his official rank was juichii daijodaijin .")]
JAPANESE = ["".join(japanese.split()) for japanese, _ in GOLD]  # as written: no spaces
ENGLISH = [english for _, english in GOLD]
TRAIN_SPM = marian_tests.train_spm


def train_spm(texts: list[str], path) -> list[str]:
    """tests/helpers/marian_model.py's SentencePiece model (its default NFKC normalisation, as OPUS-MT's),
    with a vocabulary large enough for every Japanese character of ``texts``."""
    train = sentencepiece.SentencePieceTrainer.train
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sentencepiece.SentencePieceTrainer, "train",
                      lambda **options: train(**options | {"vocab_size": 120}))
        return TRAIN_SPM(texts, path)


@pytest.fixture(scope="module")
def japanese_marian(tmp_path_factory):
    """tests/helpers/marian_model.py's Marian model and tokenizer, its SentencePiece model trained on Japanese
    as written and English."""
    folder = tmp_path_factory.mktemp("marian_ja") / "opus-mt-ja-en"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(marian_tests, "GERMAN", JAPANESE)
        patch.setattr(marian_tests, "ENGLISH", ENGLISH)
        patch.setattr(marian_tests, "train_spm", train_spm)
        model, tokenizer = marian_tests.save_marian(folder)
    return folder, model, tokenizer


def word_of_pieces(pieces: list[str], words: list[str]) -> list[int]:
    """Each piece's word, counted independently of data.words for text without spaces: the pieces (▁ left
    out) spell the NFKC form of the words one after the other, which full-width punctuation keeps at one
    character; a piece belongs to the word holding most of its characters, a lone ▁ to none."""
    import unicodedata

    owner = [i for i, word in enumerate(words) for _ in unicodedata.normalize("NFKC", word)]
    found, position = [], 0
    for piece in pieces:
        spelt = piece.replace("▁", "")
        counts = [owner[position:position + len(spelt)].count(i) for i in range(len(words))]
        found.append(NO_WORD if not spelt else counts.index(max(counts)))
        position += len(spelt)
    assert position == len(owner)
    return found


def test_pieces_of_japanese_as_written_belong_to_the_gold_words_they_spell(japanese_marian):
    folder, _, tokenizer = japanese_marian
    imported = load_marian(str(folder)).src_tokenizer
    longest = 0
    for japanese, written in zip((j for j, _ in GOLD), JAPANESE, strict=True):
        words = japanese.split()
        read = encode_words(imported, words)
        assert read.ids == imported.encode(written)  # the text as written, not the words joined by spaces
        assert read.ids != imported.encode(japanese)
        pieces = tokenizer.convert_ids_to_tokens(tokenizer(written, add_special_tokens=False).input_ids)
        assert imported.tokens(read.ids) == pieces
        assert read.words == word_of_pieces(pieces, words)
        longest = max(longest, *(len(piece.replace("▁", "")) for piece in pieces))
    assert longest > 1  # pieces of several characters


def transformers_argmax_links(model, tokenizer, japanese: str, english: str) -> list[tuple[int, int]]:
    """(source word, target word) links: each target word to the source word its last layer's
    cross-attention (mean over heads, transformers' own weights) gives most, summed over the source word's
    pieces and averaged over the target word's (test_import_marian_gold's reading, here on Japanese)."""
    words = japanese.split()
    source = tokenizer("".join(words), return_tensors="pt")
    target = tokenizer(text_target=english, add_special_tokens=False).input_ids
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        out = model(**source, decoder_input_ids=torch.tensor([[2, *target]]), output_attentions=True)
    cross = out.cross_attentions[-1][0].mean(0)  # (T, S): row t predicts target token t, EOS column last
    src_words = word_of_pieces(tokenizer.convert_ids_to_tokens(source.input_ids[0, :-1].tolist()), words)
    tgt_words = word_of_pieces(tokenizer.convert_ids_to_tokens(target), english.split())
    links = []
    for word in range(len(english.split())):
        rows = cross[[t for t, w in enumerate(tgt_words) if w == word]].mean(0)  # (S,)
        per_source = [rows[[s for s, w in enumerate(src_words) if w == i]].sum() if i in src_words
                      else torch.tensor(-1.0) for i in range(len(words))]
        links.append((int(torch.stack(per_source).argmax()), word))
    return links


def test_gold_links_of_transformers_own_attention_over_the_words_score_aer_zero(japanese_marian, tmp_path,
                                                                                capsys):
    folder, model, tokenizer = japanese_marian
    links = [transformers_argmax_links(model, tokenizer, j, e) for j, e in GOLD]
    sentences, gold = tmp_path / "ja-en.src-tgt", tmp_path / "ja-en.gold"
    sentences.write_text("".join(f"{j} ||| {e}\n" for j, e in GOLD), encoding="utf-8")
    gold.write_text("".join(" ".join(f"{s + 1}-{t + 1}" for s, t in pair) + "\n" for pair in links),
                    encoding="utf-8")
    code, out, err = run_evaluate(capsys, "explain", folder, "--hf", "--gold-alignments", gold,
                                  "--gold-sentences", sentences, "--methods", "attention", "--analysis-out",
                                  tmp_path / "analysis", "--quiet")
    assert code == 0, err
    assert "no corpus of the run beside the gold: its sides are read as the gold writes them" in err
    result = last_json(out)
    assert result["read"]["source"]["unknown"] == 0 and result["read"]["target"]["unknown"] == 0
    best = result["best"]["attention"]["argmax"]
    assert (best["layer"], best["head"], best["aer"]) == ("layer 2", None, 0.0)
