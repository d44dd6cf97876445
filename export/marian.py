"""Import a ``transformers`` Marian model (the OPUS-MT models, ``Helsinki-NLP/opus-mt-*``) into this
project's ``model.Transformer``, with its SentencePiece tokenizers behind ``data.tokenizer.Tokenizer``'s
interface, so that evaluate.py looks inside it as inside a model trained here.

``transformers`` and ``sentencepiece`` are optional (``pip install -e .[hf]``); a Hub name needs a network, a
local folder written by ``save_pretrained`` does not.

What maps, and how (checked against transformers 5.24's ``modeling_marian.py``):

* Marian's layers are post-LN without a final LayerNorm: ``norm_first=False``. ``q_proj``, ``k_proj``,
  ``v_proj`` → the (3D, D) query/key/value projection; ``fc1``/``fc2`` → ``up``/``down``; ``swish``
  (OPUS-MT's) and ``silu`` → ``silu``, ``relu``, ``gelu`` (erf form in both). ``scale_embedding`` →
  ``scale_embedding``; ``final_logits_bias`` → the ``logits_bias`` buffer; shared or separate vocabularies
  and tied output embeddings → ``share_embeddings`` and ``tie_output_embedding``.
* positions: Marian's sinusoid lays out all sines, then all cosines; this project's interleaves them. The
  features of the residual stream are renumbered (the inverse of ``export.huggingface.halves_order``): reading
  weights have their input columns permuted, writing weights their output rows, the LayerNorms their gains and
  biases, so every number the model computes is Marian's, only the residual features are in another order.
  Attention heads are not renumbered: the maps are Marian's own.
* special ids: this project puts pad, BOS, EOS and unk at 0..3 (``data.special``) and keeps padding apart from
  the token decoding starts from. Marian decodes from its pad token, so that token becomes this project's BOS
  (id 1, its embedding row kept), and padding gets a new id 0 (a zero row, never predicted: -inf in the
  logits bias). Every other Marian id follows in Marian's order; ``MarianImport.to_hf`` holds the map.
  A model whose decoder start differs from its pad (one exported by this project) keeps its own pad.
* decoding: this project rules out padding and BOS (Marian's pad) from every step, as OPUS-MT's
  ``bad_words_ids`` rule out pad. Greedy tokens are then ``generate()``'s. Beam search renormalises over the
  allowed tokens here, while ``generate()`` masks pad after its log-softmax, and divides by length ** alpha
  where this project uses GNMT's penalty: beams agree where pad is already -inf in the logits and at
  ``length_penalty`` 0; on OPUS-MT models (pad's probability tiny) they differ at most in rare near ties.

What does not map, or cannot be read, is refused in one line naming the model (evaluate.py's ``MODEL --hf``):
a local folder without a ``config.json`` naming its model type, model types other than Marian (checked
first), a path that names no folder, a local folder whose Marian files (``source.spm``, ``target.spm``,
``vocab.json`` with ``<unk>``) are missing or unreadable or that is an export of this project's
(``tokenizer.json``), a damaged weights file, ``config.json`` sizes that are not whole numbers, do not fit the
weights' shapes (compared in the file's header before anything is allocated) or would make position tables
larger than the machine's memory, encoder and decoder with different head counts or feed-forward sizes
(``TransformerConfig`` has one of each), and an activation other than those above.

Shape legend: D model dim, V vocabulary size.
"""

import json
import os
import pickle
import re
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from data.sentencepiece_tokenizer import SentencePieceTokenizer, load_processor
from data.special import SPECIALS
from export.ctranslate2 import EngineError
from export.huggingface import halves_order, import_transformers
from model import Transformer, TransformerConfig

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
NEW = -1  # in ``to_hf``: an id of this project's with no Marian counterpart (the new padding)
# A Hub model name: "name" or "owner/name" (huggingface_hub's rule, without its length limit).
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
MARIAN_FILES = {"source.spm": "Marian's source SentencePiece model",
                "target.spm": "Marian's target SentencePiece model", "vocab.json": "Marian's vocabulary"}
_OPUS_NAME = re.compile(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})(?:$|[^a-z])", re.IGNORECASE)
# config.json's sizes, each a whole number from 1 (MarianConfig checks none of them).
SIZES = ("vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers",
         "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
         "max_position_embeddings")
# Where from_pretrained looks for the weights, in its order (a sharded safetensors model has an index).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# Position tables of max_position_embeddings × d_model float32 numbers built on import: Marian's encoder's and
# decoder's sinusoids (never saved with the weights) and this project's.
POSITION_TABLES = 3


def tokenizer_sides(hf_tokenizer, src_map: list[int], tgt_map: list[int]
                    ) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """The source and target ``SentencePieceTokenizer`` of a ``MarianTokenizer``: its SentencePiece models
    (``source.spm``, ``target.spm``) and vocabularies (``vocab.json``, and ``target_vocab.json`` when the
    vocabularies are separate) in this project's ids (``id_map`` of each side), read from its files."""
    files = getattr(hf_tokenizer, "spm_files", None)
    if not files or not hasattr(hf_tokenizer, "encoder"):
        raise EngineError(f"its tokenizer is a {type(hf_tokenizer).__name__}, not a MarianTokenizer with "
                          "SentencePiece models (source.spm, target.spm)")
    source_vocab = hf_tokenizer.encoder
    # Its target vocabulary, read directly: get_tgt_vocab() fails in transformers 5.24 (TypeError).
    target_vocab = hf_tokenizer.target_encoder if hf_tokenizer.separate_vocabs else source_vocab

    def side(path, vocab: dict[str, int], to_hf: list[int]) -> SentencePieceTokenizer:
        names = {i: token for token, i in vocab.items()}
        tokens = [SPECIALS.pad if i == NEW else names.get(i, SPECIALS.unk) for i in to_hf]
        return SentencePieceTokenizer(model=Path(path).read_bytes(), tokens=tokens)

    return side(files[0], source_vocab, src_map), side(files[1], target_vocab, tgt_map)


@dataclass
class MarianImport:
    """What ``load_marian`` read: the config and weights of a ``Transformer``, and the two tokenizer sides."""

    config: TransformerConfig
    state_dict: dict[str, Tensor]
    src_tokenizer: SentencePieceTokenizer
    tgt_tokenizer: SentencePieceTokenizer
    src_to_hf: list[int]  # per id of this project's source vocabulary, the Marian id (NEW: the new padding)
    to_hf: list[int]  # per id of this project's target vocabulary, the Marian id (NEW for the new padding)
    source_lang: str | None
    target_lang: str | None

    def model(self) -> Transformer:
        model = Transformer(self.config)
        model.load_state_dict(self.state_dict)
        return model.eval()

    def settings(self) -> dict:
        """The config as ``TranslationModule``'s keyword arguments."""
        return {f.name: getattr(self.config, f.name) for f in fields(self.config)}


def id_map(vocab_size: int, *, pad: int, start: int, eos: int, unk: int) -> list[int]:
    """Per id of this project (pad, BOS, EOS, unk, then the rest), the Marian id: BOS is Marian's decoder
    start, padding is new (``NEW``) when Marian pads with its start token, and the other ids follow in
    Marian's order."""
    specials = [NEW if pad == start else pad, start, eos, unk]
    taken = set(specials)
    return specials + [i for i in range(vocab_size) if i not in taken]


def transformer_config(marian_config, vocab_sizes: tuple[int, int], *, shared: bool, tied: bool
                       ) -> TransformerConfig:
    """The ``TransformerConfig`` of a ``MarianConfig``, or a one-line ``EngineError`` naming what does not
    map. ``shared``: the encoder and decoder embeddings are one table; ``tied``: the output projection is the
    decoder embedding (read from the weights: with ``tie_word_embeddings`` false, transformers 5 keeps even
    ``share_encoder_decoder_embeddings`` tables apart)."""
    c = marian_config
    for ours, encoder, decoder in (("num_heads", "encoder_attention_heads", "decoder_attention_heads"),
                                   ("d_ff", "encoder_ffn_dim", "decoder_ffn_dim")):
        if getattr(c, encoder) != getattr(c, decoder):
            raise EngineError(
                f"{encoder}={getattr(c, encoder)} and {decoder}={getattr(c, decoder)} differ: this project's "
                f"Transformer has one {ours}"
            )
    if c.activation_function not in ACTIVATIONS:
        raise EngineError(
            f"activation_function={c.activation_function!r} cannot be imported: only "
            f"{', '.join(ACTIVATIONS)}"
        )
    return TransformerConfig(
        vocab_sizes[0],
        vocab_sizes[1],
        **SPECIALS.ids,
        d_model=c.d_model,
        num_heads=c.encoder_attention_heads,
        num_encoder_layers=c.encoder_layers,
        num_decoder_layers=c.decoder_layers,
        d_ff=c.encoder_ffn_dim,
        dropout=float(c.dropout),
        attention_dropout=float(c.attention_dropout),
        activation=ACTIVATIONS[c.activation_function],
        max_len=c.max_position_embeddings,
        norm_first=False,
        tie_output_embedding=tied,
        share_embeddings=shared,
        positional="sinusoidal",
        scale_embedding=bool(c.scale_embedding),
        logits_bias=True,
    )


@torch.no_grad()
def project_state_dict(
    marian, config: TransformerConfig, src_map: list[int], tgt_map: list[int]
) -> dict[str, Tensor]:
    """The weights of a ``MarianMTModel`` under this project's names, ids (``id_map`` of each side) and
    feature order."""
    features = torch.argsort(halves_order(config.d_model))  # Marian's feature of each of ours
    weights = marian.state_dict()

    def rows(to_hf: list[int]) -> tuple[Tensor, Tensor]:  # (V,) Marian rows, (V,) True where new
        return torch.tensor([0 if i == NEW else i for i in to_hf]), torch.tensor([i == NEW for i in to_hf])

    def reads(name: str) -> Tensor:
        return weights[name][:, features]

    def writes(name: str) -> Tensor:
        return weights[name][features]

    def table(weight: Tensor, to_hf: list[int]) -> Tensor:  # (V_hf, D) → (V, D): our ids and features
        index, new = rows(to_hf)
        return weight[index][:, features].masked_fill(new[:, None], 0.0)  # new rows zero

    state: dict[str, Tensor] = {}

    def attention(ours: str, theirs: str) -> None:
        state[f"{ours}.in_proj.weight"] = torch.cat([reads(f"{theirs}.{p}_proj.weight") for p in "qkv"])
        state[f"{ours}.in_proj.bias"] = torch.cat([weights[f"{theirs}.{p}_proj.bias"] for p in "qkv"])
        state[f"{ours}.out_proj.weight"] = writes(f"{theirs}.out_proj.weight")
        state[f"{ours}.out_proj.bias"] = writes(f"{theirs}.out_proj.bias")

    def norm(ours: str, theirs: str) -> None:
        state[f"{ours}.weight"], state[f"{ours}.bias"] = writes(f"{theirs}.weight"), writes(f"{theirs}.bias")

    def feed_forward(ours: str, theirs: str) -> None:
        state[f"{ours}.up.weight"], state[f"{ours}.up.bias"] = reads(f"{theirs}.fc1.weight"), \
            weights[f"{theirs}.fc1.bias"]
        state[f"{ours}.down.weight"], state[f"{ours}.down.bias"] = writes(f"{theirs}.fc2.weight"), \
            writes(f"{theirs}.fc2.bias")

    for i in range(config.num_encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.self_attn_norm", f"{theirs}.self_attn_layer_norm")
        feed_forward(f"{ours}.feed_forward", theirs)
        norm(f"{ours}.feed_forward_norm", f"{theirs}.final_layer_norm")
    for i in range(config.num_decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn")
        norm(f"{ours}.self_attn_norm", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn")
        norm(f"{ours}.cross_attn_norm", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(f"{ours}.feed_forward", theirs)
        norm(f"{ours}.feed_forward_norm", f"{theirs}.final_layer_norm")

    state["src_embed.weight"] = table(marian.get_encoder().embed_tokens.weight, src_map)
    state["tgt_embed.weight"] = table(marian.get_decoder().embed_tokens.weight, tgt_map)  # shared: the same
    if not config.tie_output_embedding:
        state["output_proj.weight"] = table(marian.lm_head.weight, tgt_map)
    index, new = rows(tgt_map)
    bias = marian.final_logits_bias[0][index]  # (V,)
    state["output_bias"] = bias.masked_fill(new, float("-inf"))  # the new padding is never predicted
    return {name: value.detach().to(torch.float32).contiguous() for name, value in state.items()}


def languages(name: str, hf_tokenizer) -> tuple[str | None, str | None]:
    """(source, target) language codes: from an OPUS-MT name (``opus-mt-ja-en``), else the tokenizer's."""
    found = _OPUS_NAME.search(str(name))
    if found:
        return found[1].lower(), found[2].lower()
    return getattr(hf_tokenizer, "source_lang", None), getattr(hf_tokenizer, "target_lang", None)


def first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def local_folder(name: str) -> Path | None:
    """The folder ``name`` is, or None for a Hub name; a path that names no folder is refused here
    rather than looked up on the Hub (``owner/name`` could be either: it is a path only if it exists)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise EngineError("is a file, not a model folder")
    if name.startswith(("/", "./", "../", "~", ".\\")) or "\\" in name or not _HUB_NAME.fullmatch(name):
        raise EngineError("no such folder")
    return None


def check_marian_files(folder: Path) -> None:
    """A local Marian folder holds what ``MarianTokenizer`` reads, each file readable; else one line naming
    the file (an export of this project's, which has a ``tokenizer.json`` instead, is named as such)."""
    if (folder / "tokenizer.json").is_file() and not (folder / "source.spm").is_file():
        raise EngineError("this folder is an export of a model trained here (its tokenizer is "
                          "tokenizer.json, not Marian's source.spm/target.spm); evaluate the original "
                          "checkpoint")
    for file, what in MARIAN_FILES.items():
        if not (folder / file).is_file():
            raise EngineError(f"no {file} ({what}) in the folder")
    for file in ("source.spm", "target.spm"):
        try:
            load_processor((folder / file).read_bytes())
        except ValueError:
            raise EngineError(f"{file} is not a SentencePiece model") from None
    try:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise EngineError(f"vocab.json is not JSON ({error})") from None
    if not isinstance(vocab, dict) or SPECIALS.unk not in vocab:
        raise EngineError(f"vocab.json has no {SPECIALS.unk} entry, which Marian's tokenizer needs")


def check_config_json(folder: Path) -> None:
    """A local folder's config.json, read here first, so that a missing one or one without a model type is
    said in one line of this project's rather than transformers' ("Should have a `model_type` key")."""
    path = folder / "config.json"
    if not path.is_file():
        raise EngineError("no config.json in the folder (the model's settings, which save_pretrained writes)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise EngineError(f"config.json is not JSON ({error})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise EngineError('config.json names no model_type (a Marian model\'s says "model_type": "marian")')


def weight_shapes(source: str, folder: Path | None) -> tuple[str, dict[str, list[int]]] | None:
    """The weights file from_pretrained would read (named within ``folder``, a Hub model's by its cached
    path) and the shape of each of its tensors, read from the safetensors headers (a torch archive:
    memory-mapped) without reading the numbers; None where there is none (from_pretrained then says so). A
    damaged file is refused here, in one line naming it."""
    from safetensors import SafetensorError, safe_open
    from transformers.utils import cached_file

    def find(name: str) -> str | None:
        try:
            return cached_file(source, name, _raise_exceptions_for_missing_entries=False,
                               _raise_exceptions_for_connection_errors=False)
        except OSError as error:  # a gated or private Hub model, a cache that cannot be written
            raise EngineError(f"cannot read its weights ({first_line(error)})") from None

    def shown(path: str) -> str:
        return str(path if folder is None else Path(path).relative_to(folder))

    def header(path: str) -> dict[str, list[int]]:
        try:
            with safe_open(path, framework="pt") as weights:
                keys = weights.keys()
                return {key: weights.get_slice(key).get_shape() for key in keys}
        except SafetensorError as error:
            raise EngineError(f"cannot read its weights: {shown(path)} is not a whole safetensors file "
                              f"({first_line(error)})") from None

    def shards(index: str) -> dict[str, list[int]]:
        try:
            names = json.loads(Path(index).read_text(encoding="utf-8"))["weight_map"].values()
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise EngineError(f"cannot read its weights: {shown(index)} is not a shard index") from None
        shapes = {}
        for name in sorted(set(names)):
            if (path := find(name)) is None:
                raise EngineError(f"cannot read its weights: no {name}, which {shown(index)} names")
            shapes.update(header(path))
        return shapes

    def archive(path: str) -> dict[str, list[int]]:
        try:  # one saved before torch 1.6 cannot be memory-mapped: it is read whole, as from_pretrained would
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as error:
                if "mmap" not in str(error):
                    raise
                state = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as error:
            raise EngineError(f"cannot read its weights: {shown(path)} is not a whole torch archive "
                              f"({first_line(error)})") from None
        return {key: list(value.shape) for key, value in state.items() if isinstance(value, Tensor)}

    for name, read in zip(WEIGHT_FILES, (header, shards, archive), strict=True):
        if (path := find(name)) is not None:
            return shown(path), read(path)
    return None


def memory_bytes() -> int | None:
    """This machine's memory, where the system says (POSIX)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def check_sizes(marian_config, weights: tuple[str, dict[str, list[int]]] | None) -> None:
    """config.json's sizes are whole numbers, fit the weights' shapes, and make position tables this machine
    can hold: checked before anything is sized from them, as a damaged config.json (vocab_size 10**9) would
    otherwise take that much memory, or fail deep inside torch."""
    c = marian_config
    for name in SIZES:
        value = getattr(c, name, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EngineError(f"config.json: {name}={value!r} is not a whole number from 1")
    for heads in ("encoder_attention_heads", "decoder_attention_heads"):
        if c.d_model % getattr(c, heads):
            raise EngineError(f"config.json: d_model={c.d_model} is not a multiple of {heads}="
                              f"{getattr(c, heads)}")
    positions = POSITION_TABLES * c.max_position_embeddings * c.d_model * 4
    memory = memory_bytes()
    if memory is not None and positions > memory:
        raise EngineError(
            f"config.json: max_position_embeddings={c.max_position_embeddings} would make position tables of "
            f"{_size(positions)} ({POSITION_TABLES} of max_position_embeddings × d_model float32 numbers), "
            f"more than this machine's {_size(memory)} of memory"
        )
    if weights is None:
        return
    file, shapes = weights

    def differs(name: str, found: str) -> EngineError:
        return EngineError(f"its weights do not have the sizes its config.json gives: {name}="
                           f"{getattr(c, name)}, but {found}")

    def table(*keys: str) -> str:
        key = next((key for key in keys if key in shapes), None)
        if key is None:
            raise EngineError(f"cannot read its weights: {file} holds no {' or '.join(keys)}")
        return key

    encoder = table("model.encoder.embed_tokens.weight", "model.shared.weight")
    decoder = table("model.decoder.embed_tokens.weight", "model.shared.weight")
    sizes = (  # config.json's name, the tensor, its axis of that size; a tensor not saved is not compared
        ("vocab_size", encoder, 0), ("d_model", encoder, 1), ("decoder_vocab_size", decoder, 0),
        ("decoder_vocab_size", "final_logits_bias", 1),
        ("encoder_ffn_dim", "model.encoder.layers.0.fc1.weight", 0),
        ("decoder_ffn_dim", "model.decoder.layers.0.fc1.weight", 0),
        ("max_position_embeddings", "model.encoder.embed_positions.weight", 0),  # saved by old versions
    )
    for name, key, axis in sizes:
        shape = shapes.get(key)
        if shape is not None and (len(shape) != 2 or shape[axis] != getattr(c, name)):
            found = f"{shape[axis]} {('rows', 'columns')[axis]}" if len(shape) == 2 else f"the shape {shape}"
            raise differs(name, f"{key} in {file} has {found}")
    for side in ("encoder", "decoder"):
        layers = re.compile(rf"model\.{side}\.layers\.(\d+)\.")
        found = {int(m[1]) for m in map(layers.match, shapes) if m}
        count = getattr(c, f"{side}_layers")
        if len(found) != count or max(found) != count - 1:  # layers 0 .. count - 1, each saved
            raise differs(f"{side}_layers", f"{file} holds {len(found)} {side} layers")


def check_marian_type(marian_config) -> None:
    """Checked before anything else is read: a T5 or BART folder is named by its type, whatever lies near."""
    if marian_config.model_type != "marian":
        raise EngineError(f"model type {marian_config.model_type!r} is not Marian: only Marian models are "
                          "imported")


def load_marian(name: str) -> MarianImport:
    """Read a Marian model and its tokenizer (a local folder, or a Hub name with a network) for this
    project; the one-line ``EngineError`` (``NAME: ...``) says what does not map or could not be read."""
    try:
        return read_marian(name)
    except EngineError as error:
        raise EngineError(f"{name}: {error}") from None


def read_marian(name: str) -> MarianImport:
    """``load_marian``'s work; its ``EngineError``s do not name the option."""
    import_transformers()
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoTokenizer, MarianMTModel

    folder = local_folder(name)
    source = name if folder is None else str(folder)  # ~ expanded
    if folder is not None:
        check_config_json(folder)
    try:
        marian_config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:
        raise EngineError(f"cannot read its config ({first_line(error)})") from None
    check_marian_type(marian_config)
    if folder is not None:
        check_marian_files(folder)
    check_sizes(marian_config, weight_shapes(source, folder))
    try:
        hf_tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, ImportError, RuntimeError, KeyError, TypeError) as error:
        raise EngineError(f"cannot read its tokenizer ({first_line(error)})") from None
    c = marian_config
    start = c.decoder_start_token_id if c.decoder_start_token_id is not None else c.pad_token_id
    unk = hf_tokenizer.unk_token_id
    ids = {"pad": c.pad_token_id, "start": start, "eos": c.eos_token_id, "unk": unk}
    if any(value is None for value in ids.values()) or len({ids["start"], ids["eos"], ids["unk"]}) < 3:
        raise EngineError(f"special ids {ids} do not keep start, EOS and unknown apart")
    src_map = id_map(c.vocab_size, **ids)
    tgt_map = id_map(c.decoder_vocab_size, **ids)
    try:
        marian = MarianMTModel.from_pretrained(source).eval()
    except (OSError, SafetensorError) as error:
        raise EngineError(f"cannot read its weights ({first_line(error)})") from None
    except RuntimeError as error:
        if "ignore_mismatched_sizes" not in str(error):
            raise
        # transformers' own report, printed above this line, names the tensors and their sizes
        raise EngineError("its weights do not have the sizes its config.json gives "
                          "(vocab_size, d_model, layers)") from None
    encoder, decoder = marian.get_encoder().embed_tokens.weight, marian.get_decoder().embed_tokens.weight
    shared = encoder.shape == decoder.shape and bool(torch.equal(encoder, decoder))
    tied = marian.lm_head.weight.shape == decoder.shape and bool(torch.equal(marian.lm_head.weight, decoder))
    config = transformer_config(marian_config, (len(src_map), len(tgt_map)), shared=shared, tied=tied)
    return MarianImport(
        config,
        project_state_dict(marian, config, src_map, tgt_map),
        *tokenizer_sides(hf_tokenizer, src_map, tgt_map),
        src_map,
        tgt_map,
        *languages(name, hf_tokenizer),
    )

