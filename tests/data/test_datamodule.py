"""The data module: lazy tokenizers, batches that map back to their pairs, save/restore, the real corpora."""

import gzip
import logging
import multiprocessing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from data import batching
from data.batching import Batch, choose_num_workers, choose_pin_memory
from data.corpora import CorpusError
from data.datamodule import TranslationDataModule
from data.gold import GoldFiles
from data.pairs import Pair
from data.reader import ToyOptions
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from tests.conftest import CORPORA

MULTI30K = CORPORA / "multi30k"
SCAN = CORPORA / "scan"
SMALL = ToyOptions(train_size=400, val_size=40, test_size=40)


def small(**kwargs) -> TranslationDataModule:
    return TranslationDataModule(**{"toy": SMALL, "max_tokens": 256, **kwargs})


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def tsv_folder(folder: Path, train: list[str]) -> str:
    """A tsv corpus folder with the given training lines and two-line val and test files."""
    write_lines(folder / "train.tsv", train)
    for split in ("val", "test"):
        write_lines(folder / f"{split}.tsv", [f"ein {split}\ta {split}", f"zwei {split}\ttwo {split}"])
    return str(folder)


def test_ids_and_vocab_sizes_work_right_after_init():
    dm = small()
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id)
    src_vocab_size, tgt_vocab_size = dm.src_vocab_size, dm.tgt_vocab_size  # before anything else is built
    source_words = {w for p in dm.pairs("train") for w in p.source.split()}
    target_words = {w for p in dm.pairs("train") for w in p.target.split()}
    assert src_vocab_size == len(source_words) + len(SPECIALS.tokens)
    assert tgt_vocab_size == len(target_words) + len(SPECIALS.tokens)
    assert dm.hparams["dataset"] == "toy" and dm.hparams["toy"]["train_size"] == 400  # a plain mapping


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_batches_decode_back_to_the_pairs_they_index(split):
    dm = small()
    pairs = dm.pairs(split)
    loader = dm.dataloader(split, shuffle=split == "train")
    seen = []
    for batch in loader:
        assert isinstance(batch, Batch) and all(t.dtype == torch.int64 for t in batch[:-1])
        assert batch.alignment is None
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
    assert not loader.pin_memory  # no Trainer on a GPU: batches stay where they are
    assert (loader.num_workers, loader.persistent_workers) == (0, False)
    loader = small(num_workers=1).val_dataloader()
    assert (loader.num_workers, loader.persistent_workers) == (1, True)
    assert sum(b.index.numel() for b in loader) == SMALL.val_size


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
    assert len(dm.pairs("val")) == SMALL.val_size  # evaluation keeps every pair


def test_a_pair_is_as_long_as_its_longer_side(tmp_path):
    # Padded lengths (source + EOS, BOS + target): 2, 6 (long source), 6 (long target), 3.
    train = ["a\tb", "a b c d e\tf", "g\th i j k l", "m n\to p"]
    dm = TranslationDataModule(
        dataset="tsv", path=tsv_folder(tmp_path, train), tokenizer="word", max_train_len=5, max_tokens=256
    )
    assert dm.pairs("train") == [Pair("a", "b"), Pair("m n", "o p")]


def test_train_batches_index_the_pairs_left_after_filtering():
    dm = small(max_train_len=10)
    pairs = dm.pairs("train")
    assert len(pairs) < SMALL.train_size
    seen = []
    for batch in dm.train_dataloader():
        for row, index in enumerate(batch.index.tolist()):
            assert dm.src_tokenizer.decode(batch.src[row].tolist()) == pairs[index].source
            assert dm.tgt_tokenizer.decode(batch.tgt_out[row].tolist()) == pairs[index].target
            seen.append(index)
    assert sorted(seen) == list(range(len(pairs)))


def test_long_eval_pairs_are_kept_with_a_warning():
    dm = small(max_train_len=10)
    too_long = sum(len(p.source.split()) + 1 > 10 for p in dm.pairs("val"))
    assert too_long > 0
    message = f"{too_long} val pairs are longer than max_train_len=10 tokens; they are kept."
    with pytest.warns(UserWarning, match=message):
        loader = dm.val_dataloader()
    assert sum(b.index.numel() for b in loader) == SMALL.val_size


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


def test_restored_tokenizers_trained_otherwise_than_the_settings_say_are_refused(tmp_path):
    folder = tsv_folder(tmp_path / "corpus", ["ein Hund.\ta dog.", "zwei Katzen!\ttwo cats!"] * 20)
    subwords = {"dataset": "tsv", "path": folder, "vocab_size": 60, "max_tokens": 256}
    plain = TranslationDataModule(**subwords)
    plain.save_tokenizers(tmp_path / "plain")
    assert plain.src_tokenizer.pre_tokenization == ("whitespace", False)
    split = TranslationDataModule(**subwords, split_punctuation=True, shared_vocab=True)
    split.save_tokenizers(tmp_path / "split")
    assert split.tgt_tokenizer.pre_tokenization == ("whitespace", True)

    same = TranslationDataModule(**subwords, split_punctuation=True, shared_vocab=True,
                                 tokenizer_dir=str(tmp_path / "split"))
    assert same.src_tokenizer.to_json() == split.src_tokenizer.to_json()  # as trained: restored
    refused = [
        ({"split_punctuation": True}, "plain",
         "split_punctuation=True but .*src_tokenizer.json was trained with split_punctuation=False"),
        ({"pre_tokenize": "cjk"}, "plain",
         "pre_tokenize=cjk but .* was trained with pre_tokenize=whitespace"),
        ({"tokenizer": "unigram"}, "plain", "tokenizer=unigram but .* was trained with tokenizer=bpe"),
        ({"shared_vocab": True, "split_punctuation": False}, "plain",
         "shared_vocab is true but .* hold two vocabularies"),
        ({"dataset": "toy", "path": None}, "plain", "tokenizer=word but .* was trained with tokenizer=bpe"),
    ]  # fmt: skip
    for settings, trained, message in refused:
        data = TranslationDataModule(**subwords | settings, tokenizer_dir=str(tmp_path / trained))
        with pytest.raises(ValueError, match=message):
            _ = data.src_tokenizer  # restored when first asked for


def test_restored_tokenizers_keep_source_and_target_apart(tmp_path):
    trained = small()
    assert trained.src_tokenizer.to_json() != trained.tgt_tokenizer.to_json()
    trained.save_tokenizers(tmp_path)
    from_state, from_files = small(seed=5), small(seed=5)
    from_state.load_state_dict(trained.state_dict())
    from_files.load_tokenizers(tmp_path)
    for restored in (from_state, from_files):
        assert restored.src_tokenizer.to_json() == trained.src_tokenizer.to_json()
        assert restored.tgt_tokenizer.to_json() == trained.tgt_tokenizer.to_json()


def test_new_tokenizers_replace_the_splits_encoded_with_the_old_ones():
    dm = small()
    list(dm.val_dataloader())  # encodes val with the tokenizers trained on this data
    dm.load_state_dict(small(seed=5).state_dict())
    assert dm.src_tokenizer.encode("the cat slept") != small().src_tokenizer.encode("the cat slept")
    for batch in dm.val_dataloader():
        for row, index in enumerate(batch.index.tolist()):
            assert dm.src_tokenizer.decode(batch.src[row].tolist()) == dm.pairs("val")[index].source


def test_shared_vocab_uses_one_tokenizer_for_both_sides():
    dm = small(dataset="copy", shared_vocab=True)
    assert dm.src_tokenizer is dm.tgt_tokenizer
    assert dm.src_vocab_size == 26 + len(SPECIALS.tokens)
    dm = small(shared_vocab=True)  # toy: the two sides have no word in common
    words = {w for p in dm.pairs("train") for w in f"{p.source} {p.target}".split()}
    assert dm.src_vocab_size == dm.tgt_vocab_size == len(words) + len(SPECIALS.tokens)


def test_dataloader_for_pairs_indexes_the_given_pairs():
    dm = small()
    pairs = [Pair("the cat slept", "lo kato dorma"), Pair("two dogs ran", "hundi du kuran")]
    batches = list(dm.dataloader_for_pairs(pairs))
    rows = {i: (b.src[r], b.tgt_out[r]) for b in batches for r, i in enumerate(b.index.tolist())}
    assert [dm.tgt_tokenizer.decode(rows[i][1].tolist()) for i in range(2)] == [p.target for p in pairs]


def test_dataloader_for_pairs_batches_like_the_eval_loader():
    dm = small(eval_max_tokens=1024)
    from_pairs = [b.index.tolist() for b in dm.dataloader_for_pairs(dm.pairs("val"))]
    assert from_pairs == [b.index.tolist() for b in dm.val_dataloader()]


def test_seed_alone_changes_the_order_of_training_batches(tmp_path):
    folder = tsv_folder(tmp_path, [f"satz {i}\tsentence {i}" for i in range(40)])

    def order(seed: int) -> list[list[int]]:
        dm = TranslationDataModule(
            dataset="tsv", path=folder, tokenizer="word", max_train_len=4, max_tokens=12, seed=seed
        )
        return [b.index.tolist() for b in dm.train_dataloader()]

    assert order(1) == order(1) != order(2)


@pytest.mark.parametrize(
    "device, cores, processes, workers",
    [
        ("cpu", 16, 1, 0),  # the model's threads need every core
        ("cpu", 2, 2, 0),
        ("mps", 8, 1, 0),
        ("cuda", 16, 1, 4),  # at most 4
        ("cuda", 3, 1, 2),  # one core left for the training process
        ("cuda", 1, 1, 0),
        ("cuda", 16, 8, 1),  # 8 GPU processes share 16 cores: 2 each
        ("cuda", 4, 8, 0),
    ],
)
def test_auto_workers_follow_the_device_and_the_cores(device, cores, processes, workers):
    assert choose_num_workers(device, cores, processes) == workers


def test_pinned_memory_only_for_cuda():
    assert choose_pin_memory("cuda") and not choose_pin_memory("cpu") and not choose_pin_memory("mps")


def attach_trainer(dm: TranslationDataModule, device: str, processes: int = 1) -> TranslationDataModule:
    dm.trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device), num_processes=processes)
    )
    return dm


def test_auto_loader_settings_follow_the_trainers_device(monkeypatch):
    monkeypatch.setattr(batching, "available_cores", lambda: 8)
    assert small().num_workers == "auto"  # the default
    cpu = attach_trainer(small(), "cpu").train_dataloader()
    assert (cpu.num_workers, cpu.pin_memory) == (0, False)
    cuda = attach_trainer(small(), "cuda").train_dataloader()  # built, not iterated: no GPU needed
    assert (cuda.num_workers, cuda.pin_memory, cuda.persistent_workers) == (4, True, True)
    two = attach_trainer(small(), "cuda", processes=2).val_dataloader()
    assert two.num_workers == 3
    chosen = attach_trainer(small(num_workers=1), "cuda").train_dataloader()  # --data.num_workers 1 wins
    assert (chosen.num_workers, chosen.pin_memory) == (1, True)
    chosen = attach_trainer(small(num_workers=2), "cpu").train_dataloader()
    assert (chosen.num_workers, chosen.pin_memory) == (2, False)


def test_the_test_split_defaults_to_the_datasets_own(tmp_path):
    import yaml

    folder = tsv_folder(tmp_path / "tsv", [f"ein {i}\ta {i}" for i in range(5)])
    assert TranslationDataModule(dataset="tsv", path=folder).pairs("test")[0] == Pair("ein test", "a test")
    # The Multi30k recipe's data settings on a TSV corpus read its test.tsv (it once asked for test2016.tsv).
    recipe = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "configs" / "multi30k.yaml").read_text()
    )["data"]
    dm = TranslationDataModule(**{**recipe, "dataset": "tsv", "path": folder})
    assert dm.pairs("test")[1] == Pair("zwei test", "two test")
    for name in ("train", "val", "test2016"):
        write_lines(tmp_path / "m30k" / f"{name}.de", [f"ein {name}"])
        write_lines(tmp_path / "m30k" / f"{name}.en", [f"one {name}"])
    multi30k = TranslationDataModule(dataset="multi30k", path=str(tmp_path / "m30k"))
    assert multi30k.pairs("test") == [Pair("ein test2016", "one test2016")]


def test_a_missing_named_tsv_test_split_says_which_option_to_change(tmp_path):
    folder = tsv_folder(tmp_path, ["ein\ta"])
    dm = TranslationDataModule(dataset="tsv", path=folder, test_split="test2016")
    with pytest.raises(CorpusError) as error:
        dm.pairs("test")
    assert str(error.value) == (
        f"{tmp_path / 'test2016.tsv'}: no such file (test_split='test2016'; pass --data.test_split NAME to "
        "read NAME.tsv, or null for test.tsv)"
    )


def test_tsv_dataset_reads_the_folder(tmp_path):
    for split, n in (("train", 30), ("val", 3), ("test", 3), ("extra", 2)):
        lines = [f"ein satz {i} {split}\ta sentence {i} {split}" for i in range(n)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = TranslationDataModule(dataset="tsv", path=str(tmp_path), vocab_size=60, max_tokens=256)
    assert dm.tokenizer_kind == "bpe" and dm.src_tokenizer.kind == "bpe"
    assert [len(dm.pairs(s)) for s in ("train", "val", "test")] == [30, 3, 3]
    other = TranslationDataModule(dataset="tsv", path=str(tmp_path), test_split="extra", max_tokens=256)
    assert other.pairs("test")[1] == Pair("ein satz 1 extra", "a sentence 1 extra")


def test_split_punctuation_reaches_the_subword_tokenizers(tmp_path):
    for split, n in (("train", 30), ("val", 3), ("test", 3)):
        lines = [f"ein satz {i}, gut.\ta sentence {i}, good." for i in range(n)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    folder = str(tmp_path)
    split = TranslationDataModule(dataset="tsv", path=folder, vocab_size=60, split_punctuation=True)
    joined = TranslationDataModule(dataset="tsv", path=folder, vocab_size=60)
    tokens = split.tgt_tokenizer.tokens(split.tgt_tokenizer.encode("a sentence 3, good."))
    assert tokens[-1] == "." and "," in tokens
    assert joined.tgt_tokenizer.tokens(joined.tgt_tokenizer.encode("a sentence 3, good."))[-1] != "."
    for batch in split.val_dataloader():
        for row, index in enumerate(batch.index.tolist()):
            assert split.tgt_tokenizer.decode(batch.tgt_out[row].tolist()) == split.pairs("val")[index].target


def test_multi30k_dataset_reads_either_direction_and_test_means_test2016(tmp_path):
    for name in ("train", "val", "test2016", "test2017"):
        write_lines(tmp_path / f"{name}.de", [f"ein {name} satz", f"zwei {name} saetze"])
        write_lines(tmp_path / f"{name}.en", [f"one {name} sentence", f"two {name} sentences"])
    de_en = TranslationDataModule(dataset="multi30k", path=str(tmp_path))
    assert de_en.tokenizer_kind == "bpe"
    assert de_en.pairs("test")[1] == Pair("zwei test2016 saetze", "two test2016 sentences")
    en_de = TranslationDataModule(
        dataset="multi30k", path=str(tmp_path), source_lang="en", target_lang="de", test_split="test2017"
    )
    assert en_de.pairs("val")[0] == Pair("one val sentence", "ein val satz")
    assert en_de.pairs("test")[0] == Pair("one test2017 sentence", "ein test2017 satz")


def test_parallel_dataset_reads_gzipped_files_and_a_named_val_split(tmp_path):
    for name in ("train", "dev", "test"):
        write_lines(tmp_path / f"{name}.ja.gz", [f"{name} の 文", f"{name} の 二"])
        write_lines(tmp_path / f"{name}.en.gz", [f"the {name} sentence", f"{name} two"])
    data = TranslationDataModule(
        dataset="parallel", path=str(tmp_path), source_lang="ja", target_lang="en", val_split="dev"
    )
    assert data.tokenizer_kind == "bpe"
    assert data.pairs("val")[1] == Pair("dev の 二", "dev two")
    assert data.pairs("test")[0] == Pair("test の 文", "the test sentence")
    assert data.origin("val", 1) == (str(tmp_path / "dev.ja.gz"), 2)
    refused = "val_split is an option of dataset multi30k, parallel, tsv only; 'toy' has none"
    with pytest.raises(ValueError, match=refused):
        TranslationDataModule(dataset="toy", val_split="dev")


def test_training_pairs_that_repeat_a_gold_sentence_pair_are_dropped(tmp_path, caplog):
    train = ["概要\tSummary", "沿革\tHistory", "概要\tSummary", "京都 の 寺\tA temple in Kyoto"]
    folder = tsv_folder(tmp_path / "corpus", train)
    # The gold set segments and cases its sentences otherwise: compared without spaces and case.
    write_lines(tmp_path / "gold.txt", ["概 要 ||| summary", "京都 の 寺 ||| a temple in kyoto ."])
    data = TranslationDataModule(
        dataset="tsv", path=folder, tokenizer="word", gold=GoldFiles(sentences=str(tmp_path / "gold.txt"))
    )
    with caplog.at_level(logging.INFO):
        kept = data.pairs("train")
    assert kept == [Pair("沿革", "History"), Pair("京都 の 寺", "A temple in Kyoto")]
    assert "Dropped 2 training pairs that repeat a sentence pair of" in caplog.text
    # Messages still name the line each kept pair was read from.
    assert data._train_index == [1, 3]


def scan_folder(folder: Path, n_train: int) -> str:
    """A SCAN folder with the simple split: a plain training file and a gzipped test file."""
    train = [f"IN: jump {i} OUT: I_JUMP" for i in range(n_train)]
    write_lines(folder / "simple_split" / "tasks_train_simple.txt", train)
    write_lines(folder / "simple_split" / "tasks_test_simple.txt.gz", ["IN: walk OUT: I_WALK"])
    return str(folder)


def test_scan_holds_out_5_percent_of_train_as_val_chosen_by_the_seed(tmp_path):
    folder = scan_folder(tmp_path, 40)
    dm = TranslationDataModule(dataset="scan", path=folder, seed=1)
    assert dm.tokenizer_kind == "word"
    train, val = dm.pairs("train"), dm.pairs("val")
    assert (len(train), len(val), dm.pairs("test")) == (38, 2, [Pair("walk", "I_WALK")])
    assert sorted(p.source for p in train + val) == sorted(f"jump {i}" for i in range(40))
    assert val == TranslationDataModule(dataset="scan", path=folder, seed=1).pairs("val")
    assert val != TranslationDataModule(dataset="scan", path=folder, seed=2).pairs("val")


def test_scan_holds_out_at_least_one_pair(tmp_path):
    dm = TranslationDataModule(dataset="scan", path=scan_folder(tmp_path, 9))  # 5% of 9 rounds to 0
    assert (len(dm.pairs("train")), len(dm.pairs("val"))) == (8, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"dataset": "wmt"},
            "dataset must be one of toy, copy, reverse, multi30k, parallel, tsv, tatoeba, scan; got 'wmt'",
        ),
        ({"dataset": "multi30k"}, "dataset='multi30k' reads files: give the corpus folder as path"),
        ({"tokenizer": "chars"}, "tokenizer must be word, bpe, unigram or None, got 'chars'"),
        (
            {"max_tokens": 64, "max_train_len": 128},
            "max_tokens=64 and eval_max_tokens=None must be >= max_train_len=128",
        ),
        ({"num_workers": -1}, "num_workers must be 'auto' or an integer >= 0, got -1"),
        ({"max_train_len": 1}, r"max_train_len must be >= 2 \(a token plus BOS/EOS\), got 1"),
        (
            {"eval_max_tokens": 64, "max_train_len": 128},
            "max_tokens=4096 and eval_max_tokens=64 must be >= max_train_len=128",
        ),
        (
            {"split_punctuation": True},
            "split_punctuation needs tokenizer bpe or unigram; the tokenizer is word",
        ),
        ({"held_out_pairs": 500}, "held_out_pairs is an option of dataset tatoeba only; 'toy' has none"),
        (
            {"toy": {"phenomena": True}, "dataset": "copy"},
            "toy.phenomena is an option of dataset toy only; 'copy' has none",
        ),
        ({"toy": {"script": "han"}, "dataset": "reverse"}, "toy.script is an option of dataset toy only"),
        ({"gold": {"zero_based": True}}, "gold.zero_based reads the links of gold.alignments, which is not"),
        (
            {"gold": {"sentences": "gold.txt", "direction": "reversed"}},
            "gold.direction=reversed reads the links of gold.alignments, which is not given",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    groups = {"toy": ToyOptions, "gold": GoldFiles}  # built inside: GoldFiles refuses its own
    with pytest.raises(ValueError, match=message):
        TranslationDataModule(**{k: groups[k](**v) if k in groups else v for k, v in kwargs.items()})


def test_batch_budgets_equal_to_max_train_len_are_enough():
    dm = TranslationDataModule(max_train_len=128, max_tokens=128, eval_max_tokens=128)
    assert (dm.max_tokens, dm.eval_max_tokens) == (128, 128)


def test_unknown_split_and_missing_corpus_are_named(tmp_path):
    with pytest.raises(ValueError, match="split must be one of .*, got 'dev'"):
        small().pairs("dev")  # type: ignore[arg-type]
    dm = TranslationDataModule(dataset="multi30k", path=str(tmp_path))
    with pytest.raises(ValueError, match=f"{tmp_path / 'train.de'}: no such file"):
        _ = dm.src_vocab_size


def in_child(function, *, give_up_after: float):
    """``function()``'s return value, computed in a forked child process that is killed if it is still running
    after ``give_up_after`` seconds: a guard that turns a hang into a failure, not a timing."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=lambda: send.send(function()))
    child.start()
    answered = receive.poll(give_up_after)
    child.kill()
    child.join()
    assert answered, f"still running after {give_up_after} s"
    return receive.recv()


def test_a_two_million_character_word_is_refused_before_subword_training(tmp_path):
    # The BPE trainer's time grows with the square of a word's length: this word alone would take hours.
    tsv_folder(tmp_path, ["ein Hund\ta dog", f"{'x' * 2_000_000}\tword"])
    dm = TranslationDataModule(dataset="tsv", path=str(tmp_path), tokenizer="bpe", vocab_size=60)

    def error_message() -> str:
        with pytest.raises(CorpusError) as error:
            _ = dm.src_vocab_size
        return str(error.value)

    assert in_child(error_message, give_up_after=30) == (
        f"{tmp_path / 'train.tsv'}:2: a 2000000-character word; words longer than 1000 characters are not "
        "supported (subword training slows down with the square of a word's length): split or remove it"
    )


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


# --- sentences longer than the model's max_len ------------------------------------------------------------


def test_every_pair_knows_the_file_and_line_it_was_read_from(tmp_path):
    """The origin named in messages holds the pair: in tsv, in both multi30k files, and in SCAN's hold-out."""
    tsv = tmp_path / "tsv"
    for split in ("train", "val", "test"):
        write_lines(tsv / f"{split}.tsv", [f"ein {split} {i}\ta {split} {i}" for i in range(5)])
    m30k = tmp_path / "m30k"
    for name in ("train", "val", "test2016"):
        write_lines(m30k / f"{name}.de", [f"ein {name} {i}" for i in range(5)])
        write_lines(m30k / f"{name}.en", [f"one {name} {i}" for i in range(5)])
    modules = [
        TranslationDataModule(dataset="tsv", path=str(tsv)),
        TranslationDataModule(dataset="multi30k", path=str(m30k)),
        TranslationDataModule(dataset="scan", path=scan_folder(tmp_path / "scan", 60), seed=3),
    ]
    for dm in modules:
        for split in ("train", "val", "test"):
            for index, pair in enumerate(dm.pairs(split)):
                for side, text in (("source", pair.source), ("target", pair.target)):
                    path, line = dm.origin(split, index, side)
                    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
                        held = f.read().splitlines()[line - 1]
                    expected = {"tsv": f"{pair.source}\t{pair.target}", "multi30k": text,
                                "scan": f"IN: {pair.source} OUT: {pair.target}"}[dm.dataset]
                    assert held == expected, (dm.dataset, split, index, side)
    assert small().origin("val", 6) == ("toy val pair 7", None)


def test_the_first_pair_too_long_for_the_model_is_named_with_its_file_and_line(tmp_path):
    from data.corpora import CorpusError

    write_lines(tmp_path / "train.tsv", [
        "a b c d e f g h i j\tx",  # 11 positions: dropped by max_train_len
        "a b\tx y",
        "a b c d e f\tx",  # 7 positions: kept by max_train_len, one more than max_len
    ])
    write_lines(tmp_path / "val.tsv", ["a\tx", "a b c d e\tx", "a b c d e f\tx"])
    write_lines(tmp_path / "test.tsv", ["a\tx y z w v u t", "a\tx"])
    dm = TranslationDataModule(dataset="tsv", path=str(tmp_path), tokenizer="word", max_train_len=8)
    with pytest.raises(CorpusError) as error:
        dm.check_fits(6)
    assert str(error.value) == (
        f"{tmp_path / 'train.tsv'}:3: source has 6 tokens, 7 with EOS, longer than the model's max_len 6; "
        "lower max_train_len to drop such training pairs"
    )
    with pytest.raises(CorpusError, match=r"val.tsv:3: source has 6 tokens, 7 with EOS, .* max_len 6$"):
        dm.check_fits(6, ("val", "test"))
    with pytest.raises(CorpusError, match=r"test.tsv:1: target has 7 tokens, 8 with BOS, .* max_len 7$"):
        dm.check_fits(7, ("val", "test"))
    dm.check_fits(7, ("val", "test"), targets=False)  # the sources alone fit
    dm.check_fits(8)


def test_a_named_gold_set_is_read_once_in_the_model_direction(tmp_path, caplog):
    folder = tsv_folder(tmp_path / "corpus", ["概要\tSummary", "沿革\tHistory"])
    write_lines(tmp_path / "ja-en.src-tgt", ["概 要 ||| summary", "京都 の 寺 ||| a temple in kyoto ."])
    write_lines(tmp_path / "ja-en.gold", ["1-1 2-1", "1-4 2p3 3-2 9-9"])
    data = TranslationDataModule(
        dataset="tsv", path=folder, tokenizer="word", source_lang="en", target_lang="ja",
        gold=GoldFiles(sentences=str(tmp_path / "ja-en.src-tgt"), alignments=str(tmp_path / "ja-en.gold")),
    )
    with caplog.at_level(logging.INFO):
        gold = data.gold_set()
    assert data.gold_set() is gold and gold.dropped == 1
    assert gold.pairs[1].source == "a temple in kyoto ." and gold.pairs[1].alignment == ((3, 0), (1, 2))
    assert "dropped 1 past the end of their sentence (lines 2); direction reversed: ja-en.gold" in caplog.text
    assert data.pairs("train") == [Pair("沿革", "History")]  # "Summary" repeats gold pair 1
    assert TranslationDataModule(dataset="toy").gold_set() is None
    with pytest.raises(ValueError, match="gold.alignments needs gold.sentences"):
        GoldFiles(alignments="gold.txt")


def test_a_bad_gold_links_file_stops_before_training(tmp_path):
    folder = tsv_folder(tmp_path / "corpus", ["概要\tSummary", "沿革\tHistory"])
    write_lines(tmp_path / "gold.txt", ["概 要 ||| summary"])
    write_lines(tmp_path / "links.txt", ["1-1 x"])
    data = TranslationDataModule(dataset="tsv", path=folder, tokenizer="word",
                                 gold=GoldFiles(str(tmp_path / "gold.txt"), str(tmp_path / "links.txt")))
    with pytest.raises(CorpusError, match=r"links\.txt:1: link 'x' is not i-j"):
        data.pairs("train")
