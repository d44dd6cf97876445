"""Export a trained ``model.Transformer`` as a ``transformers`` MarianMTModel folder, with its tokenizer.

``transformers`` is an optional dependency (``pip install -e .[hf]``). The folder loads with
``AutoModelForSeq2SeqLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``, and
``pipeline("translation", model=DIR, trust_remote_code=True)`` translates with it (transformers 5 has no
translation pipeline of its own: the folder ships one, ``export/translation_pipeline.py``), all with
``transformers`` alone.

What maps, and how (checked against transformers 5.24's ``modeling_marian.py``):

* post-LN layers (``norm_first false``) without a final LayerNorm: Marian's layers are exactly these
  (self-attention, [cross-attention,] feed-forward, each followed by its residual sum and a LayerNorm).
* sinusoidal positions from position 0, frequencies 10000^(-2i/D) in both; this project interleaves sine and
  cosine (feature 2i, 2i+1), Marian writes all sines then all cosines (feature i, D/2 + i). The features of
  the residual stream are renumbered by that fixed permutation (``halves_order``): every weight that reads the
  stream has its input columns permuted, every weight that writes it its output rows, the LayerNorms their
  gains and biases. LayerNorm is indifferent to the order of features, and the attention heads and the
  feed-forward hidden units are not renumbered, so the exported model computes the same numbers.
* the query/key/value projection (3D, D) → ``q_proj``, ``k_proj``, ``v_proj``; ``out_proj``; ``up``/``down`` →
  ``fc1``/``fc2``; relu, gelu (erf form in both), silu → Marian's ``swish``. Embeddings scaled by sqrt(D)
  (``scale_embedding``). Shared embeddings and the tied output projection map to Marian's
  ``share_encoder_decoder_embeddings`` and ``tie_word_embeddings``.
* decoding starts from BOS (``decoder_start_token_id``), not from padding as OPUS-MT's models do, and the
  source is its tokens followed by EOS (the tokenizer's post-processor adds it, as ``data.batching.collate``).
* this project's decoding never produces padding or BOS, and its beam search renormalises the distribution
  without them (``model.decoding._allowed_logits``). ``generate()`` applies its logits processors after the
  log-softmax, so the export writes -inf at those two ids into Marian's ``final_logits_bias`` instead: the
  exported logits are the model's with those two columns at -inf, and every decoding sees the same
  distribution. Greedy and beam tokens are then the project's; beams agree at ``length_penalty`` 0
  (``transformers`` divides by length ** alpha, this project by GNMT's ((5 + length) / 6) ** alpha).

* separate source and target vocabularies: a ``transformers`` tokenizer decodes with the vocabulary it
  encodes with, so the export writes one vocabulary holding both (``ExportVocabulary``): the source
  tokenizer's entries at their own ids, then every target token but the four special ones, marked with a
  private-use character (U+E000) that text never holds, so that encoding never produces them and the
  source's encoding is unchanged; the decoder drops the mark and detokenizes as the target tokenizer does.
  The encoder reads target-only ids as ``<unk>``; source-only ids get a zero decoder row and -inf in the
  logits bias, so they are never predicted.

What does not map, refused in one line naming it: pre-LN (Marian has no pre-LN and no final LayerNorm),
position variants other than sinusoidal (rope, alibi, relative, learned, none), and models imported from
Marian with ``logits_bias`` (export the original).

Shape legend: D model dim, V vocabulary size, F feed-forward dim.
"""

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from data.folders import staged_folder
from data.special import SPECIALS
from data.tokenizer import Tokenizer
from export.ctranslate2 import EngineError
from model import Transformer

INSTALL_HINT = "transformers is not installed; install it with: pip install -e .[hf]"
MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}
# The eps of torch's and Marian's nn.LayerNorm default.
MARIAN_LAYER_NORM_EPS = 1e-5
# Marks the target tokens of a joined vocabulary: a private-use character, which no text holds.
TARGET_MARK = "\ue000"
# The translation pipeline the folder ships, as config.json's custom_pipelines names it.
PIPELINE_FILE = Path(__file__).with_name("translation_pipeline.py")
CUSTOM_PIPELINES = {"translation": {"impl": f"{PIPELINE_FILE.stem}.TranslationPipeline",
                                    "pt": ["AutoModelForSeq2SeqLM"], "tf": [], "type": "text"}}
# What an export writes (special_tokens_map.json: transformers 4's tokenizers); --overwrite replaces a folder
# that holds nothing else, and whose config.json names the pipeline above: one written by an export.
EXPORT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                          "tokenizer_config.json", "special_tokens_map.json", PIPELINE_FILE.name})
WEIGHTS_FILE = "model.safetensors"


def import_transformers():
    """The ``transformers`` module, or an ``EngineError`` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise EngineError(INSTALL_HINT) from None
    return transformers


def halves_order(d_model: int) -> Tensor:
    """The permutation that takes interleaved sinusoid features to Marian's halves: (D,) int64 such that
    ``interleaved[..., order]`` lays out sin(pos * f_i) at i and cos(pos * f_i) at D/2 + i."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])  # (D,)


def check_exportable(model: Transformer) -> None:
    """Refuse, with one line naming the option, a model a MarianMTModel cannot reproduce exactly."""
    c = model.config
    if c.norm_first:
        raise EngineError(
            "norm_first=True (pre-LN) cannot be exported to a MarianMTModel: Marian is post-LN only, with no "
            "final LayerNorm; train with --model.norm_first false"
        )
    if c.positional != "sinusoidal":
        raise EngineError(
            f"positional={c.positional!r} cannot be exported to a MarianMTModel: Marian has sinusoidal "
            "positions only"
        )
    if c.activation not in MARIAN_ACTIVATIONS:
        raise EngineError(f"activation={c.activation!r} cannot be exported to a MarianMTModel")
    if c.logits_bias or not c.scale_embedding:
        raise EngineError(
            "this model was imported from a Marian model (logits_bias or scale_embedding false): export the "
            "original instead"
        )
    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if eps != {MARIAN_LAYER_NORM_EPS}:
        raise EngineError(f"LayerNorm epsilons {sorted(eps)}: a MarianMTModel's are {MARIAN_LAYER_NORM_EPS}")


@dataclass(frozen=True)
class ExportVocabulary:
    """The one vocabulary of the exported model and tokenizer, and where its ids come from.

    Attributes:
        backend: the ``tokenizers.Tokenizer`` that encodes sources and decodes targets.
        source_rows: (V,) per exported id, the source id whose embedding row the encoder reads.
        target_ids: (V,) per exported id, the target id it stands for, or -1 (never predicted).
    """

    backend: object
    source_rows: Tensor
    target_ids: Tensor

    @property
    def size(self) -> int:
        return self.source_rows.numel()


def export_vocabulary(src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> ExportVocabulary:
    """One tokenizer's vocabulary as it is, or two joined: the source's, then the target's marked tokens."""
    import tokenizers
    from tokenizers import decoders

    specials = len(SPECIALS.tokens)
    if src_tokenizer.to_json() == tgt_tokenizer.to_json():
        ids = torch.arange(src_tokenizer.vocab_size)
        return ExportVocabulary(tokenizers.Tokenizer.from_str(src_tokenizer.to_json()), ids, ids)
    spec = json.loads(src_tokenizer.to_json())
    model = spec["model"]
    first = src_tokenizer.vocab_size
    target_tokens = tgt_tokenizer.tokens(range(specials, tgt_tokenizer.vocab_size))
    marked = [TARGET_MARK + token for token in target_tokens]
    if model["type"] in ("BPE", "WordLevel"):
        if len(model["vocab"]) != first:
            raise EngineError(f"the source tokenizer's model holds {len(model['vocab'])} of its {first} ids")
        model["vocab"].update({token: first + i for i, token in enumerate(marked)})
    elif model["type"] == "Unigram":  # the pieces never match text; their score does not matter
        lowest = min(score for _, score in model["vocab"])
        model["vocab"].extend([token, lowest] for token in marked)
    else:
        raise EngineError(f"a {model['type']} source tokenizer cannot be joined with the target's")
    backend = tokenizers.Tokenizer.from_str(json.dumps(spec))
    target_decoder = tokenizers.Tokenizer.from_str(tgt_tokenizer.to_json()).decoder
    if target_decoder is None:  # word-level: tokens joined by spaces
        backend.decoder = decoders.Sequence([decoders.Replace(TARGET_MARK, "▁"), decoders.Metaspace()])
    else:
        backend.decoder = decoders.Sequence([decoders.Replace(TARGET_MARK, ""), target_decoder])
    added = tgt_tokenizer.vocab_size - specials
    source_rows = torch.cat([torch.arange(first), torch.full((added,), SPECIALS.unk_id)])  # (V,)
    target_ids = torch.cat([
        torch.arange(specials), torch.full((first - specials,), -1), torch.arange(specials, specials + added)
    ])  # (V,)
    return ExportVocabulary(backend, source_rows, target_ids)


def marian_config(model: Transformer, vocabulary: ExportVocabulary):
    """The ``MarianConfig`` of ``model``'s architecture and special ids."""
    from transformers import MarianConfig

    c = model.config
    return MarianConfig(
        vocab_size=vocabulary.size,
        decoder_vocab_size=vocabulary.size,
        max_position_embeddings=c.max_len,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.num_heads,
        decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        d_model=c.d_model,
        activation_function=MARIAN_ACTIVATIONS[c.activation],
        dropout=c.dropout,
        activation_dropout=c.dropout,  # FeedForward's dropout after the activation
        attention_dropout=c.attention_dropout,
        scale_embedding=True,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None,  # this project's decoding forces nothing at the length limit
        share_encoder_decoder_embeddings=c.share_embeddings,
        tie_word_embeddings=c.tie_output_embedding,
    )


def marian_state_dict(model: Transformer, vocabulary: ExportVocabulary) -> dict[str, Tensor]:
    """``model``'s weights under MarianMTModel's names and ``vocabulary``'s ids, the residual stream's
    features in Marian's order."""
    c = model.config
    order = halves_order(c.d_model)
    d = c.d_model

    def reads(weight: Tensor) -> Tensor:  # (out, D): columns in Marian's order
        return weight[:, order]

    def writes(weight: Tensor) -> Tensor:  # (D, ...) rows in Marian's order
        return weight[order]

    state: dict[str, Tensor] = {}

    def attention(prefix: str, module) -> None:
        w, b = module.in_proj.weight, module.in_proj.bias  # (3D, D): query, key, value
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            state[f"{prefix}.{name}.weight"] = reads(w[i * d : (i + 1) * d])
            state[f"{prefix}.{name}.bias"] = b[i * d : (i + 1) * d]
        state[f"{prefix}.out_proj.weight"] = writes(module.out_proj.weight)
        state[f"{prefix}.out_proj.bias"] = writes(module.out_proj.bias)

    def norm(prefix: str, module: nn.LayerNorm) -> None:
        state[f"{prefix}.weight"], state[f"{prefix}.bias"] = writes(module.weight), writes(module.bias)

    def feed_forward(prefix: str, module) -> None:
        state[f"{prefix}.fc1.weight"], state[f"{prefix}.fc1.bias"] = reads(module.up.weight), module.up.bias
        state[f"{prefix}.fc2.weight"] = writes(module.down.weight)  # (D, F)
        state[f"{prefix}.fc2.bias"] = writes(module.down.bias)

    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}"
        attention(f"{prefix}.self_attn", layer.self_attn)
        norm(f"{prefix}.self_attn_layer_norm", layer.self_attn_norm)
        feed_forward(prefix, layer.feed_forward)
        norm(f"{prefix}.final_layer_norm", layer.feed_forward_norm)
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}"
        attention(f"{prefix}.self_attn", layer.self_attn)
        norm(f"{prefix}.self_attn_layer_norm", layer.self_attn_norm)
        attention(f"{prefix}.encoder_attn", layer.cross_attn)
        norm(f"{prefix}.encoder_attn_layer_norm", layer.cross_attn_norm)
        feed_forward(prefix, layer.feed_forward)
        norm(f"{prefix}.final_layer_norm", layer.feed_forward_norm)

    never = vocabulary.target_ids < 0  # (V,) source-only ids of a joined vocabulary

    def target_table(weight: Tensor) -> Tensor:  # (V_tgt, D) → (V, D), zero where never predicted
        return reads(weight)[vocabulary.target_ids.clamp(min=0)].masked_fill(never[:, None], 0.0)

    encoder_table = reads(model.src_embed.weight)[vocabulary.source_rows]  # (V, D)
    if c.share_embeddings:  # one vocabulary: the rows as they are
        state["model.shared.weight"] = encoder_table
    state["model.encoder.embed_tokens.weight"] = encoder_table
    state["model.decoder.embed_tokens.weight"] = target_table(model.tgt_embed.weight)
    state["lm_head.weight"] = target_table(model.output_weight)
    bias = torch.zeros(1, vocabulary.size).masked_fill(never, float("-inf"))
    bias[0, [c.pad_id, c.bos_id]] = float("-inf")  # never predicted, as in model.decoding
    state["final_logits_bias"] = bias
    return {name: value.detach().to("cpu", torch.float32).clone() for name, value in state.items()}


def hf_tokenizer(vocabulary: ExportVocabulary, max_len: int):
    """The vocabulary's tokenizer as a ``PreTrainedTokenizerFast``, with a post-processor that appends EOS to
    a sentence, as ``data.batching.collate`` does."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = vocabulary.backend
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {SPECIALS.eos}", special_tokens=[(SPECIALS.eos, SPECIALS.eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=SPECIALS.pad,
        bos_token=SPECIALS.bos,
        eos_token=SPECIALS.eos,
        unk_token=SPECIALS.unk,
        model_max_length=max_len,
        clean_up_tokenization_spaces=False,  # the tokenizer's own decoder restores the text
        model_input_names=["input_ids", "attention_mask"],  # a Marian model takes no token_type_ids
    )


def generation_config(model: Transformer, num_beams: int = 1, max_len: int | None = None):
    """How ``generate()`` and the pipeline decode by default: from BOS, up to ``max_len`` tokens (default: the
    model's ``max_len``), greedily or with ``num_beams`` beams as ``Transformer.generate`` with
    ``length_penalty=0`` (transformers divides by length ** penalty, not by GNMT's penalty: the two rules
    agree at 0 only)."""
    from transformers import GenerationConfig

    c = model.config
    if max_len is not None and not 1 <= max_len <= c.max_len:
        raise EngineError(f"--max-len must be from 1 to the model's {c.max_len} positions, got {max_len}")
    beams = {"length_penalty": 0.0, "early_stopping": False} if num_beams > 1 else {}
    return GenerationConfig(
        decoder_start_token_id=c.bos_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        pad_token_id=c.pad_id,
        forced_eos_token_id=None,
        max_length=(max_len or c.max_len) + 1,  # the start token and at most max_len generated ones
        num_beams=num_beams,
        **beams,
    )


def _exported_here(config: Path) -> bool:
    """``config`` is the config.json of an export: a Marian model's, naming the pipeline an export ships."""
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return (isinstance(settings, dict) and settings.get("model_type") == "marian"
            and settings.get("custom_pipelines") == CUSTOM_PIPELINES)


def check_out_folder(out: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Where ``export`` writes, checked before any model is loaded or built, in one line naming ``out``: a new
    folder where one can be made, or with ``overwrite`` a folder an export wrote (its config.json
    ``_exported_here``, and nothing beside the files an export writes). Any other folder holds someone's
    files, which replacing it would delete: it is refused, naming what else is there."""
    out = Path(out)
    existing = next(p for p in (out, *out.parents) if p.exists() or p == Path(p.anchor or "."))
    if existing != out:  # made with its missing parents, staged in its parent
        if not existing.is_dir():
            raise EngineError(f"{out}: {existing} is a file, not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise EngineError(f"{out}: {existing} is not writable")
        return
    if not overwrite:
        raise EngineError(f"{out} exists; choose another name or pass --overwrite")
    if not out.is_dir():
        raise EngineError(f"{out} exists and is not a folder")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise EngineError(f"{out}: its folder {out.parent} is not writable")
    names = sorted(p.name for p in out.iterdir())
    others = [name for name in names if name not in EXPORT_FILES]
    if others:
        listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise EngineError(f"--overwrite replaces only a folder written by evaluate.py export-hf, and {out} "
                          f"holds {listed} besides; choose another name")
    if names and not _exported_here(out / "config.json"):
        raise EngineError(f"--overwrite replaces only a folder written by evaluate.py export-hf, and {out}'s "
                          "config.json is not an export's; choose another name")


def _write_error(error: Exception) -> str | None:
    """Why a write failed, where ``error`` is safetensors' or tokenizers' report of one (their I/O errors,
    a full disk included, end in "(os error N)"); None for any other error."""
    line = str(error).strip()
    return line if re.search(r"\(os error \d+\)$", line) else None


def export(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    out_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    num_beams: int = 1,
    max_len: int | None = None,
) -> Path:
    """Write a ``transformers`` model folder (MarianMTModel, its tokenizer and generation config, and the
    translation pipeline) for ``model``; returns its path. ``generate()`` then decodes as
    ``generation_config`` says for ``num_beams`` and ``max_len``. Written to a temporary folder first, so a
    failed export (a full disk) leaves nothing half-written and is one ``EngineError`` naming the file; an
    existing ``out_dir`` is replaced as a whole (none of its old files stay) only with ``overwrite``, and only
    if an export wrote it (``check_out_folder``). Every file gets the mode a new file gets (umask).
    """
    out = Path(out_dir)
    check_out_folder(out, overwrite=overwrite)
    import_transformers()
    from transformers import MarianMTModel

    check_exportable(model)
    vocabulary = export_vocabulary(src_tokenizer, tgt_tokenizer)
    marian = MarianMTModel(marian_config(model, vocabulary)).eval()
    missing, unexpected = marian.load_state_dict(marian_state_dict(model, vocabulary), strict=False)
    positions = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    assert not unexpected and set(missing) <= positions, (missing, unexpected)
    marian.generation_config = generation_config(model, num_beams, max_len)
    marian.config.custom_pipelines = CUSTOM_PIPELINES
    tokenizer = hf_tokenizer(vocabulary, model.config.max_len)
    mask = os.umask(0)
    os.umask(mask)
    staging = None
    writing = WEIGHTS_FILE  # the file of the step under way, for errors that do not name it
    try:
        with staged_folder(out) as staging:  # an old folder's files (source.spm, vocab.json, ...) do not stay
            marian.save_pretrained(staging)
            writing = "tokenizer.json"
            tokenizer.save_pretrained(staging)
            shutil.copyfile(PIPELINE_FILE, staging / PIPELINE_FILE.name)
            for file in staging.iterdir():  # safetensors writes its file private (0600)
                file.chmod(0o666 & ~mask)
    except OSError as error:
        where = Path(error.filename) if error.filename else out
        if staging is not None and where.is_relative_to(staging):  # the hidden staging folder is not named
            where = out / where.relative_to(staging)
        elif where.parent == out.parent and where.name.startswith(f".{out.name}."):
            where = out
        raise EngineError(f"cannot write {where}: {error.strerror or error}") from None
    except Exception as error:
        reason = _write_error(error)
        if reason is None:
            raise
        raise EngineError(f"cannot write {out / writing}: {reason}") from None
    return out


@torch.no_grad()
def check_positions(model: Transformer, marian) -> None:
    """Marian's position table equals the project's, features renumbered (a self-check of the mapping)."""
    ours = model.positions.sinusoid.pe[:, halves_order(model.config.d_model)]  # (max_len, D)
    theirs = marian.model.encoder.embed_positions.weight[: ours.size(0)].to(ours.dtype)
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)
