"""Every attention map of one sentence pair, with the tokens that label its rows and columns.

The model reads the source and, teacher-forced, the target (a reference, or its own translation: then the maps
are exactly those it used while generating it). TensorBoard logging, the ATTENTION tab and evaluate.py's
``--attention-out`` all take their maps from here, so they label them alike (``analysis.axes``).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from analysis.axes import KINDS, attention_axes
from data.batching import check_fits, collate
from data.tokenizer import Tokenizer
from model import Transformer


@dataclass
class SentenceAttention:
    source: list[str]  # S source tokens, EOS included
    target_in: list[str]  # T tokens the decoder reads, BOS first
    target_out: list[str]  # T tokens the decoder generates, EOS last
    maps: dict[str, list[Tensor]]  # kind -> per layer (H, Tq, Tk), float32 on the CPU

    @property
    def axes(self) -> dict[str, tuple[list[str], list[str]]]:
        """kind -> (row tokens, column tokens)."""
        return attention_axes(self.source, self.target_in, self.target_out)


@torch.no_grad()
def sentence_attention(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    src_ids: list[int],
    tgt_ids: list[int],
    *,
    finished: bool = True,
    where: str = "attention maps",
) -> SentenceAttention:
    """The maps of every kind, layer and head for one sentence pair (ids without BOS/EOS), in full precision.

    ``finished=False`` marks a hypothesis that stopped without generating EOS (cut by a length limit): its
    rows are the tokens it generated, with no ``</s>`` row it never produced. A hypothesis as long as the
    model's ``max_len`` is always such a one. A sentence the model cannot read in its ``max_len`` positions
    raises a one-line ``CorpusError`` that starts with ``where``.
    """
    config = model.config
    # A hypothesis cut without EOS: the decoder read BOS and every generated token but the last (reading the
    # last would predict a token never generated; at max_len it would take one position more than there are).
    capped = bool(tgt_ids) and (not finished or len(tgt_ids) == config.max_len)
    item = (0, src_ids, tgt_ids[:-1] if capped else tgt_ids)
    check_fits([item], config.max_len, lambda index, side: (where, None))
    batch = collate([item], pad_id=config.pad_id, bos_id=config.bos_id, eos_id=config.eos_id)
    device = model.device
    with torch.autocast(device.type, enabled=False):
        _, maps = model(batch.src.to(device), batch.tgt_in.to(device), return_attention=True)
    return SentenceAttention(
        source=src_tokenizer.tokens(batch.src[0].tolist()),
        target_in=tgt_tokenizer.tokens(batch.tgt_in[0].tolist()),
        target_out=tgt_tokenizer.tokens(tgt_ids if capped else batch.tgt_out[0].tolist()),
        maps={kind: [weights[0].float().cpu() for weights in layers] for kind, layers in zip(KINDS, maps)},
    )
