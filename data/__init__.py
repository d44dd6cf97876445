"""Everything between files on disk (or a generator) and padded tensor batches. Knows nothing of the model."""

from data.batching import Batch, TokenBucketBatchSampler, collate
from data.corpora import CorpusError, filter_by_length, read_lines, read_parallel, read_scan, read_tsv
from data.datamodule import TranslationDataModule
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
