"""What ``evaluate.py score`` and ``evaluate.py explain`` compute on a split or a ``--tsv`` file: the scores
of its translations (with pruned heads silenced, and the cross-attention alignment of ``--alignment``), and
the explanation methods' report. Each function takes plain values and returns what evaluate.py prints; nothing
here prints, shows progress or draws.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from data.batching import check_fits
from data.corpora import read_tsv
from data.pairs import Pair
from evaluation.alignment import cross_attention_alignment, one_token_per_word
from evaluation.explanation_report import AlignmentMethodsReport, Explaining, alignment_methods_report
from evaluation.gold_report import data_gold, gold_report
from evaluation.head_masks import Head, head_mask
from evaluation.pruning import pruned_loss
from evaluation.result import scored_result
from evaluation.translate import Decoding, translate
from training.checkpoints import LoadedRun


@dataclass(frozen=True)
class Data:
    """The pairs to read: a split of the run's data, or a file of source<TAB>reference lines."""

    split: str = "test"
    tsv: str | None = None

    @property
    def name(self) -> str:
        """As the result records it: the file, or the split."""
        return self.tsv or self.split

    @property
    def stem(self) -> str:
        """As the analysis files are named after it."""
        return Path(self.tsv).stem if self.tsv else self.split


def read_pairs(run: LoadedRun, data: Data) -> list[Pair]:
    """The pairs of ``data``, read as the run reads its data."""
    return run.datamodule.read_pairs(read_tsv(data.tsv)) if data.tsv else run.datamodule.pairs(data.split)


def check_lengths(run: LoadedRun, pairs: list[Pair], data: Data, *, targets: bool) -> None:
    """Stop at the first pair the model cannot read, naming its file and line. Its reference counts only with
    ``targets`` (the head analyses read it teacher-forced); scoring compares references as text."""
    dm, max_len = run.datamodule, run.module.model.config.max_len
    if not data.tsv:
        dm.check_fits(max_len, (data.split,), targets=targets)
        return
    sources = dm.src_tokenizer.encode_batch([p.source for p in pairs])
    references = dm.tgt_tokenizer.encode_batch([p.target for p in pairs]) if targets else [[] for _ in pairs]
    check_fits(list(zip(range(len(pairs)), sources, references)), max_len, lambda i, side: (data.tsv, i + 1))


def score(
    run: LoadedRun,
    pairs: list[Pair],
    decoding: Decoding,
    *,
    tokenize: str,
    device: torch.device,
    silenced: list[Head] | None = None,
    alignment: bool = False,
    sentences: bool = False,
    progress: Callable[[int], object] | None = None,
) -> tuple[dict, list[dict]]:
    """The scores of the translations of ``pairs`` (``evaluation.result.scored_result``) and, with
    ``sentences``, each sentence's. ``silenced``: the pruned heads (possibly none), silenced while
    translating, and the loss per target token so pruned; ``alignment``: the cross-attention heads' AER
    against the data's gold links. ``progress`` is called with the sentences translated."""
    dm, model = run.datamodule, run.module.model
    added: dict = {}
    if silenced is not None:
        added["nll_per_token"] = pruned_loss(
            model, dm.src_tokenizer, dm.tgt_tokenizer, pairs, silenced, batch_size=decoding.batch_size
        )
    mask = head_mask(model.config, silenced, device=device) if silenced else None
    start = time.perf_counter()
    hypotheses_ids = translate(model, dm.src_tokenizer, dm.tgt_tokenizer, [p.source for p in pairs],
                               **decoding.options(), head_mask=mask, progress=progress)
    seconds = time.perf_counter() - start
    result, each = scored_result(run, pairs, hypotheses_ids, tokenize=tokenize, decoding=decoding,
                                 seconds=seconds, device=str(device), sentences=sentences)
    if alignment:
        report = cross_attention_alignment(model, dm.src_tokenizer, dm.tgt_tokenizer, pairs,
                                           batch_size=decoding.batch_size, silenced=silenced or [])
        added["alignment"] = report.as_dict()
    return {**result, **added, "engine": "pytorch"}, each


def explain_pairs(
    run: LoadedRun,
    pairs: list[Pair],
    data: Data,
    options: Explaining,
    *,
    about: dict,
    progress: Callable[[int], object] | None = None,
) -> AlignmentMethodsReport:
    """Every explanation method in ``options`` scored against the gold links of ``pairs`` (a split's or a
    --tsv file's): on their tokens, or where the words the links index are not tokens (the Han-script toy),
    on their words, as a gold set is (``evaluation.gold_report``). The result starts with ``about``;
    ``progress`` is called with the pairs done. The report's figures are the caller's to draw."""
    dm = run.datamodule
    if pairs and all(p.alignment is not None for p in pairs) and not one_token_per_word(
        pairs, dm.src_tokenizer, dm.tgt_tokenizer
    ):  # gold links of words written without spaces (the Han-script toy): scored on words, as gold sets are
        return gold_report(run, data_gold(pairs, data.stem), options, about=about, progress=progress)
    return alignment_methods_report(run, pairs, data.stem, options, about=about, progress=progress)
