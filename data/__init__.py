"""Everything between files on disk (or a generator) and padded tensor batches. Knows nothing of the model.

``TranslationDataModule`` is imported on first use, so that ``from data.batching import collate`` and the
other plain modules do not load Lightning.
"""

from data.batching import Batch, TokenBucketBatchSampler, collate
from data.corpora import CorpusError, filter_by_length, read_lines, read_parallel, read_scan, read_tsv
from data.pairs import Pair
from data.special import SPECIALS, SpecialTokens
from data.tokenizer import Tokenizer
from data.toy import make_toy_splits, translate

__all__ = [
    "SPECIALS",
    "Batch",
    "CorpusError",
    "Pair",
    "SpecialTokens",
    "TokenBucketBatchSampler",
    "Tokenizer",
    "TranslationDataModule",
    "collate",
    "filter_by_length",
    "make_toy_splits",
    "read_lines",
    "read_parallel",
    "read_scan",
    "read_tsv",
    "translate",
]


def __getattr__(name: str):
    if name == "TranslationDataModule":
        from data.datamodule import TranslationDataModule

        return TranslationDataModule
    raise AttributeError(f"module 'data' has no attribute {name!r}")
