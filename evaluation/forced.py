"""The teacher-forced pass: the model reads a source and, forced, a target (a reference, or its own
translation: then the maps are exactly those it used while generating it), and everything a view or an
explanation needs comes back at once.

This is the one place that runs the model to look inside it: the AttentionLogger, the ATTENTION tab's typed
sentences, ``evaluate.py --attention-out``, ``--alignment`` and ``--alignment-methods`` all go through
``forced_pass``, so that they show and score the same maps, labelled alike (``analysis.axes``).

Shape legend: B sentences, L layers, H heads, S source length (EOS included), T target length (BOS read, EOS
produced), D model dim, Dh head dim, V vocabulary size.
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from analysis.axes import KINDS, attention_axes
from analysis.explain.trace import LogProbs, Trace
from data.batching import Batch, check_fits, collate
from data.tokenizer import Tokenizer
from model import DecoderRequest, HeadMask, Transformer, TransformerConfig
from model.attention import project_values
from model.packing import Packing


class SentenceTokens(NamedTuple):
    """The tokens that label one sentence's maps."""

    source: list[str]  # S source tokens, EOS included
    target_in: list[str]  # T tokens the decoder reads, BOS first
    target_out: list[str]  # T tokens the decoder produces, EOS last (unless the hypothesis was cut)

    @property
    def axes(self) -> dict[str, tuple[list[str], list[str]]]:
        """kind -> (row tokens, column tokens)."""
        return attention_axes(self.source, self.target_in, self.target_out)


@dataclass(frozen=True)
class ForcedPass:
    """One teacher-forced pass over a padded batch, in full precision, with the model in eval mode.

    ``trace`` is what every explanation method reads (``analysis.explain``): the cross- and encoder attention,
    the cross-attention's values and output projections, and the source embeddings with the callable that the
    gradient methods differentiate (it runs the model again, with gradients, when they call it).
    """

    batch: Batch  # the ids, on the CPU
    maps: dict[str, list[Tensor]]  # kind (analysis.axes.KINDS) -> per layer (B, H, Tq, Tk), float32
    hidden: tuple[Tensor, ...]  # per decoder layer (B, T, D), before the final norm (logit lens)
    trace: Trace

    def tokens(self, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, sentence: int = 0) -> SentenceTokens:
        """The tokens of one sentence of the batch, padding left out."""
        src_valid, tgt_valid = self.trace.src_valid[sentence].cpu(), self.trace.tgt_valid[sentence].cpu()
        return SentenceTokens(
            src_tokenizer.tokens(self.batch.src[sentence][src_valid].tolist()),
            tgt_tokenizer.tokens(self.batch.tgt_in[sentence][tgt_valid].tolist()),  # at the same positions
            tgt_tokenizer.tokens(self.batch.tgt_out[sentence][tgt_valid].tolist()),
        )

    def sentence_maps(self, sentence: int = 0) -> dict[str, list[Tensor]]:
        """kind -> per layer (H, Tq, Tk) float32 on the CPU: one sentence's maps, padding cut off."""
        S = int(self.trace.src_valid[sentence].sum())
        T = int(self.trace.tgt_valid[sentence].sum())
        size = {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}
        return {kind: [weights[sentence, :, : size[kind][0], : size[kind][1]].cpu() for weights in layers]
                for kind, layers in self.maps.items()}

    def finite(self) -> bool:
        """Whether every attention weight is a finite number (a diverged model's are not)."""
        return all(bool(torch.isfinite(weights).all()) for layers in self.maps.values() for weights in layers)


def sentence_batch(
    config: TransformerConfig, src_ids: list[int], tgt_ids: list[int], *, finished: bool = True,
    where: str = "attention maps",
) -> Batch:
    """One sentence pair (ids without BOS/EOS) as the batch ``forced_pass`` reads.

    ``finished=False`` marks a hypothesis that stopped without generating EOS (cut by a length limit): the
    decoder reads BOS and every generated token but the last, and its rows are the tokens it generated, with
    no ``</s>`` row it never produced. A hypothesis as long as the model's ``max_len`` is always such a one. A
    sentence the model cannot read in its ``max_len`` positions raises a one-line ``CorpusError`` that starts
    with ``where``.
    """
    # Reading the last generated token would predict a token never generated; at max_len it would take one
    # position more than there are.
    capped = bool(tgt_ids) and (not finished or len(tgt_ids) == config.max_len)
    item = (0, src_ids, tgt_ids[:-1] if capped else tgt_ids)
    check_fits([item], config.max_len, lambda index, side: (where, None))
    batch = collate([item], pad_id=config.pad_id, bos_id=config.bos_id, eos_id=config.eos_id)
    if capped:  # the last row produced the last generated token, not EOS
        batch.tgt_out[0, -1] = tgt_ids[-1]
    return batch


def sentence_pass(
    model: Transformer, src_ids: list[int], tgt_ids: list[int], *, finished: bool = True,
    where: str = "attention maps",
) -> ForcedPass:
    """``forced_pass`` over one sentence pair (ids without BOS/EOS): ``sentence_batch``'s batch."""
    return forced_pass(model, sentence_batch(model.config, src_ids, tgt_ids, finished=finished, where=where))


@torch.no_grad()
def forced_pass(
    model: Transformer, batch: Batch, *, head_mask: HeadMask | None = None, full_context: int | None = None
) -> ForcedPass:
    """Run the model teacher-forced over ``batch`` (``data.batching.Batch``); keep what looking inside needs.

    Full precision, whatever autocast is on: the maps are compared and scored. ``head_mask`` silences heads
    (pruning, ablation); the gradient methods' callable runs under it too. The model must be in eval mode:
    maps and explanations of a dropped-out pass would differ from run to run. ``full_context``: a decoder
    layer (from 0) whose cross-attention maps are read with the whole target in view, as a head trained
    with full-context alignment is (``Transformer.full_context_attention``; the layer is
    ``TranslationModule.full_context_layer``): every method that reads that layer's maps reads those; the
    logits and the other layers stay causal.
    """
    if model.training:
        raise ValueError("looking inside a teacher-forced pass needs the model in eval mode (model.eval())")
    if full_context is not None and head_mask is not None:
        raise ValueError("a full-context layer is read without head masks")
    c, device = model.config, model.device
    masks = head_mask if head_mask is not None else HeadMask()
    src, tgt_in, tgt_out = batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)
    with torch.autocast(device.type, enabled=False):
        encoded = model.encode(src, need_weights=True, head_mask=masks.encoder)
        everything = DecoderRequest(weights=True, hidden=True)
        out = model.decode(tgt_in, encoded, head_mask=masks, request=everything)
        values = [project_values(layer.cross_attn, encoded.memory) for layer in model.decoder_layers]
        embeddings = model.src_embed(src)  # (B, S, D)
        cross = list(out.cross_attention)
        if full_context is not None:
            cross[full_context] = model.full_context_attention(tgt_in, encoded, full_context)  # (B, H, T, S)
    maps = dict(zip(KINDS, ([w.float() for w in layers] for layers in
                            (encoded.attention, out.self_attention, cross))))
    src_valid = src != c.pad_id  # (B, S)
    trace = Trace(
        cross=maps["cross"],
        encoder=maps["encoder"],
        src_valid=src_valid,
        tgt_valid=tgt_out != c.pad_id,
        cross_values=values,
        cross_out_weights=[layer.cross_attn.out_proj.weight for layer in model.decoder_layers],
        src_words=src_valid & (src != c.eos_id) & (src != c.bos_id),
        embeddings=embeddings,
        log_probs=_log_probs(model, src, tgt_in, tgt_out, masks),
    )
    return ForcedPass(batch, maps, tuple(out.hidden), trace)


def _log_probs(model: Transformer, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, masks: HeadMask) -> LogProbs:
    """The ``Trace.log_probs`` of a batch: each row's log-probability of its target token at its position,
    given source embeddings."""

    def log_probs(embeddings: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        rows, targets = rows.to(src.device), targets.to(src.device)
        # The decoder is causal: positions after the last one asked for change nothing before it.
        length = int(targets.max()) + 1
        at = torch.nn.functional.one_hot(targets, length).bool()  # (N, T'): each row's one position
        with torch.autocast(src.device.type, enabled=False):  # gradients in full precision, like the maps
            row_masks = HeadMask(*(_rows(mask, rows) for mask in masks))
            encoded = model.encode(src[rows], token_embeddings=embeddings, head_mask=row_masks.encoder)
            logits = model.decode(tgt_in[rows, :length], encoded, head_mask=row_masks,
                                  tokens=Packing.of(at)).logits  # (N, V)
        labels = tgt_out[rows, targets].unsqueeze(-1)  # (N, 1)
        return logits.float().log_softmax(dim=-1).gather(-1, labels).squeeze(-1)  # (N,)

    return log_probs


def _rows(mask: Tensor | None, rows: Tensor) -> Tensor | None:
    """A head mask for the rows: a per-sentence (B, L, H) mask follows them, an (L, H) one holds for all."""
    return mask[rows] if mask is not None and mask.dim() == 3 else mask
