"""evaluate.py explain MODEL --hf --gold-alignments: the explanation methods of an imported Marian model
scored on a gold set's words, each SentencePiece piece belonging to the word it spells. The tiny model and
tokenizer are tests/helpers/marian_model.py's (no network)."""

import json

import pytest
import torch

from tests.conftest import last_json, run_evaluate
from tests.helpers.tab_client import get, serve

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from tests.helpers.marian_model import ENGLISH, GERMAN, save_marian

PAIRS = 3


def pieces_words(pieces: list[str]) -> list[int]:
    """Each piece's word, read off the ▁ that starts a word (-1: a lone ▁, which spells none)."""
    words, word = [], -1
    for piece in pieces:
        if piece.startswith("▁"):
            word += 1
        words.append(word if piece != "▁" else -1)
    return words


def transformers_argmax_links(marian, tokenizer, german: str, english: str) -> list[tuple[int, int]]:
    """(source word, target word) links, 0-based: each target word to the source word its last layer's
    cross-attention (mean over heads, transformers' own weights) gives most, summed over the source word's
    pieces and averaged over the target word's, as gold alignment scoring reads words."""
    source = tokenizer(german, return_tensors="pt")
    target = tokenizer(text_target=english, add_special_tokens=False).input_ids
    marian.config._attn_implementation = "eager"
    with torch.no_grad():
        out = marian(**source, decoder_input_ids=torch.tensor([[2, *target]]), output_attentions=True)
    cross = out.cross_attentions[-1][0].mean(0)  # (T, S): row t predicts target token t, EOS column last
    src_words = pieces_words(tokenizer.convert_ids_to_tokens(source.input_ids[0, :-1].tolist()))
    tgt_words = pieces_words(tokenizer.convert_ids_to_tokens(target))
    links = []
    for word in range(max(tgt_words) + 1):
        rows = cross[[t for t, w in enumerate(tgt_words) if w == word]].mean(0)  # (S,)
        per_source = [rows[[s for s, w in enumerate(src_words) if w == i]].sum() for i in
                      range(max(src_words) + 1)]
        links.append((int(torch.stack(per_source).argmax()), word))
    return links


@pytest.fixture(scope="module")
def gold_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian_gold")
    marian, tokenizer = save_marian(folder / "opus-mt-de-en")
    links = [transformers_argmax_links(marian, tokenizer, g, e) for g, e in zip(GERMAN[:PAIRS], ENGLISH)]
    pieces = tokenizer(GERMAN[:PAIRS], add_special_tokens=False).input_ids
    assert sum(map(len, pieces)) > sum(len(g.split()) for g in GERMAN[:PAIRS])  # words of several pieces
    sentences, gold = folder / "de-en.src-tgt", folder / "de-en.gold"
    sentences.write_text("".join(f"{g} ||| {e}\n" for g, e in zip(GERMAN[:PAIRS], ENGLISH)), encoding="utf-8")
    gold.write_text("".join(" ".join(f"{s + 1}-{t + 1}" for s, t in pair) + "\n" for pair in links),
                    encoding="utf-8")
    return folder / "opus-mt-de-en", sentences, gold, links


def test_the_gold_words_of_transformers_own_last_layer_argmax_score_aer_zero(gold_model, capsys, tmp_path):
    """Gold links taken from transformers' cross-attention of the last layer: evaluate.py, reading the
    imported model's own attention over the same words, finds them exactly there (AER 0), and not in the
    first layer's."""
    folder, sentences, gold, links = gold_model
    code, out, err = run_evaluate(capsys, "explain", folder, "--hf", "--gold-alignments", gold,
                                  "--gold-sentences", sentences, "--methods", "attention", "rollout",
                                  "--analysis-out", tmp_path / "analysis", "--quiet")
    assert code == 0, err
    assert "direction forward: de-en.gold is de-en" in err
    result = last_json(out)
    sure = sum(len(pair) for pair in links)
    assert result["sentences"] == PAIRS and result["sure_links"] == sure and result["dropped_links"] == 0
    assert set(result["best"]) == {"attention", "rollout"}
    best = result["best"]["attention"]["argmax"]
    assert (best["layer"], best["aer"], best["precision"], best["recall"]) == ("layer 2", 0.0, 1.0, 1.0)
    stored = json.loads((tmp_path / "analysis" / "gold_de-en.json").read_text(encoding="utf-8"))
    per_layer = stored["scores"]["attention"]["per_layer"]["argmax"]["aer"]
    assert len(per_layer) == 2 and per_layer[1] == 0.0 and per_layer[0] > 0.0


def test_a_run_made_with_the_gold_set_shows_the_same_aer_in_the_tab(gold_model, tmp_path, capsys):
    """make-run with the gold set instead of --tsv: the tab's probes are the gold pairs, read word by word,
    and its explanation scores are the same computation as explain --gold-alignments' forward arg-max."""
    folder, sentences, gold, _ = gold_model
    logdir = tmp_path / "logs"
    code, _, err = run_evaluate(capsys, "make-run", folder, logdir / "opus", "--gold-alignments", gold,
                                "--gold-sentences", sentences, "--quiet")
    assert code == 0, err
    assert err.count("direction") == 1 and "direction forward: de-en.gold is de-en" in err  # one true line
    client, _ = serve(logdir)
    (described,) = get(client, "/runs")["runs"]
    assert described["has_gold"] and [s["source"] for s in described["sentences"]] == GERMAN[:PAIRS]
    attention = get(client, "/explanations?run=opus&step=0")["methods"]["attention"]
    assert attention["layers"] == ["layer 1", "layer 2"]
    assert attention["aer"][1] == 0.0 and attention["aer"][0] > 0.0  # layer 2: transformers' own links
    answer = get(client, "/explanation?run=opus&step=0&sentence=0&method=attention")
    assert answer["aer"] is not None


def test_gold_scoring_needs_no_tsv_and_the_methods_alone_still_need_data(capsys):
    with pytest.raises(SystemExit):
        run_evaluate(capsys, "explain", "some/model", "--hf")
    assert "give --tsv FILE (source<TAB>reference lines) or --gold-alignments" in capsys.readouterr().err
