"""Every attention mask of the model, built in one place.

One convention everywhere: masks are boolean and ``True`` means *may attend* (the convention of
``torch.nn.functional.scaled_dot_product_attention``). Masks broadcast against attention scores of shape
(B, H, Tq, Tk).

Shape legend: B batch, S source length, T target length, Tq query length, Tk key length.
"""

from typing import NamedTuple

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens.

    Args:
        ids: (B, Tk) token ids.
        pad_id: the id of the padding token.

    Returns:
        (B, 1, 1, Tk) boolean, True where the key is not padding.
    """
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, *, device: torch.device | str | None = None) -> Tensor:
    """Each query position may attend to itself and to earlier positions.

    Returns:
        (1, 1, T, T) boolean, lower triangle including the diagonal.
    """
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def decoder_self_mask(tgt_ids: Tensor, pad_id: int) -> Tensor:
    """Causal and padding masks of decoder self-attention combined.

    Args:
        tgt_ids: (B, T) decoder input ids.

    Returns:
        (B, 1, T, T) boolean: query t may attend key k iff k <= t and k is not padding.
    """
    return causal_mask(tgt_ids.size(1), device=tgt_ids.device) & padding_mask(tgt_ids, pad_id)


class KeyMask(NamedTuple):
    """A mask made ready for attention once and shared by every layer that uses it.

    A query with no key to attend would make softmax compute 0/0: ``attend`` lets such a query attend every
    key instead, and ``has_key`` marks the queries that had one, so that attention zeroes the others' output.
    """

    attend: Tensor  # boolean, True = may attend, broadcastable to (B, H, Tq, Tk); no row all False
    has_key: Tensor  # (B|1, 1|H, Tq|1, 1) boolean


def guard_empty_rows(mask: Tensor) -> KeyMask:
    """The ``KeyMask`` of a boolean mask broadcastable to (B, H, Tq, Tk)."""
    has_key = mask.any(dim=-1, keepdim=True)  # (B|1, 1|H, Tq|1, 1)
    return KeyMask(mask | ~has_key, has_key)
