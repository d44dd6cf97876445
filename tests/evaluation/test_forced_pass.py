"""The one teacher-forced pass (evaluation.forced): one sentence batch, its tokens and maps, and the three
places that show maps (the AttentionLogger, the ATTENTION tab's typed sentence, evaluate.py --attention-out)
showing the same ones for the same sentence and checkpoint."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboard.util import tensor_util

from analysis.axes import KINDS
from data.batching import Batch
from data.pairs import Pair
from evaluation.forced import forced_pass, sentence_batch, sentence_pass
from evaluation.translate import translate_hypotheses
from model import HeadMask, Transformer
from tests.conftest import BOS, EOS, PAD, run_evaluate, tiny_config
from tests.helpers.head_view import HeadViewParser
from tests.helpers.tab_client import get, serve
from training.checkpoints import load_run
from viz.logger import AttentionLogger


def test_a_cut_hypothesis_reads_all_but_its_last_token_and_produces_them_all():
    config = tiny_config()
    finished = sentence_batch(config, [3, 4], [6, 7, 8])
    assert finished.tgt_in.tolist() == [[BOS, 6, 7, 8]] and finished.tgt_out.tolist() == [[6, 7, 8, EOS]]
    cut = sentence_batch(config, [3, 4], [6, 7, 8], finished=False)
    assert cut.src.tolist() == [[3, 4, EOS]]
    assert cut.tgt_in.tolist() == [[BOS, 6, 7]] and cut.tgt_out.tolist() == [[6, 7, 8]]


def test_a_batch_pass_holds_each_sentence_as_its_own_pass_does():
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    sentences = [([5, 6, 7, 8], [3, 4, 5]), ([9, 4], [6])]  # the second padded on both sides
    padded = forced_pass(model, Batch(
        src=torch.tensor([[5, 6, 7, 8, EOS], [9, 4, EOS, PAD, PAD]]),
        tgt_in=torch.tensor([[BOS, 3, 4, 5], [BOS, 6, PAD, PAD]]),
        tgt_out=torch.tensor([[3, 4, 5, EOS], [6, EOS, PAD, PAD]]), index=torch.arange(2),
    ))
    for number, (src_ids, tgt_ids) in enumerate(sentences):
        alone = sentence_pass(model, src_ids, tgt_ids).sentence_maps()
        cut = padded.sentence_maps(number)
        for kind in KINDS:
            for layer, weights in enumerate(alone[kind]):
                torch.testing.assert_close(cut[kind][layer], weights, atol=1e-6, rtol=0)
    words = SimpleNamespace(tokens=lambda ids: [str(i) for i in ids])
    assert padded.tokens(words, words, 1) == ([str(9), str(4), str(EOS)], [str(BOS), "6"], ["6", str(EOS)])


def test_a_silenced_head_is_silent_in_the_pass_and_in_the_gradients_callable():
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    batch = sentence_batch(model.config, [5, 6, 7], [3, 4])
    cross = torch.ones(model.config.num_decoder_layers, model.config.num_heads)
    cross[:, 0] = 0.0  # every layer's first cross-attention head
    silenced = forced_pass(model, batch, head_mask=HeadMask(cross=cross))
    whole = forced_pass(model, batch)
    assert not torch.allclose(silenced.hidden[-1], whole.hidden[-1])  # the silenced heads changed the output
    T = batch.tgt_in.size(1)
    rows, targets = torch.zeros(T, dtype=torch.long), torch.arange(T)  # every position of sentence 0
    with torch.no_grad():
        expected = model.decode(
            batch.tgt_in, model.encode(batch.src), head_mask=HeadMask(cross=cross)
        ).logits.log_softmax(-1).gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)[0]  # (T,)
        embeddings = silenced.trace.embeddings[rows]  # (T, S, D)
        torch.testing.assert_close(silenced.trace.log_probs(embeddings, rows, targets), expected)


def test_a_full_context_layer_is_read_with_the_whole_target_and_the_rest_of_the_pass_stays_causal():
    """A head trained with full-context alignment is read as it trained: that layer's cross maps, in the
    maps and in the trace every method reads, from ``Transformer.full_context_attention``; the other layers'
    maps, the hidden states and the log-probabilities are the causal pass's."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(num_decoder_layers=2)).eval()
    batch = sentence_batch(model.config, [5, 6, 7, 8], [3, 4, 9])
    causal, full = forced_pass(model, batch), forced_pass(model, batch, full_context=1)
    with torch.no_grad():
        expected = model.full_context_attention(batch.tgt_in, model.encode(batch.src), 1)  # (B, H, T, S)
    torch.testing.assert_close(full.maps["cross"][1], expected)
    assert full.trace.cross[1] is full.maps["cross"][1]
    assert not torch.allclose(full.maps["cross"][1], causal.maps["cross"][1])
    torch.testing.assert_close(full.maps["cross"][0], causal.maps["cross"][0])
    torch.testing.assert_close(full.hidden[-1], causal.hidden[-1])
    with pytest.raises(ValueError, match="a full-context layer is read without head masks"):
        forced_pass(model, batch, full_context=1, head_mask=HeadMask())


def test_a_model_in_training_mode_is_refused():
    model = Transformer(tiny_config())
    with pytest.raises(ValueError, match=r"needs the model in eval mode \(model.eval\(\)\)"):
        sentence_pass(model, [5], [3])


def test_the_logger_the_tab_and_attention_out_show_the_same_maps(tiny_run, tmp_path, capsys, monkeypatch):
    logdir = tiny_run.parent.parent
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    loaded = load_run(checkpoint)
    model, dm = loaded.module.model, loaded.datamodule
    src_tok, tgt_tok = dm.src_tokenizer, dm.tgt_tokenizer
    text = next(p.source for p in dm.pairs("test") if len(p.source.split()) >= 3)
    ((ids, finished),) = translate_hypotheses(model, src_tok, tgt_tok, [text])
    translation = tgt_tok.decode(ids)
    assert finished and tgt_tok.encode(translation) == ids  # so the logger can read it as a reference
    seen = sentence_pass(model, src_tok.encode(text), ids)
    expected, tokens = seen.sentence_maps(), seen.tokens(src_tok, tgt_tok)
    assert tokens.source[-1] == "</s>" and tokens.target_in[0] == "<s>" and tokens.target_out[-1] == "</s>"

    # The tab: a typed sentence, translated and its maps answered.
    client, _ = serve(logdir)
    run = tiny_run.relative_to(logdir).as_posix()
    answer = get(client, f"/translate?run={run}&text={text.replace(' ', '%20')}")
    assert answer["translation"] == translation

    # The logger: the translation as the one validation pair's reference.
    summaries = {}
    def add_summary(summary, step):
        summaries.update({value.tag: value for value in summary.value})

    writer = SimpleNamespace(add_summary=add_summary)
    experiment = SimpleNamespace(add_figure=lambda *args: None, file_writer=writer)
    datamodule = SimpleNamespace(pairs=lambda split: [Pair(text, translation)], src_tokenizer=src_tok,
                                 tgt_tokenizer=tgt_tok, gold_set=lambda: None)
    trainer = SimpleNamespace(logger=SimpleNamespace(experiment=experiment), current_epoch=0,
                              sanity_checking=False, datamodule=datamodule, global_step=3)
    monkeypatch.setattr(loaded.module, "log", lambda *args, **kwargs: None)
    logger = AttentionLogger(num_sentences=1, num_images=0, max_tokens=64, stats_sentences=0,
                             explanation_sentences=0, explain_probes=False)
    logger.on_validation_epoch_end(trainer, loaded.module)
    logged_text = json.loads(tensor_util.make_ndarray(summaries["attention/sentence_0/text"].tensor).item())

    # evaluate.py --attention-out: the head view holds every map.
    code, _, _ = run_evaluate(capsys, "translate", checkpoint, text, "--attention-out", tmp_path / "maps")
    assert code == 0
    parser = HeadViewParser()
    parser.feed((tmp_path / "maps" / "sentence_1" / "head_view.html").read_text(encoding="utf-8"))
    exported = json.loads(parser.scripts[0])

    assert (logged_text["source_tokens"], logged_text["target_in"], logged_text["target_out"]) == tokens
    assert (exported["source"], exported["target"]) == (tokens.source, tokens.target_out)
    for kind in KINDS:
        rows, cols = tokens.axes[kind]
        assert (answer["kinds"][kind]["rows"], answer["kinds"][kind]["cols"]) == (rows, cols)
        assert (exported["kinds"][kind]["queries"], exported["kinds"][kind]["keys"]) == (rows, cols)
        weights = torch.stack(expected[kind])  # (L, H, Tq, Tk)
        # Each place keeps the pass's float32 weights in its own format: rounded JSON, float16 tensors.
        shown, drawn = answer["kinds"][kind]["weights"], exported["kinds"][kind]["layers"]
        torch.testing.assert_close(torch.tensor(shown), weights, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(drawn), weights, atol=5e-5, rtol=0)
        logged = tensor_util.make_ndarray(summaries[f"attention/sentence_0/{kind}"].tensor)
        assert logged.dtype == np.float16
        torch.testing.assert_close(torch.from_numpy(logged.astype(np.float32)), weights, atol=1e-3, rtol=0)
