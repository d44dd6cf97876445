"""The baseline model: the PyTorch translation tutorial's ``Seq2SeqTransformer`` on ``nn.Transformer``.

Kept as the tutorial writes it (post-LN ``nn.Transformer``, float masks with True = ignore, the tutorial's own
embeddings and positions), so that ``bench/speed.py`` and ``bench/multi30k_baseline.py`` compare this project
with what a learner would start from. Its masks follow PyTorch's polarity (True = ignore), not this project's.
"""

import math
from typing import Protocol

import torch
from torch import Tensor, nn

from data.special import SPECIALS

PAD = SPECIALS.pad_id  # the tutorial model uses this project's special ids


class Sizes(Protocol):
    """What the model reads from a config (``bench.speed_common.BenchConfig`` has it)."""

    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    dropout: float
    vocab_size: int


class PositionalEncoding(nn.Module):
    """The tutorial's sinusoidal encoding, added to the embeddings, followed by dropout."""

    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(0))  # (1, maxlen, D), batch first

    def forward(self, token_embedding: Tensor) -> Tensor:
        return self.dropout(token_embedding + self.pos_embedding[:, : token_embedding.size(1)])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor) -> Tensor:
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class TutorialSeq2Seq(nn.Module):
    """The tutorial's ``Seq2SeqTransformer`` on ``nn.Transformer`` (post-LN), its ``create_mask`` folded in.

    The only change is ``batch_first=True``, so that both models take the same (B, S) and (B, T) batches.
    """

    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.num_heads,
            num_encoder_layers=cfg.num_layers,
            num_decoder_layers=cfg.num_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
        )
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.src_tok_emb = TokenEmbedding(cfg.vocab_size, cfg.d_model)
        self.tgt_tok_emb = TokenEmbedding(cfg.vocab_size, cfg.d_model)
        self.positional_encoding = PositionalEncoding(cfg.d_model, dropout=cfg.dropout)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src: (B, S), tgt_in: (B, T) → logits (B, T, V); masks as in the tutorial (True = ignore)."""
        s, t = src.size(1), tgt_in.size(1)
        # (T, T) float, -inf above the diagonal
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(t, device=src.device)
        src_mask = torch.zeros((s, s), device=src.device).type(torch.bool)
        src_padding_mask = src == PAD  # (B, S)
        tgt_padding_mask = tgt_in == PAD  # (B, T)
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(tgt_in))
        outs = self.transformer(
            src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask, src_padding_mask
        )
        return self.generator(outs)
