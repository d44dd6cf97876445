"""Head ablation: masks against zeroed slices, batched against one at a time, pruning, alignment, the CLI."""

import errno
import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import evaluate
from analysis.metrics import TranslationScores
from data.batching import collate
from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.ablation import AnalysisError, ablation_losses, ablation_translations
from evaluation.alignment import cross_attention_alignment
from evaluation.head_masks import Head, all_heads, head_mask, stacked_head_mask
from evaluation.importance import HeadImportance
from evaluation.pruning import parse_prune_count, prune_count, pruned_loss
from evaluation.translate import translate
from model import Transformer
from tests.conftest import EOS, PAD, last_json, random_ids, run_evaluate, tiny_config, train_tiny
from training.checkpoints import load_run


def batches():
    """Two batches of random sentences of different lengths (padding!) for models of ``tiny_config()``."""
    g = torch.Generator().manual_seed(0)
    out = []
    for first in (0, 3):
        items = []
        for i, (s, t) in enumerate([(5, 4), (3, 6), (7, 2)]):
            src = random_ids(1, s, 13, generator=g)[0].tolist()
            tgt = random_ids(1, t, 11, generator=g)[0].tolist()
            items.append((first + i, src, tgt))
        out.append(collate(items))
    return out


def attention_module(model, kind, layer):
    if kind == "encoder":
        return model.encoder_layers[layer].self_attn
    return (
        model.decoder_layers[layer].self_attn if kind == "decoder" else model.decoder_layers[layer].cross_attn
    )


# -- the mask itself -----------------------------------------------------------------------------------------


def test_head_mask_equals_zeroing_that_heads_slice_before_the_output_projection(tiny_model):
    batch = batches()[0]
    dh = tiny_model.config.d_model // tiny_model.config.num_heads
    for kind in ("encoder", "decoder", "cross"):
        masked = tiny_model(
            batch.src, batch.tgt_in, head_mask=head_mask(tiny_model.config, [Head(kind, 1, 2)])
        )

        def zero_head(module, inputs):
            x = inputs[0].clone()
            x[..., 2 * dh : 3 * dh] = 0.0  # head 2's slice of the merged heads
            return (x,)

        hook = attention_module(tiny_model, kind, 1).out_proj.register_forward_pre_hook(zero_head)
        try:
            zeroed = tiny_model(batch.src, batch.tgt_in)
        finally:
            hook.remove()
        torch.testing.assert_close(masked, zeroed, rtol=0, atol=0)
        assert not torch.allclose(masked, tiny_model(batch.src, batch.tgt_in)), kind


def test_stacked_head_mask_gives_each_copy_of_the_batch_its_own_ablation():
    config = tiny_config(num_heads=2, num_encoder_layers=1, num_decoder_layers=2)
    masks = stacked_head_mask(config, [(), (Head("cross", 1, 0),), (Head("encoder", 0, 1),)], batch_size=2)
    assert masks.encoder.tolist() == [[[1, 1]], [[1, 1]], [[1, 1]], [[1, 1]], [[1, 0]], [[1, 0]]]
    assert masks.decoder.tolist() == [[[1, 1], [1, 1]]] * 6
    assert masks.cross.tolist() == [[[1, 1], [1, 1]]] * 2 + [[[1, 1], [0, 1]]] * 2 + [[[1, 1], [1, 1]]] * 2
    assert len(all_heads(config)) == (1 + 2 + 2) * 2
    with pytest.raises(ValueError, match="not a head of this model"):
        head_mask(config, [Head("encoder", 1, 0)])


# -- batched ablations against one at a time -----------------------------------------------------------------


@torch.no_grad()
def reference_losses(model, data, ablations):
    """Teacher-forced NLL per target token of each ablation, one ablation and one batch at a time."""
    losses = []
    for silenced in ablations:
        total, tokens = 0.0, 0
        for batch in data:
            logits = model(batch.src, batch.tgt_in, head_mask=head_mask(model.config, silenced))
            total += F.cross_entropy(
                logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD, reduction="sum"
            )
            tokens += int((batch.tgt_out != PAD).sum())
        losses.append(total.item() / tokens)
    return losses


def test_batched_ablation_losses_equal_one_head_at_a_time(tiny_model):
    ablations = [(), *[(h,) for h in all_heads(tiny_model.config)], tuple(all_heads(tiny_model.config)[:5])]
    expected = reference_losses(tiny_model, batches(), ablations)
    for max_rows in (1, 7, 1000):  # one ablation a pass, two, all of them
        assert ablation_losses(tiny_model, batches(), ablations, max_rows=max_rows) == pytest.approx(
            expected, rel=1e-5
        )
    assert len(set(expected)) == len(expected)  # every ablation does change the loss


def test_batched_ablation_translations_equal_decoding_each_head_alone():
    torch.manual_seed(0)
    # Untied: a random model with tied embeddings predicts its own input token again and again.
    model = Transformer(tiny_config(tie_output_embedding=False)).eval()
    heads = all_heads(model.config)
    ablations = [(), (heads[0],), (heads[9],), (heads[-1],)]
    found = ablation_translations(model, batches(), ablations, max_rows=7)  # two ablations a pass
    for silenced, translations in zip(ablations, found):
        mask = head_mask(model.config, silenced)
        expected = {}
        for batch in batches():
            for index, src in zip(batch.index.tolist(), batch.src):
                alone = model.generate(src[None, : int((src != PAD).sum())], head_mask=mask)[0].tolist()
                expected[index] = [t for t in alone if t not in (PAD, EOS)]
        assert translations == [expected[i] for i in range(len(expected))]
    assert all(found[i] != found[0] for i in (1, 2, 3))  # each of these ablations changes a translation


def test_ablation_translations_come_back_in_sentence_order_whatever_the_batch_order():
    torch.manual_seed(0)
    model = Transformer(tiny_config(tie_output_embedding=False)).eval()
    ablations = [(), (all_heads(model.config)[0],)]
    in_order = ablation_translations(model, batches(), ablations)
    assert ablation_translations(model, batches()[::-1], ablations) == in_order  # indices 3, 4, 5 come first
    assert len({tuple(ids) for ids in in_order[0]}) > 1  # the sentences differ, so a shuffle would show


def test_a_head_whose_output_is_already_zero_is_worth_nothing(tiny_model):
    dh = tiny_model.config.d_model // tiny_model.config.num_heads
    with torch.no_grad():  # cut decoder layer 1, head 3 off from the residual stream
        tiny_model.decoder_layers[0].self_attn.out_proj.weight[:, 3 * dh : 4 * dh] = 0.0
    heads = all_heads(tiny_model.config)
    losses = ablation_losses(tiny_model, batches(), [(), *[(h,) for h in heads]], max_rows=1000)
    delta = {head: loss - losses[0] for head, loss in zip(heads, losses[1:])}
    assert delta.pop(Head("decoder", 0, 3)) == pytest.approx(0.0, abs=1e-6)
    assert min(abs(d) for d in delta.values()) > 1e-5


# -- the importance report -----------------------------------------------------------------------------------


def scores(bleu, exact_match):
    return TranslationScores(bleu, chrf=2 * bleu, exact_match=exact_match, num_sentences=4, signature="s",
                             bleu_tokenize="13a")


def test_importance_is_the_loss_increase_and_rank_one_is_the_most_important_head():
    config = tiny_config(num_heads=2, num_encoder_layers=1, num_decoder_layers=2)
    heads = all_heads(config)  # encoder (1, 2), decoder (2, 2), cross (2, 2): 10 heads
    deltas = [0.5, -0.25, 0.125, 0.0, 2.0, 0.0625, 1.0, 0.03125, 0.25, 0.375]  # exact in binary
    per_head = [scores(40.0 - i, 0.25) for i in range(10)]
    importance = HeadImportance(heads, 1.0, [1.0 + d for d in deltas], 8, scores(40.0, 0.5), per_head)
    assert importance.delta_loss() == deltas
    ranking = importance.ranking()  # least important first
    assert (ranking[0], ranking[-1]) == (Head("encoder", 0, 1), Head("decoder", 1, 0))
    assert importance.matrix("decoder", deltas).tolist() == [[0.125, 0.0], [2.0, 0.0625]]  # rows: layers
    rows = importance.rows()
    assert [row["rank"] for row in rows] == [3, 10, 6, 9, 1, 7, 2, 8, 5, 4]
    assert (rows[4]["kind"], rows[4]["layer"], rows[4]["head"]) == ("decoder", 2, 1)  # counted from 1
    assert (rows[3]["delta_bleu"], rows[3]["delta_chrf"], rows[3]["delta_exact_match"]) == (-3.0, -6.0, -0.25)


# -- pruning -------------------------------------------------------------------------------------------------


def test_prune_count_takes_a_number_or_a_fraction_of_heads():
    assert parse_prune_count("3") == 3 and parse_prune_count("0") == 0
    assert prune_count(parse_prune_count("0.25"), 12) == 3
    for bad in ("-1", "1.5", "0.0", "many"):
        with pytest.raises(ValueError):
            parse_prune_count(bad)
    with pytest.raises(AnalysisError, match="only 12 heads"):
        prune_count(13, 12)
    with pytest.raises(SystemExit):
        evaluate.parse_args(["x.ckpt", "--prune-heads", "1.5"])


def test_prune_count_rounds_a_fraction_to_the_nearest_head_and_allows_every_head():
    assert prune_count(0.3, 12) == 4  # 3.6 heads
    assert prune_count(0.2, 12) == 2  # 2.4 heads
    assert prune_count(12, 12) == 12


def test_prune_zero_equals_the_plain_evaluation(tiny_run, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    plain = last_json(run_evaluate(capsys, checkpoint, "--quiet")[1])
    code, out, _ = run_evaluate(capsys, checkpoint, "--prune-heads", "0", "--quiet")
    pruned = last_json(out)
    assert code == 0 and pruned["pruned_heads"] == [] and pruned["num_heads"] == 12
    for key in ("bleu", "chrf", "exact_match", "num_sentences"):
        assert pruned[key] == plain[key], key
    assert pruned["nll_per_token"] == pytest.approx(pruned["unpruned_nll_per_token"], rel=1e-6)


def test_silencing_every_cross_attention_head_changes_loss_and_translations(tiny_run):
    loaded = load_run(tiny_run / "checkpoints" / "last.ckpt")
    dm, model = loaded.datamodule, loaded.module.model
    pairs = dm.pairs("test")[:20]
    cross = [h for h in all_heads(model.config) if h.kind == "cross"]
    intact = pruned_loss(model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, [])
    assert pruned_loss(model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, cross) != pytest.approx(intact)
    sources = [p.source for p in pairs]
    without_cross = translate(
        model, dm.src_tokenizer, dm.tgt_tokenizer, sources, head_mask=head_mask(model.config, cross)
    )
    assert without_cross != translate(model, dm.src_tokenizer, dm.tgt_tokenizer, sources)
    # Without cross-attention the decoder cannot see the source: every sentence gets the same translation, cut
    # at its own length limit.
    longest = max(without_cross, key=len)
    assert all(ids == longest[: len(ids)] for ids in without_cross)


# -- evaluate.py ---------------------------------------------------------------------------------------------


def test_head_importance_writes_a_table_json_and_heatmaps(tiny_run, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    args = ["--head-importance", "--importance-sentences", "8", "--prune-heads", "4", "--quiet"]
    code, out, err = run_evaluate(capsys, checkpoint, *args)
    assert code == 0, err
    folder = tiny_run / "analysis" / "last"  # the default: <run>/analysis/<checkpoint stem>
    result = last_json(out)
    assert result["head_importance"] == str(folder / "head_importance_test.json")
    for title in ("encoder self-attention", "decoder self-attention", "cross-attention", "ΔBLEU"):
        assert title in out
    saved = json.loads((folder / "head_importance_test.json").read_text(encoding="utf-8"))
    assert saved["baseline"]["loss_sentences"] == 40 and saved["baseline"]["decoded_sentences"] == 8
    assert len(saved["heads"]) == len(saved["ranking"]) == 12
    assert {"kind", "layer", "head", "rank", "delta_nll", "delta_bleu", "delta_exact_match"} <= set(
        saved["heads"][0]
    )
    for kind in ("encoder", "decoder", "cross"):
        assert torch.tensor(saved["delta_nll"][kind]).shape == (2, 2)
        png = folder / f"head_importance_test_{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The pruned heads are the four whose silencing raises the loss least.
    by_delta = sorted(saved["heads"], key=lambda row: row["delta_nll"])
    assert result["pruned_heads"] == [{k: row[k] for k in ("kind", "layer", "head")} for row in by_delta[:4]]
    # Refuses to overwrite what it wrote.
    code, _, err = run_evaluate(capsys, checkpoint, "--head-importance", "--quiet")
    assert code == 1 and "exists" in err and len(err.strip().splitlines()) == 1


def test_a_full_disk_names_the_figure_it_could_not_write_and_leaves_no_part_of_it(tiny_run, capsys, tmp_path,
                                                                                  monkeypatch):
    """A full disk while the heatmaps were written said "No space left on device" naming no file, and left a
    0-byte PNG."""
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def full(figure, path, *args, **kwargs):
        if "cross" in Path(path).name:
            Path(path).write_bytes(b"")  # the file is made, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", full)
    out = tmp_path / "analysis"
    code, _, err = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--head-importance",
                                "--importance-sentences", "4", "--analysis-out", out, "--quiet")
    figure = out / "head_importance_test_cross.png"
    assert (code, err.strip()) == (1, f"error: {figure}: No space left on device")
    assert not [p.name for p in out.iterdir() if "cross" in p.name]  # nothing of the figure, whole or not


def test_alignment_reports_the_best_cross_attention_head_and_the_head_average(tiny_run, capsys):
    code, out, _ = run_evaluate(capsys, tiny_run / "checkpoints" / "last.ckpt", "--alignment", "--quiet")
    assert code == 0
    alignment = last_json(out)["alignment"]
    aer = torch.tensor(alignment["aer"])
    best = alignment["best_head"]
    assert aer.shape == (2, 2) and best["aer"] == pytest.approx(float(aer.min()))
    assert aer[best["layer"] - 1, best["head"] - 1] == pytest.approx(best["aer"])
    assert 0.0 <= alignment["head_average"]["aer"] <= 1.0
    assert "alignment: best cross-attention head" in out


def test_analysis_options_give_one_line_errors(tiny_run, tmp_path, capsys):
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    tsv = tmp_path / "plain.tsv"
    tsv.write_text("the dog sees a cat\tder hund\n", encoding="utf-8")
    cases = [
        ([checkpoint, "--tsv", tsv, "--alignment"], "--alignment needs data with gold word alignments"),
        ([checkpoint, "--prune-heads", "13"], "--prune-heads 13: the model has only 12 heads"),
    ]
    for args, message in cases:
        code, _, err = run_evaluate(capsys, *args, "--quiet")
        assert code == 1 and message in err, err
        assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit):
        evaluate.parse_args(["translate", str(checkpoint), "a b", "--head-importance"])


# -- a model that has learnt to reverse ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def reverse_run(tmp_path_factory):
    """The tiny config trained on the reverse task, strings of 3 to 6 letters (about 10 s on a free CPU)."""
    return train_tiny(
        tmp_path_factory.mktemp("reverse"),
        "--data.dataset", "reverse", "--data.toy.split", "length", "--data.toy.max_train_words", "6",
        "--data.toy.train_size", "2000", "--data.max_tokens", "256", "--trainer.max_epochs", "10",
        "--model.dropout", "0.0", "--model.label_smoothing", "0.0", "--model.warmup_steps", "50",
        "--model.decode_every_n_epochs", "0", "--attention.every_n_epochs", "0",
        "--trainer.check_val_every_n_epoch", "100", "--recent.save_top_k", "1",
    )


@pytest.mark.slow
def test_reverse_task_has_a_cross_attention_head_on_the_anti_diagonal(reverse_run, capsys):
    checkpoint = reverse_run / "checkpoints" / "last.ckpt"
    # Val holds strings of the training lengths; the length split puts longer ones, never seen, in test.
    code, out, _ = run_evaluate(capsys, checkpoint, "--split", "val", "--alignment", "--quiet")
    assert code == 0
    alignment = last_json(out)["alignment"]
    # The best head puts its arg-max on the anti-diagonal for 96% of the target letters (92% when trained from
    # another seed); the heads of the first decoder layer, which have not found it, reach 51-72%: on strings
    # of 3 to 6 letters the anti-diagonal cell is often also the middle or a neighbour. 85% is clear of both.
    assert alignment["best_head"]["agreement"] >= 0.85, alignment
    assert alignment["best_head"]["aer"] <= 0.15, alignment


def test_alignment_best_head_and_head_average_leave_silenced_heads_out():
    words = ["a b c d", "b c a", "d a c b e", "c e"]
    reverse = [tuple((len(w.split()) - 1 - j, j) for j in range(len(w.split()))) for w in words]  # gold links
    pairs = [Pair(w, " ".join(reversed(w.split())), links) for w, links in zip(words, reverse)]
    tokenizer = Tokenizer.train(words)
    torch.manual_seed(0)
    model = Transformer(tiny_config(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size, num_heads=2,
    )).eval()
    cross = [h for h in all_heads(model.config) if h.kind == "cross"]  # 2 layers x 2 heads
    kept_aer = []
    for kept in cross:
        report = cross_attention_alignment(
            model, tokenizer, tokenizer, pairs, silenced=[h for h in cross if h != kept]
        )
        assert report.best == kept  # the only head left
        aer = float(report.aer[kept.layer, kept.head])
        assert report.average_aer == pytest.approx(aer)  # the average of one head is that head
        kept_aer.append((aer, float(report.aer.min())))
    assert any(lowest < aer for aer, lowest in kept_aer)  # a silenced head would have been the best one
