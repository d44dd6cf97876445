"""The data module: lazy tokenizers, batches that map back to their pairs, save/restore, the real corpora."""

import logging
import os
from pathlib import Path

import pytest
import torch

from data.batching import Batch
from data.datamodule import TranslationDataModule
from data.pairs import Pair
from data.special import SPECIALS
from data.tokenizer import Tokenizer

CORPORA = Path(
    os.environ.get("CORPORA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "corpora")
)
MULTI30K = CORPORA / "multi30k"
SCAN = CORPORA / "scan"
SMALL = {"toy_train_size": 400, "toy_val_size": 40, "toy_test_size": 40}


def small(**kwargs) -> TranslationDataModule:
    return TranslationDataModule(**{**SMALL, "max_tokens": 256, **kwargs})


def test_ids_and_vocab_sizes_work_right_after_init():
    dm = small()
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id)
    src_vocab_size, tgt_vocab_size = dm.src_vocab_size, dm.tgt_vocab_size  # before anything else is built
    source_words = {w for p in dm.pairs("train") for w in p.source.split()}
    target_words = {w for p in dm.pairs("train") for w in p.target.split()}
    assert src_vocab_size == len(source_words) + len(SPECIALS.tokens)
    assert tgt_vocab_size == len(target_words) + len(SPECIALS.tokens)
    assert dm.hparams["dataset"] == "toy" and dm.hparams["toy_train_size"] == 400


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_batches_decode_back_to_the_pairs_they_index(split):
    dm = small()
    pairs = dm.pairs(split)
    loader = dm.dataloader(split, shuffle=split == "train")
    seen = []
    for batch in loader:
        assert isinstance(batch, Batch) and all(t.dtype == torch.int64 for t in batch)
        for row, index in enumerate(batch.index.tolist()):
            pair = pairs[index]
            assert dm.src_tokenizer.decode(batch.src[row].tolist()) == pair.source
            assert dm.tgt_tokenizer.decode(batch.tgt_out[row].tolist()) == pair.target
            n = len(pair.source.split())  # word level: token i is word i, so alignments index tokens
            assert batch.src[row, n] == SPECIALS.eos_id
            seen.append(index)
    assert sorted(seen) == list(range(len(pairs)))


def test_train_batches_are_shuffled_reproducibly_and_eval_batches_sorted():
    first = [b.index.tolist() for b in small().train_dataloader()]
    again = [b.index.tolist() for b in small().train_dataloader()]
    other = [b.index.tolist() for b in small(seed=5).train_dataloader()]
    assert first == again and first != other
    dm = small()
    src_lengths = [b.src.shape[1] for b in dm.val_dataloader()]
    assert len(src_lengths) > 1 and src_lengths == sorted(src_lengths)


def test_loader_settings_suit_the_machine():
    loader = small(num_workers=0).train_dataloader()
    assert loader.pin_memory == torch.cuda.is_available()
    assert (loader.num_workers, loader.persistent_workers) == (0, False)
    loader = small(num_workers=1).val_dataloader()
    assert (loader.num_workers, loader.persistent_workers) == (1, True)
    assert sum(b.index.numel() for b in loader) == SMALL["toy_val_size"]


def test_eval_max_tokens_sets_the_size_of_eval_batches():
    dm = small(eval_max_tokens=1024)
    assert len(dm.val_dataloader()) < len(dm.dataloader("val", max_tokens=256))


def test_long_training_pairs_are_dropped_and_counted(caplog):
    full = small()
    lengths = [len(p.source.split()) + 1 for p in full.pairs("train")]  # toy: both sides have equal length
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            dm = small(max_train_len=10)
            kept = dm.pairs("train")
    finally:
        logger.removeHandler(caplog.handler)
    dropped = sum(n > 10 for n in lengths)
    assert 0 < dropped < len(lengths)
    assert len(kept) == len(lengths) - dropped
    assert all(len(p.source.split()) + 1 <= 10 for p in kept)
    assert f"Dropped {dropped} of 400 training pairs longer than max_train_len=10 tokens." in caplog.text
    assert len(dm.pairs("val")) == SMALL["toy_val_size"]  # evaluation keeps every pair


def test_state_dict_restores_the_tokenizers_without_retraining(monkeypatch, tmp_path):
    trained = small(dataset="reverse")
    state = trained.state_dict()
    assert set(state) == {"src_tokenizer", "tgt_tokenizer"}
    trained.save_tokenizers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src_tokenizer.json", "tgt_tokenizer.json"]

    def no_training(*args, **kwargs):
        raise AssertionError("tokenizers were retrained")

    monkeypatch.setattr(Tokenizer, "train", no_training)
    from_state = small(dataset="reverse")
    from_state.load_state_dict(state)
    from_files = small(dataset="reverse")
    from_files.load_tokenizers(tmp_path)
    from_arg = small(dataset="reverse", tokenizer_dir=str(tmp_path))
    for restored in (from_state, from_files, from_arg):
        assert restored.state_dict() == state
        batch = next(iter(restored.test_dataloader()))
        source = restored.pairs("test")[batch.index[0]].source
        assert restored.src_tokenizer.decode(batch.src[0].tolist()) == source


def test_shared_vocab_uses_one_tokenizer_for_both_sides():
    dm = small(dataset="copy", shared_vocab=True)
    assert dm.src_tokenizer is dm.tgt_tokenizer
    assert dm.src_vocab_size == 26 + len(SPECIALS.tokens)


def test_dataloader_for_pairs_indexes_the_given_pairs():
    dm = small()
    pairs = [Pair("the cat slept", "lo kato dorma"), Pair("two dogs ran", "hundi du kuran")]
    batches = list(dm.dataloader_for_pairs(pairs))
    rows = {i: (b.src[r], b.tgt_out[r]) for b in batches for r, i in enumerate(b.index.tolist())}
    assert [dm.tgt_tokenizer.decode(rows[i][1].tolist()) for i in range(2)] == [p.target for p in pairs]


def test_tsv_dataset_reads_the_folder(tmp_path):
    for split, n in (("train", 30), ("val", 3), ("test", 3), ("extra", 2)):
        lines = [f"ein satz {i} {split}\ta sentence {i} {split}" for i in range(n)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = TranslationDataModule(dataset="tsv", path=str(tmp_path), vocab_size=60, max_tokens=256)
    assert dm.tokenizer_kind == "bpe" and dm.src_tokenizer.kind == "bpe"
    assert [len(dm.pairs(s)) for s in ("train", "val", "test")] == [30, 3, 3]
    other = TranslationDataModule(dataset="tsv", path=str(tmp_path), test_split="extra", max_tokens=256)
    assert other.pairs("test")[1] == Pair("ein satz 1 extra", "a sentence 1 extra")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "wmt"}, "dataset must be toy, copy, reverse, multi30k, tsv or scan, got 'wmt'"),
        ({"dataset": "multi30k"}, "dataset='multi30k' reads files: give the corpus folder as path"),
        ({"tokenizer": "chars"}, "tokenizer must be word, bpe, unigram or None, got 'chars'"),
        (
            {"max_tokens": 64, "max_train_len": 128},
            "max_tokens=64 and eval_max_tokens=None must be >= max_train_len=128",
        ),
        ({"num_workers": -1}, "num_workers must be >= 0, got -1"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TranslationDataModule(**kwargs)


def test_unknown_split_and_missing_corpus_are_named(tmp_path):
    with pytest.raises(ValueError, match="split must be one of .*, got 'dev'"):
        small().pairs("dev")  # type: ignore[arg-type]
    dm = TranslationDataModule(dataset="multi30k", path=str(tmp_path))
    with pytest.raises(ValueError, match=f"{tmp_path / 'train.de'}: no such file"):
        _ = dm.src_vocab_size


# --- The real corpora, when present -------------------------------------------------------------------------


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found in {MULTI30K} (set CORPORA_DIR)")
def test_multi30k_bucketed_epoch_wastes_under_10_percent_on_padding():
    dm = TranslationDataModule(dataset="multi30k", path=str(MULTI30K))
    assert [len(dm.pairs(s)) for s in ("train", "val", "test")] == [29000, 1014, 1000]
    assert dm.src_vocab_size == dm.tgt_vocab_size == 8000
    pad = total = examples = 0
    for batch in dm.train_dataloader():
        for ids in (batch.src, batch.tgt_out):
            pad += (ids == SPECIALS.pad_id).sum().item()
            total += ids.numel()
        examples += batch.index.numel()
        assert batch.src.numel() <= dm.max_tokens and batch.tgt_out.numel() <= dm.max_tokens
    waste = pad / total
    print(f"Multi30k train epoch: {waste:.1%} of {total} source+target token positions are padding")
    assert examples == 29000
    assert waste < 0.10


@pytest.mark.skipif(not SCAN.is_dir(), reason=f"SCAN not found in {SCAN} (set CORPORA_DIR)")
def test_scan_holds_out_a_seeded_validation_set():
    dm = TranslationDataModule(dataset="scan", path=str(SCAN))
    sizes = [len(dm.pairs(s)) for s in ("train", "val", "test")]
    assert sizes == [16728 - 836, 836, 4182]
    assert not {p.source for p in dm.pairs("val")} & {p.source for p in dm.pairs("train")}
    assert dm.src_tokenizer.kind == "word" and dm.src_vocab_size == 13 + len(SPECIALS.tokens)
    assert dm.pairs("val") == TranslationDataModule(dataset="scan", path=str(SCAN)).pairs("val")
