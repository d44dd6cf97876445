"""The LightningDataModule: from a dataset name (and folder) to bucketed, padded batches.

Everything is built lazily and once: the splits are read (or generated) on first use, the tokenizers are
trained on the training split on first use (or restored from a run), and each split is tokenized once and
cached. So ``src_vocab_size`` and friends work right after ``__init__``, which is when LightningCLI links them
into the model's config.
"""

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from data.alignment_labels import AlignedPairs, TrainingLinks, collate_aligned, encode_token_links
from data.batching import Item, bucketed_loader, check_batching, check_fits, collate, training_device
from data.encoded import EncodedPairs, Side
from data.gold import GoldFiles, GoldSet, as_trained
from data.pairs import Pair
from data.reader import SPLITS, CorpusOptions, SplitName, TextSide, ToyOptions
from data.registry import DatasetName, open_corpus
from data.scripts import (
    ChineseScript,
    PreTokenize,
    check_chinese_script,
    chinese_converter,
    chinese_sides_of,
    converted_fields,
    saved_chinese_sides,
)
from data.special import SPECIALS
from data.tokenizer import Tokenizer, TokenizerKind, tokenizer_from_json
from data.vocabulary import TokenizerSettings


class TranslationDataModule(L.LightningDataModule):
    """Train/val/test data for translation, from the built-in toy tasks or a parallel corpus on disk.

    Args:
        dataset: a name of ``data.registry.CORPORA``: ``toy`` (the built-in toy translation task, no files
            needed), ``copy`` or ``reverse`` (toy sanity tasks), ``multi30k`` and ``parallel`` (line-aligned
            files ``<split>.<lang>``), ``tsv`` (``<split>.tsv``), ``tatoeba`` (one ManyThings.org file) or
            ``scan``. Each is read by its reader, whose docstring says what it reads of the options below.
        path: the corpus folder (for tatoeba the file); required by every dataset that reads files.
        source_lang: the source language (multi30k, parallel: its file extension); ``None``: the reader's
            choice (tatoeba: from the file's name; else ``de``).
        target_lang: the target language, as ``source_lang`` (default ``en``).
        val_split: multi30k, parallel, tsv: the name of the validation files (``dev`` for KFTT's
            ``dev.ja.gz``); ``None``: ``val``.
        test_split: which files are the test split; ``None``: the dataset's own (``test2016`` for multi30k).
            Ignored by the toy tasks and scan; refused by tatoeba, which holds its test pairs out.
        scan_split: scan: ``simple`` or ``length`` (SCAN's own splits).
        toy: the toy tasks' sizes, split and variants (``data.reader.ToyOptions``): ``--data.toy.train_size``.
        held_out_pairs: tatoeba only: about this many pairs each for val and for test, drawn with ``seed``.
        seed: seeds the toy generator, the SCAN and Tatoeba hold-outs and the shuffling of batches.
        tokenizer: ``word``, ``bpe`` or ``unigram``; ``None``: the reader's choice, ``word`` for toy, copy,
            reverse and scan, ``bpe`` for multi30k, parallel, tsv, tatoeba and toy with ``toy.script=han``.
        pre_tokenize: subword tokenizers: ``cjk`` makes each Han and Kana character a piece of its own before
            subwords are learnt, ``whitespace`` only splits at spaces; ``None`` picks ``cjk`` for a side
            written in Chinese or Japanese characters (``data.scripts.text_handling``), else ``whitespace``.
            Chinese, Japanese and Korean text is NFC-normalised (full-width punctuation kept), other text
            NFKC.
        chinese_script: ``simplified`` or ``traditional``: convert the Chinese side of every split into that
            script with OpenCC (``pip install -e .[cjk]``) as it is read, so that 頭髮 and 头发 are one word
            to the model and to BLEU; ``None`` (the default) keeps the text as it is.
        vocab_size: the largest vocabulary of each tokenizer, special tokens included.
        split_punctuation: subword tokenizers: make each punctuation character a piece of its own before
            learning subwords (``dog.`` becomes ``▁dog`` and ``.``).
        shared_vocab: train one tokenizer on both sides instead of one per language.
        max_train_len: training pairs whose source + EOS or BOS + target exceeds this many tokens are dropped
            (the count is reported). Val and test keep every pair, so scores cover the whole split.
        max_tokens: token budget of a training batch (batch size times longest padded sequence).
        eval_max_tokens: token budget of a val/test batch; ``None`` means ``max_tokens``.
        num_workers: data loader worker processes; 0 loads in the main process. ``"auto"``: 0 when training
            on the CPU (the model needs every core; workers would take them), ``min(4, cores - 1)`` per
            process on a CUDA GPU (``choose_num_workers``). Page-locked (pinned) memory is used only
            with CUDA.
        tokenizer_dir: a folder holding ``src_tokenizer.json`` and ``tgt_tokenizer.json`` from an earlier run:
            restore those instead of training new ones (trained as ``tokenizer``, ``pre_tokenize``,
            ``split_punctuation`` and ``shared_vocab`` say, or refused: ``load_tokenizers``).
        gold: a gold alignment set kept out of training, on which explanations are scored
            (``data.gold.GoldFiles``): ``--data.gold.sentences`` and ``--data.gold.alignments``.
        alignment_labels: guided alignment's word links (``data.alignment_labels``), for the head that
            ``--model.alignment_layer`` and ``--model.alignment_head`` name: a file of one Pharaoh line a
            training pair, counted from 0, in the training files' order (as eflomal or fast_align write
            them); or ``eflomal``: made by eflomal (``pip install eflomal``) on the training pairs only, one
            direction (each target word linked to at most one source word), cached beside the run's
            tokenizers and reused by a run whose ``tokenizer_dir`` holds them. ``None``: no labels.
    """

    def __init__(
        self,
        *,
        dataset: DatasetName = "toy",
        path: str | None = None,
        source_lang: str | None = None,
        target_lang: str | None = None,
        test_split: str | None = None,
        val_split: str | None = None,
        scan_split: str = "simple",
        toy: ToyOptions = ToyOptions(),
        held_out_pairs: int = 1000,
        seed: int = 1234,
        tokenizer: TokenizerKind | None = None,
        vocab_size: int = 8000,
        split_punctuation: bool = False,
        pre_tokenize: PreTokenize | None = None,
        chinese_script: ChineseScript | None = None,
        shared_vocab: bool = False,
        max_train_len: int = 128,
        max_tokens: int = 4096,
        eval_max_tokens: int | None = None,
        num_workers: int | Literal["auto"] = "auto",
        tokenizer_dir: str | None = None,
        gold: GoldFiles = GoldFiles(),
        alignment_labels: str | None = None,
    ) -> None:
        super().__init__()
        corpus = CorpusOptions(
            path=path, source_lang=source_lang, target_lang=target_lang, val_split=val_split,
            test_split=test_split, scan_split=scan_split, held_out_pairs=held_out_pairs, seed=seed, toy=toy,
        )
        self._reader = open_corpus(dataset, corpus)  # checks the dataset's options
        check_batching(max_train_len, max_tokens, eval_max_tokens, num_workers)
        self.save_hyperparameters()
        # As resolved, not as typed (LightningCLI saves those): a checkpoint names its languages even when the
        # file's name gave them, and loads so whatever the file is called then. The option groups as plain
        # mappings, so that a checkpoint loads with torch's weights_only=True (training.checkpoints).
        self.source_lang, self.target_lang = self._reader.source_lang, self._reader.target_lang
        self.hparams.update(source_lang=self.source_lang, target_lang=self.target_lang,
                            toy=dataclasses.asdict(toy), gold=dataclasses.asdict(gold))
        self.dataset, self.path, self.seed = dataset, path, seed
        kind = tokenizer or self._reader.tokenizer
        self._reader.check_tokenizer(kind)
        self._vocabulary = TokenizerSettings(kind, vocab_size, split_punctuation, pre_tokenize, shared_vocab)
        self.tokenizer_kind: TokenizerKind = self._vocabulary.kind
        check_chinese_script(chinese_script)
        self.pre_tokenize = pre_tokenize
        self.chinese_script = chinese_script
        self._chinese_sides: tuple[TextSide, ...] | None = None  # decided from the training text, once
        self.vocab_size, self.shared_vocab = vocab_size, shared_vocab
        self.split_punctuation = split_punctuation
        self.max_train_len, self.max_tokens = max_train_len, max_tokens
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.num_workers, self.tokenizer_dir = num_workers, tokenizer_dir
        self.gold = gold
        self._gold: GoldSet | None = None
        self.alignment_labels = alignment_labels
        self._links = None if alignment_labels is None else TrainingLinks(alignment_labels, tokenizer_dir,
                                                                          rank_zero_info)
        self._train_links: Side | None = None  # each kept training pair's token links, flat

        self._raw: dict[str, list[Pair]] | None = None  # the splits as read; train before length filtering
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None  # (source, target)
        self._train_pairs: list[Pair] | None = None  # train after length filtering
        self._train_index: list[int] = []  # each kept training pair's index among all training pairs
        self._encoded: dict[str, EncodedPairs] = {}

    # --- Special ids and vocabularies: what the model config links to -------------------------------------

    @property
    def pad_id(self) -> int:
        return SPECIALS.pad_id

    @property
    def bos_id(self) -> int:
        return SPECIALS.bos_id

    @property
    def eos_id(self) -> int:
        return SPECIALS.eos_id

    @property
    def src_tokenizer(self) -> Tokenizer:
        """The source tokenizer; trained on the training split (or restored) on first access."""
        return self._ensure_tokenizers()[0]

    @property
    def tgt_tokenizer(self) -> Tokenizer:
        """The target tokenizer; with ``shared_vocab``, the same vocabulary as ``src_tokenizer``."""
        return self._ensure_tokenizers()[1]

    @property
    def src_vocab_size(self) -> int:
        return self.src_tokenizer.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt_tokenizer.vocab_size

    # --- Pairs --------------------------------------------------------------------------------------------

    def pairs(self, split: SplitName) -> list[Pair]:
        """The pairs of a split, in ``Batch.index`` order; train lacks the pairs over ``max_train_len``."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if split == "train":
            self._ensure_train()
            assert self._train_pairs is not None
            return self._train_pairs
        return self._raw_splits()[split]

    def _raw_splits(self) -> dict[str, list[Pair]]:
        if self._raw is None:
            raw = self._reader.read()
            if self.chinese_script is not None:
                if self._chinese_sides is None:
                    self._chinese_sides = chinese_sides_of(raw["train"], self.chinese_script, rank_zero_warn)
                raw = {split: self.read_pairs(pairs) for split, pairs in raw.items()}
            self._raw = raw
        return self._raw

    # --- Text read as the data is read: typed, scored, or a split ------------------------------------------

    @property
    def chinese_sides(self) -> tuple[TextSide, ...]:
        """The sides written in ``chinese_script``: those whose training text is Chinese, decided once from
        the training pairs as read (a run loaded from a checkpoint has them from there: ``load_state_dict``).
        """
        if self.chinese_script is None:
            return ()
        if self._chinese_sides is None:
            self._raw_splits()
        assert self._chinese_sides is not None
        return self._chinese_sides

    def read_text(self, text: str, side: TextSide = "source") -> str:
        """``text`` as this run reads its data's ``side``: written in ``chinese_script`` where the run writes
        that side in it (OpenCC), as every split, gold set, typed and scored sentence is. The side's tokenizer
        then normalises and splits it as it did the data."""
        if side not in self.chinese_sides:
            return text
        return chinese_converter(self.chinese_script)(text)

    def read_pairs(self, pairs: Sequence[Pair]) -> list[Pair]:
        """``pairs`` (a split, a file to score, a gold set) with both sides read by :meth:`read_text`, each
        word of a pair that lists its words read in context."""
        sides = self.chinese_sides
        return [dataclasses.replace(p, **converted_fields(p, sides, self.read_text)) if sides else p
                for p in pairs]

    def unknown_spans(self, text: str, side: TextSide = "source") -> list[tuple[int, int]]:
        """The ``[start, end)`` characters of ``text`` (as read: :meth:`read_text`) that the side's tokenizer
        reads as ``<unk>``, one span per unknown token, in order."""
        tokenizer = self.src_tokenizer if side == "source" else self.tgt_tokenizer
        ids, spans = tokenizer.encode_spans(text)
        return [span for token, span in zip(ids, spans, strict=True) if token == SPECIALS.unk_id]

    def origin(self, split: SplitName, index: int, side: TextSide = "source") -> tuple[str, int | None]:
        """Where pair ``index`` of a split was read, for messages: (file, line), or a description and None for
        the generated toy tasks. Training indices count all training pairs, before length filtering."""
        self._raw_splits()  # the reader knows where each pair came from once it has read them
        return self._reader.origin(split, index, side)

    def check_fits(self, max_len: int, splits: Sequence[SplitName] = SPLITS, *, targets: bool = True) -> None:
        """Raise a ``CorpusError`` naming the first pair of ``splits`` that a model of ``max_len`` positions
        cannot read: source + EOS, or (with ``targets``) BOS + target, longer than ``max_len``."""
        for split in splits:
            encoded = self._encoded_split(split)
            # positions each pair needs: its source + EOS, or the longer of that and BOS + its target
            needed = encoded.source.lengths() + 1 if not targets else encoded.lengths()
            items: list[Item] = []
            if np.any(needed > max_len):  # the first such pair, whose message check_fits writes
                first = int(np.argmax(needed > max_len))
                _, source, target = encoded[first]
                # the training pairs indexed as read, so that the message names the right line
                index = self._train_index[first] if split == "train" else first
                items = [(index, source, target if targets else [])]
            hint = "; lower max_train_len to drop such training pairs" if split == "train" else ""
            check_fits(items, max_len, lambda index, side, split=split: self.origin(split, index, side), hint)

    # --- Tokenizers ---------------------------------------------------------------------------------------

    def _ensure_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        if self._tokenizers is None:
            if self.tokenizer_dir is not None:
                self.load_tokenizers(self.tokenizer_dir)
            else:
                self._set_tokenizers(*self._train_tokenizers())
        assert self._tokenizers is not None
        return self._tokenizers

    def _train_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        train = self._raw_splits()["train"]
        return self._vocabulary.train([p.source for p in train], [p.target for p in train], rank_zero_info)

    def use_tokenizers(self, src: Tokenizer, tgt: Tokenizer) -> None:
        """Use these tokenizers (or objects with ``Tokenizer``'s interface, such as an imported model's)."""
        self._set_tokenizers(src, tgt)

    def use_gold(self, gold: GoldSet) -> None:
        """Use this gold set, already read, in the model's direction, and reported by whoever read it
        (``evaluate.py make-run``), as ``gold_set``'s instead of reading ``gold.alignments`` again."""
        self._gold = gold

    def _set_tokenizers(self, src: Tokenizer, tgt: Tokenizer) -> None:
        """Install tokenizers and forget everything computed with the previous ones."""
        self._tokenizers = (src, tgt)
        self._train_pairs = None
        self._encoded = {}
        self._train_links = None

    def state_dict(self) -> dict[str, Any]:
        """The tokenizers as JSON strings and, with ``chinese_script``, the sides it converts (so that a run
        whose data is gone reads text as it read its data); Lightning stores this in every checkpoint."""
        src, tgt = self._ensure_tokenizers()
        state = {"src_tokenizer": src.to_json(), "tgt_tokenizer": tgt.to_json()}
        if self.chinese_script is not None:
            state["chinese_sides"] = list(self.chinese_sides)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the tokenizers of :meth:`state_dict` (no retraining): trained here, or an imported model's
        (``data.tokenizer.tokenizer_from_json``); and the sides ``chinese_script`` converts. A checkpoint
        saved before they were recorded has them read off the vocabularies, learnt from the converted text.

        Raises:
            ValueError: ``chinese_sides`` is not a list of ``source`` and ``target``.
        """
        tokenizers = [tokenizer_from_json(state_dict[name]) for name in ("src_tokenizer", "tgt_tokenizer")]
        self._set_tokenizers(*tokenizers)
        vocabularies = (tok.tokens(range(tok.vocab_size)) for tok in tokenizers)  # read only where needed
        self._chinese_sides = saved_chinese_sides(state_dict.get("chinese_sides"), self.chinese_script,
                                                  vocabularies)

    def save_tokenizers(self, directory: str | os.PathLike[str]) -> None:
        """Write ``src_tokenizer.json`` and ``tgt_tokenizer.json`` into ``directory`` (created if needed)."""
        TokenizerSettings.save(directory, *self._ensure_tokenizers())
        if self._links is not None:  # eflomal's, beside them, for a run that restores them to reuse
            self._links.save(directory)

    def load_tokenizers(self, directory: str | os.PathLike[str]) -> None:
        """Restore the tokenizers written by :meth:`save_tokenizers` (no retraining); ValueError where they
        were trained otherwise than the settings say (``data.vocabulary.TokenizerSettings.restore``)."""
        self._set_tokenizers(*self._vocabulary.restore(directory))

    def setup(self, stage: str | None = None) -> None:
        """Make every process of a distributed run use rank 0's tokenizers; everything else is lazy.

        Each process builds its tokenizers when the model is configured, before the processes know of each
        other; training is reproducible for word and BPE but not for unigram, so rank 0's copy is kept.
        """
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed and torch.distributed.get_world_size() > 1:
            state = [self.state_dict()]
            torch.distributed.broadcast_object_list(state, src=0)
            self.load_state_dict(state[0])

    # --- Tokenized splits ---------------------------------------------------------------------------------

    def _encode(self, pairs: list[Pair]) -> EncodedPairs:
        return EncodedPairs.encode(pairs, *self._ensure_tokenizers())

    def _ensure_train(self) -> None:
        if self._train_pairs is not None:
            return
        raw = self._raw_splits()["train"]
        index = self.gold.not_repeated(raw, rank_zero_info)
        self.gold_set()  # a bad gold file stops the run here, not at its first validation
        encoded = self._encode([raw[i] for i in index])
        kept = np.flatnonzero(encoded.lengths() <= self.max_train_len)
        dropped = len(encoded) - len(kept)
        if dropped:
            rank_zero_info(
                f"Dropped {dropped} of {len(raw)} training pairs longer than "
                f"max_train_len={self.max_train_len} tokens."
            )
        self._train_index = [index[i] for i in kept.tolist()]
        self._train_pairs = [raw[i] for i in self._train_index]
        self._encoded["train"] = encoded if not dropped else encoded.select(kept)
        if self._links is not None:
            self._train_links = encode_token_links(
                self._train_pairs, self._links.of(raw, index, self._train_index), self._encoded["train"],
                *self._ensure_tokenizers(),
            )

    def gold_set(self) -> GoldSet | None:
        """The gold alignment set of ``gold.sentences`` and ``gold.alignments``, its sides in the model's
        direction; None without ``gold.alignments``. Read once; what it dropped and its direction are
        reported then.

        Raises:
            CorpusError: a file is unreadable or malformed (the message names the file and line).
        """
        if self.gold.alignments is None:
            return None
        if self._gold is None and (found := self.gold.read(self.source_lang, self.target_lang)):
            gold, why = found
            gold = dataclasses.replace(gold, pairs=self.read_pairs(gold.pairs))
            # Each side as the run's own test or validation split writes the same sentence, as evaluate.py
            # reads it, so that training and evaluate.py score one reading (data.gold.as_trained).
            gold, read = as_trained(gold, self.pairs("test") + self.pairs("val"))
            rank_zero_info(f"{gold.summary()}; direction {why}; {read}")
            self._gold = gold
        return self._gold

    def _encoded_split(self, split: SplitName) -> EncodedPairs:
        if split == "train":
            self._ensure_train()
        elif split not in self._encoded:
            self._encoded[split] = self._encode(self.pairs(split))
            too_long = int((self._encoded[split].lengths() > self.max_train_len).sum())
            if too_long:
                rank_zero_warn(
                    f"{too_long} {split} pairs are longer than max_train_len={self.max_train_len} tokens; "
                    "they are kept."
                )
        return self._encoded[split]

    # --- Data loaders -------------------------------------------------------------------------------------

    def dataloader(
        self, split: SplitName, *, shuffle: bool = False, max_tokens: int | None = None
    ) -> DataLoader:
        """Batches of a split: shuffled and bucketed, or (``shuffle=False``) sorted by length.

        ``max_tokens`` defaults to the module's ``max_tokens`` for train and ``eval_max_tokens`` otherwise.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        default = self.max_tokens if split == "train" else self.eval_max_tokens
        items = self._encoded_split(split)
        if split == "train" and self._train_links is not None:  # guided alignment's labels
            items = AlignedPairs(items, self._train_links)
        return self._loader(items, shuffle=shuffle, max_tokens=max_tokens or default)

    def dataloader_for_pairs(self, pairs: list[Pair], *, max_tokens: int | None = None) -> DataLoader:
        """Unshuffled batches of any pairs (an extra test file, say); ``Batch.index`` indexes ``pairs``."""
        return self._loader(self._encode(pairs), shuffle=False, max_tokens=max_tokens or self.eval_max_tokens)

    def _loader(self, items: EncodedPairs | AlignedPairs, *, shuffle: bool, max_tokens: int) -> DataLoader:
        device_type, processes = training_device(getattr(self, "trainer", None))
        collate_fn = collate_aligned if isinstance(items, AlignedPairs) else collate
        return bucketed_loader(items, collate_fn, shuffle=shuffle, max_tokens=max_tokens, seed=self.seed,
                               device_type=device_type, processes=processes, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self.dataloader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self.dataloader("test")
