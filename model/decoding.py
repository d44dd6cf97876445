"""Greedy and beam-search decoding with a key/value cache.

Each step feeds only the newest token through the decoder: the self-attention keys/values of earlier positions
and the cross-attention keys/values of the encoder output come from the cache, so a step costs O(current
length) rather than a re-run over the whole prefix.

Shape legend: B batch, K beams, S source length, L generated length, V target vocabulary size.
"""

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from model.cache import DecoderCache
from model.config import TransformerConfig
from model.types import DecoderOutput, DecoderRequest, EncoderOutput, HeadMask


class Decodable(Protocol):
    """What the searches ask of a model (``model.Transformer`` is one): its config, an encoder pass, a decoder
    step against a cache, and an empty cache. Named here, so that this module imports nothing above it."""

    config: TransformerConfig

    def encode(self, src: Tensor, *, head_mask: Tensor | None = None) -> EncoderOutput: ...

    def decode(self, tgt_in: Tensor, encoded: EncoderOutput, *, cache: DecoderCache | None = None,
               head_mask: HeadMask | None = None, request: DecoderRequest = ...) -> DecoderOutput: ...

    def new_cache(self, reserve: int = 16) -> DecoderCache: ...

# The largest beam that train.py and evaluate.py accept. Beams beyond a few dozen do not improve translations,
# and the search holds batch x beam hypotheses (and their key/value caches) at once: a beam of 100000 on a
# validation batch asks for tens of gigabytes.
MAX_BEAM_SIZE = 256
LAST_ONLY = DecoderRequest(last_only=True)  # a step needs the logits of its last position only


@dataclass(frozen=True)
class BeamRows:
    """G consecutive decoder rows per source sentence (its beams), all reading the sentence's one row of
    encoder output: cross-attention projects and caches its keys and values once per sentence, and beam
    search never copies them when it reorders beams (``DecoderCache.reorder``).

    A decoder layer folds the G rows' T queries into the G * T queries of their sentence's row for
    cross-attention, and unfolds the output: the same numbers as attending the keys repeated for each beam.
    Build it with ``BeamRows.of``; the decoder's ``StackContext`` carries it.
    """

    size: int  # G

    @classmethod
    def of(cls, rows: int, sentences: int) -> "BeamRows | None":
        """The grouping of ``rows`` decoder rows over ``sentences`` encoder rows; None when they are equal."""
        if rows == sentences:
            return None
        if sentences == 0 or rows % sentences != 0:
            raise ValueError(f"{rows} decoder rows cannot share {sentences} encoder output rows")
        return cls(rows // sentences)

    def fold(self, x: Tensor) -> Tensor:
        """Queries (B, T, D) of G consecutive rows as G * T queries of one row: (B/G, G*T, D)."""
        return x.unflatten(0, (-1, self.size)).flatten(1, 2)  # (B/G, G*T, D)

    def unfold(self, x: Tensor) -> Tensor:
        """Undo ``fold`` on the attention's output (B/G, G*T, D): (B, T, D)."""
        return x.unflatten(1, (self.size, -1)).flatten(0, 1)  # (B, T, D)

    def unfold_weights(self, weights: Tensor) -> Tensor:
        """Undo ``fold`` on attention weights (B/G, H, G*T, S): (B, H, T, S)."""
        return weights.unflatten(2, (self.size, -1)).transpose(1, 2).flatten(0, 1)  # (B, H, T, S)

    def head_mask(self, multipliers: Tensor | None) -> Tensor | None:
        """Cross-attention head multipliers (H,) as they are, or (B, H) per row as (B/G, H) per sentence: a
        sentence's beams share them, as they share its keys (beam search repeats a sentence's for its beams).
        """
        if multipliers is None or multipliers.dim() == 1:
            return multipliers
        per_sentence = multipliers.unflatten(0, (-1, self.size))  # (B/G, G, H)
        if multipliers.device.type == "cpu":  # checked where it costs no host-device sync
            assert torch.equal(per_sentence, per_sentence[:, :1].expand_as(per_sentence)), (
                "the beams of a sentence have different cross-attention head masks"
            )
        return per_sentence[:, 0]  # (B/G, H)

def _allowed_logits(logits: Tensor, pad_id: int, bos_id: int) -> Tensor:
    """Logits of the next token, (N, V) → a new (N, V) float32 tensor with padding and BOS ruled out: never
    generated. The caller's tensor is left as it is."""
    logits = logits.to(torch.float32, copy=True)
    # Two column fills, not an index list: a list would be copied from the host at every step.
    logits[:, pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return logits


def _finish(tokens: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """Pad every position after a row's first EOS and drop columns that are padding in every row.

    tokens: (B, L) → (B, L') with L' the longest hypothesis, EOS included.
    """
    is_eos = tokens == eos_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # strictly after the first EOS
    tokens = tokens.masked_fill(after_eos, pad_id)
    lengths = (tokens != pad_id).sum(dim=1)
    return tokens[:, : max(int(lengths.max()), 1)]


def _limits(max_len: int | Tensor, batch: int, device: torch.device) -> Tensor:
    """Per-sentence generation limits as a (B,) int64 tensor; one limit for all is checked even when B = 0."""
    limits = torch.as_tensor(max_len, dtype=torch.long, device=device)
    if limits.numel() and int(limits.min()) < 1:
        raise ValueError(f"max_len must be at least 1, got {int(limits.min())}")
    return limits.expand(batch)


@torch.inference_mode()
def greedy_search(
    model: Decodable,
    src: Tensor,
    max_len: int | Tensor,
    *,
    use_cache: bool = True,
    head_mask: HeadMask | None = None,
) -> Tensor:
    """Pick the most probable token at every step (never padding or BOS).

    Args:
        src: (B, S) source ids.
        max_len: most tokens to generate (EOS included), for all sentences or (B,) for each.
        use_cache: False re-runs the decoder over the whole prefix at every step (the slow textbook way, kept
            as the reference the cache is tested and benchmarked against).

    Returns:
        (B, L) tokens after BOS, padded with ``pad_id`` after each row's first EOS; (0, 0) for B = 0.
    """
    c = model.config
    masks = head_mask if head_mask is not None else HeadMask()
    encoded = model.encode(src, head_mask=masks.encoder)
    tokens = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    limits = _limits(max_len, src.size(0), src.device)
    if src.size(0) == 0:
        return src.new_empty((0, 0))  # no sentences: no tokens
    steps = int(limits.max())
    cache = model.new_cache(reserve=steps) if use_cache else None  # BOS and every token but the last
    for step in range(1, steps + 1):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(step_in, encoded, cache=cache, head_mask=masks, request=LAST_ONLY).logits[:, -1]
        # max(...).indices: the same first-maximum index as argmax, and about twice as fast on CPU.
        next_token = _allowed_logits(logits, c.pad_id, c.bos_id).max(dim=-1).indices  # (B,)
        next_token = next_token.masked_fill(finished, c.pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == c.eos_id) | (step >= limits)
        if finished.all():
            break
    return _finish(tokens[:, 1:], c.eos_id, c.pad_id)


def _length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.inference_mode()
def beam_search(
    model: Decodable,
    src: Tensor,
    max_len: int | Tensor,
    beam_size: int,
    length_penalty: float = 0.6,
    *,
    head_mask: HeadMask | None = None,
) -> Tensor:
    """Batched beam search: all sentences and beams advance together, one decoder step per token.

    Every step extends each of the K live beams of a sentence by every token and keeps the 2K best extensions
    by log-probability. Extensions ending in EOS that rank among the best K leave the beam as finished
    hypotheses, scored by log-probability divided by the GNMT length penalty; the best K others live on.
    A sentence is done once no live beam can still beat its best finished hypothesis, the one returned (so it
    may stop before K have finished: what it returns is the same). A sentence that is done leaves the batch,
    so later steps decode only the others; decoding stops when every sentence is done. A sentence that reaches
    its ``max_len`` tokens finishes its live beams as they are.

    Args:
        src: (B, S) source ids.
        max_len: most tokens to generate (EOS included), for all sentences or (B,) for each.
        beam_size: K.
        length_penalty: the GNMT exponent alpha >= 0; 0 ranks by plain log-probability.

    Returns:
        (B, L) the best hypothesis of each sentence, padded with ``pad_id`` after its EOS; (0, 0) for B = 0.
    """
    if not length_penalty >= 0.0:  # NaN too
        # The early stop bounds a live beam's best score by dividing by the penalty of the longest allowed
        # length, the largest penalty only when longer hypotheses are never favoured.
        raise ValueError(f"length_penalty must be at least 0, got {length_penalty}")
    c = model.config
    b, k, device = src.size(0), beam_size, src.device
    masks = head_mask if head_mask is not None else HeadMask()
    # One encoder output per sentence: the K beams of a sentence share its cross-attention keys and values,
    # projected once and never reordered (see BeamRows), while everything else has a row per beam.
    encoded = model.encode(src, head_mask=masks.encoder)
    masks = HeadMask(*(m.repeat_interleave(k, dim=0) if m is not None and m.dim() == 3 else m for m in masks))
    limits = _limits(max_len, b, device)
    if b == 0:
        return src.new_empty((0, 0))  # no sentences: no tokens
    steps = int(limits.max())
    cache = model.new_cache(reserve=steps)  # BOS and every token but the last

    tokens = torch.full((b * k, 1), c.bos_id, dtype=torch.long, device=device)  # (B*K, 1 + steps)
    scores = torch.full((b, k), float("-inf"), device=device)  # live beams' log-probabilities
    scores[:, 0] = 0.0  # all beams start identical: expand only the first at step one
    finished_scores = torch.full((b, k), float("-inf"), device=device)  # length-normalised
    finished_tokens = torch.full((b, k, steps), c.pad_id, dtype=torch.long, device=device)
    beam_offset = (torch.arange(b, device=device) * k)[:, None]  # (B, 1) first flat row of each sentence
    best = torch.full((b, steps), c.pad_id, dtype=torch.long, device=device)  # each sentence's result
    sentence = torch.arange(b, device=device)  # (B,) the input row of each sentence still searching
    rank_ok = torch.arange(2 * k, device=device)[None] < k  # (1, 2K): the best K of the 2K candidates

    for step in range(1, steps + 1):
        logits = model.decode(tokens[:, -1:], encoded, cache=cache, head_mask=masks).logits[:, -1]  # (B*K, V)
        log_probs = _allowed_logits(logits, c.pad_id, c.bos_id).log_softmax(dim=-1)
        vocab = log_probs.size(-1)
        candidates = (scores.view(b * k, 1) + log_probs).view(b, k * vocab)  # (B, K*V)
        top_scores, top_ids = candidates.topk(2 * k, dim=1)  # (B, 2K), best first
        origin, token = top_ids // vocab, top_ids % vocab  # beam each candidate extends, and its new token
        history = tokens.view(b, k, -1)[:, :, 1:].gather(1, origin[..., None].expand(-1, -1, step - 1))
        candidate_tokens = torch.cat([history, token[..., None]], dim=2)  # (B, 2K, step)

        # Finished hypotheses: EOS among the best K candidates (every sentence in the batch still searches),
        # and at a sentence's last allowed step its best K candidates as they are.
        is_eos = token == c.eos_id
        out_of_room = (step >= limits)[:, None]  # (B, 1)
        new_finished = rank_ok & (is_eos | out_of_room)  # (B, 2K)
        normalised = top_scores / _length_penalty(float(step), length_penalty)  # a host number: no copy
        pool_scores = torch.cat(
            [finished_scores, normalised.masked_fill(~new_finished, float("-inf"))], dim=1
        )
        padded = torch.full((b, 2 * k, steps), c.pad_id, dtype=torch.long, device=device)
        padded[:, :, :step] = candidate_tokens
        pool_tokens = torch.cat([finished_tokens, padded], dim=1)  # (B, 3K, steps)
        finished_scores, keep = pool_scores.topk(k, dim=1)
        finished_tokens = pool_tokens.gather(1, keep[..., None].expand(-1, -1, steps))

        # Live beams: the best K candidates that did not end in EOS (at least K of the 2K never do).
        live_scores = top_scores.masked_fill(is_eos, float("-inf"))
        scores, live = live_scores.topk(k, dim=1)  # (B, K)
        live_origin = origin.gather(1, live)
        live_token = token.gather(1, live)

        # Done when the best live beam, even if it never lost another bit of log-probability, could not beat
        # the best finished hypothesis at the longest allowed length: that hypothesis is the one returned.
        best_possible = scores[:, 0] / _length_penalty(limits.float(), length_penalty)
        done = (finished_scores[:, 0] > float("-inf")) & (best_possible <= finished_scores[:, 0])
        done |= step >= limits  # (B,)
        # Their best hypotheses are final: set them aside (rows not done keep theirs), decode only the others.
        best[sentence] = torch.where(done[:, None], finished_tokens[:, 0], best[sentence])
        # The step's one host decision: which sentences go on (one sync, as the batch's shape depends on it).
        keep = (~done).nonzero().squeeze(1)  # (B',) rows of the sentences still searching
        if keep.numel() == 0:
            break
        if keep.numel() < b:
            sentence, limits, scores = sentence[keep], limits[keep], scores[keep]
            finished_scores, finished_tokens = finished_scores[keep], finished_tokens[keep]
            live_origin, live_token = live_origin[keep], live_token[keep]
            beam_rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)  # (B'*K,)
            tokens = tokens.index_select(0, beam_rows)
            encoded = EncoderOutput(encoded.memory[keep], encoded.src_attend[keep], [])
            masks = HeadMask(*(m[beam_rows] if m is not None and m.dim() == 3 else m for m in masks))
            cache.keep_sentences(keep, k)
            b = keep.numel()
            beam_offset = beam_offset[:b]

        flat_origin = (beam_offset + live_origin).view(-1)  # (B*K,)
        cache.reorder(flat_origin)
        tokens = torch.cat([tokens.index_select(0, flat_origin), live_token.view(-1, 1)], dim=1)

    return _finish(best, c.eos_id, c.pad_id)
