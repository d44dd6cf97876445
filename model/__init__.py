"""The model: multi-head attention, the encoder-decoder Transformer and its decoding. Imports only torch."""

from model.attention import MultiHeadAttention
from model.cache import DecoderCache, KVCache
from model.config import TransformerConfig
from model.context import AttentionContext
from model.decoding import beam_search, greedy_search
from model.masks import causal_mask, decoder_self_mask, padding_mask
from model.transformer import Transformer
from model.types import AlignedHead, AttentionMaps, DecoderRequest, EncoderOutput, HeadMask

__all__ = [
    "AlignedHead",
    "AttentionContext",
    "AttentionMaps",
    "DecoderCache",
    "DecoderRequest",
    "EncoderOutput",
    "HeadMask",
    "KVCache",
    "MultiHeadAttention",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "causal_mask",
    "decoder_self_mask",
    "greedy_search",
    "padding_mask",
]
