"""The architecture of the Transformer: one frozen, validated config of primitives."""

from dataclasses import KW_ONLY, dataclass
from typing import Literal

from model.positions import POSITIONAL

Positional = Literal["sinusoidal", "learned", "rope", "alibi", "relative", "none"]
Activation = Literal["relu", "gelu", "silu"]

# The largest sizes a config may have: refused before anything is allocated, where a mistyped 10**9 would
# otherwise allocate until the machine runs out of memory. Each lies far beyond the models in use, so that no
# real config meets it: PaLM 540B has d_model 18,432 and d_ff 4 times that; DeepNet (Wang et al. 2022)
# trained Transformers of 1,000 layers; translation works with sentences of hundreds of tokens, and one
# head's attention map over 65,536 positions already takes 16 GiB (the maps this project draws are exact).
MAX_SIZES = {
    "d_model": 2**16,
    "d_ff": 2**18,
    "max_len": 2**16,
    "num_encoder_layers": 1024,
    "num_decoder_layers": 1024,
}


@dataclass(frozen=True)
class TransformerConfig:
    """Architecture of the Transformer. Frozen and validated once; every field is a primitive.

    The defaults are the model of ``python train.py`` (configs/default.yaml), small enough to train on a
    laptop CPU; ``training.module.TranslationModule`` takes its defaults from here. The paper's base model is
    ``d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048, norm_first=False``.

    The vocabulary sizes and the special ids have no defaults: they are the tokenizers' (``data.special``
    defines the ids, ``train.py`` links them from the data), and the model keeps no copy of its own.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    _: KW_ONLY
    pad_id: int
    bos_id: int
    eos_id: int
    d_model: int = 128
    num_heads: int = 4
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    d_ff: int = 512
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: Activation = "relu"
    max_len: int = 256
    # Pre-LN (normalise each sublayer's input) trains stably without long warm-up (Xiong et al. 2020);
    # post-LN (normalise after the residual sum) is the paper's §3.1 arrangement.
    norm_first: bool = True
    # Share the target embedding with the output projection (§3.4, Press & Wolf 2017).
    tie_output_embedding: bool = True
    # One embedding table for source and target; needs one shared vocabulary.
    share_embeddings: bool = False
    # Position signal, see model.positions: "sinusoidal" (§3.5) and "learned" add to the embeddings; "rope"
    # rotates self-attention's queries and keys; "alibi" and "relative" bias self-attention's scores; "none"
    # leaves the encoder a bag of words and gives the decoder order only through its causal mask.
    positional: Positional = "sinusoidal"
    # Multiply the token embeddings by sqrt(d_model) before positions are added (§3.4); Marian models may
    # leave it out (their ``scale_embedding``).
    scale_embedding: bool = True
    # A fixed (V,) bias added to the logits, a buffer rather than a parameter: Marian's ``final_logits_bias``,
    # which an imported model keeps (see export/marian.py).
    logits_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name, limit in MAX_SIZES.items():
            if getattr(self, name) > limit:
                raise ValueError(
                    f"{name} must be at most {limit}, got {getattr(self, name)}: {self._memory_of(name)}"
                )
        if self.d_model % self.num_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.activation not in ("relu", "gelu", "silu"):
            raise ValueError(f"activation must be 'relu', 'gelu' or 'silu', got {self.activation!r}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
        for name, value in ids.items():
            smallest = min(self.src_vocab_size, self.tgt_vocab_size)
            if not 0 <= value < smallest:
                raise ValueError(
                    f"{name} ({value}) must be a valid id of both vocabularies (size {smallest})"
                )
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {', '.join(POSITIONAL)}; got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"positional 'sinusoidal' needs an even d_model (sine and cosine pairs), got {self.d_model}"
            )
        head_dim = self.d_model // self.num_heads
        if self.positional == "rope" and head_dim % 2 != 0:
            raise ValueError(
                f"positional 'rope' needs an even head dimension (rotated feature pairs), got d_model "
                f"{self.d_model} / num_heads {self.num_heads} = {head_dim}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one vocabulary, got src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size}"
            )

    def _memory_of(self, name: str) -> str:
        """What a size of :data:`MAX_SIZES` would take, at least, in float32: why it is refused."""
        d = self.d_model
        if name == "d_model":
            return f"one d_model × d_model weight matrix alone would take {_bytes(4 * d * d)}"
        if name == "d_ff":
            return f"one d_model × d_ff weight matrix alone would take {_bytes(4 * d * self.d_ff)}"
        if name == "max_len":
            return (
                f"one head's attention map over that many positions would take {_bytes(4 * self.max_len**2)}"
            )
        layers = getattr(self, name)
        return (
            "their attention projections alone (4 d_model × d_model matrices a layer) would take "
            f"{_bytes(4 * 4 * d * d * layers)}"
        )


def _bytes(count: int) -> str:
    """``count`` bytes in the largest binary unit that leaves at least 1 (KiB, MiB, ... EiB)."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    power = min(max(count.bit_length() - 1, 0) // 10, len(units) - 1)
    return f"{count / 2 ** (10 * power):.1f} {units[power]}"
