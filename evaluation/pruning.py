"""Pruning: the heads of lowest importance silenced all together, and what ``--prune-heads`` asks for."""

from collections.abc import Collection, Sequence

from data.pairs import Pair
from data.tokenizer import Tokenizer
from evaluation.ablation import AnalysisError, ablation_losses
from evaluation.head_masks import Head
from evaluation.translate import pair_batches
from model import Transformer


def pruned_loss(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    silenced: Collection[Head],
    *,
    batch_size: int = 64,
) -> float:
    """Teacher-forced NLL per target token on ``pairs`` with the ``silenced`` heads silenced together."""
    batches = pair_batches(pairs, src_tokenizer, tgt_tokenizer, batch_size)
    return ablation_losses(model, batches, [tuple(silenced)], max_rows=batch_size)[0]


def parse_prune_count(text: str) -> int | float:
    """``--prune-heads``: a whole number of heads, or a fraction in (0, 1) of all heads."""
    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number of heads or a fraction in (0, 1), got {text!r}") from None
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ValueError(f"a fraction of heads must be in (0, 1), got {text}")
    if value < 0:
        raise ValueError(f"the number of heads must be at least 0, got {value}")
    return value


def prune_count(value: float, total: int) -> int:
    """How many of ``total`` heads ``--prune-heads value`` means; a fraction rounds to the nearest head."""
    if isinstance(value, float):
        return round(value * total)
    if value > total:
        raise AnalysisError(f"--prune-heads {value}: the model has only {total} heads")
    return value
