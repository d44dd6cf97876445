"""The training system around the plain ``model.Transformer``: loss, optimiser, validation metrics; the
learning-rate schedule it steps is ``training.schedule``'s.

Shape legend: B batch, S source length, T target length, V target vocabulary size.
"""

import math
import time
from collections.abc import Iterable
from dataclasses import fields

import lightning as L
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from analysis.metrics import bleu_tokenizer, bleu_tokenizer_line, score_translations
from data.scripts import script_language
from data.special import SPECIALS
from model import AlignedHead, Transformer, TransformerConfig
from model.config import Activation, Positional
from model.decoding import MAX_BEAM_SIZE
from model.packing import TokenIndex
from training.checkpoints import upgrade_state_dict
from training.schedule import LearningRateSchedule, Schedule


def sum_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the validation sums reduced across ranks: float64, or float32 on devices without it."""
    return torch.float32 if device.type == "mps" else torch.float64  # Apple GPUs support no float64


class NonFiniteLossError(FloatingPointError):
    """The training or validation loss became NaN or infinite; the run stops and keeps its last good
    checkpoint."""


STOPPING = "stopping. The last good checkpoint is kept; try a lower --model.lr or more --model.warmup_steps"


def host_scalar(value: float) -> Tensor:
    """A value for ``self.log`` as a CPU tensor: Lightning would copy a Python number to the device, and the
    progress bar reads its values back at every step."""
    return torch.tensor(float(value))


def token_index_of(batch, pad_id: int) -> TokenIndex:
    """Where the tokens of a batch sit: as collated (on the CPU), or found now for a batch without them."""
    if getattr(batch, "src_tokens", None) is not None and getattr(batch, "tgt_tokens", None) is not None:
        return TokenIndex(batch.src_tokens, batch.tgt_tokens)
    return TokenIndex.of(batch.src, batch.tgt_in, pad_id)


def dropout_seed(base_seed: int, step: int, rank: int) -> int:
    """The seed of the random numbers (dropout masks) of training step ``step`` on process ``rank``.

    A function of the step, so that a resumed run draws what an uninterrupted one would; and of the rank, so
    that the processes of a distributed run draw different masks for their different batches. Rank 0 keeps
    ``base_seed + step``; rank r XORs it with r times an odd constant below 2**32, which changes the low 32
    bits differently for every rank: the CPU generator reads only those (its Mersenne Twister takes 32 bits).
    """
    return ((base_seed + step) ^ (rank * 0x9E3779B9 % 2**32)) % 2**64


def check_training_settings(settings) -> None:
    """Raise a ``ValueError`` naming the first of ``TranslationModule``'s own settings that is out of range
    (``TransformerConfig`` checks the architecture's): so that a bad one stops the run before its first step,
    not at the first validation or decoding, an epoch later."""
    lr, warmup_steps = settings["lr"], settings["warmup_steps"]
    if not 0 < lr < math.inf or warmup_steps < 0:
        raise ValueError(f"lr must be positive and warmup_steps non-negative, got {lr} and {warmup_steps}")
    for name in ("label_smoothing", "adam_beta2"):
        if not 0.0 <= settings[name] < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {settings[name]}")
    if not 0 <= settings["weight_decay"] < math.inf:
        raise ValueError(f"weight_decay must be a number >= 0, got {settings['weight_decay']}")
    for name in ("decode_every_n_epochs", "num_text_samples"):
        if settings[name] < 0:
            raise ValueError(f"{name} must be >= 0 (0: none), got {settings[name]}")
    beam = settings["decode_beam_size"]
    if beam < 1:
        raise ValueError(f"decode_beam_size must be at least 1 (1: greedy), got {beam}")
    if beam > MAX_BEAM_SIZE:
        raise ValueError(f"decode_beam_size must be at most {MAX_BEAM_SIZE}, got {beam}")
    for name in ("decode_max_sentences", "decode_max_len"):
        if settings[name] is not None and settings[name] < 1:
            raise ValueError(f"{name} must be at least 1, or null, got {settings[name]}")
    check_alignment_settings(settings)


# Decoder position signals that are biases of the distance to earlier keys only (ALiBi, T5's one-way buckets).
ONE_WAY_POSITIONS = ("alibi", "relative")


def check_alignment_settings(settings) -> None:
    """Raise a ``ValueError`` naming the guided-alignment setting that is out of range: the supervised
    layer and head are given together, each counted from 1 within the model's, and the weight is >= 0; a
    full-context head needs a position signal that tells later words apart."""
    layer, head, weight = (settings.get(f"alignment_{name}") for name in ("layer", "head", "weight"))
    if (layer is None) != (head is None):
        raise ValueError(
            f"alignment_layer and alignment_head name one head together, got alignment_layer={layer} and "
            f"alignment_head={head}"
        )
    bounds = {"alignment_layer": (layer, "num_decoder_layers"), "alignment_head": (head, "num_heads")}
    for name, (value, limit) in bounds.items():
        if value is not None and not 1 <= value <= settings[limit]:
            raise ValueError(f"{name} counts from 1 to {limit}={settings[limit]}, got {value}")
    if weight is not None and not 0 <= weight < math.inf:
        raise ValueError(f"alignment_weight must be a number >= 0, got {weight}")
    positional = settings.get("positional")
    if settings.get("alignment_full_context") and positional in ONE_WAY_POSITIONS:
        raise ValueError(
            f"alignment_full_context lets the decoder see the words after each one, but "
            f"positional={positional} measures decoder distances one way only (every later word would sit "
            "at distance 0): use sinusoidal, learned or rope positions"
        )


def with_null(labels: Tensor, src: Tensor, tgt_out: Tensor, pad_id: int) -> Tensor:
    """``labels`` (B, T, S) whose rows of real target tokens without a link point at their source's
    end-of-sentence token (the last before the padding) instead; padding rows stay zero. On the device."""
    unlinked = (labels.sum(dim=-1) == 0) & (tgt_out != pad_id)  # (B, T)
    end = (src != pad_id).sum(dim=-1) - 1  # (B,) the EOS collate appends to every source
    null = (torch.arange(src.size(1), device=src.device) == end.unsqueeze(1)).to(labels.dtype)  # (B, S)
    return labels + unlinked.unsqueeze(-1).to(labels.dtype) * null.unsqueeze(1)  # (B, T, S)


def alignment_loss(attention: Tensor, labels: Tensor) -> Tensor:
    """The guided-alignment loss (Garg et al. 2019): the cross-entropy of each supervised row of one
    head's cross-attention against its link distribution, averaged over the supervised rows.

    Args:
        attention: (B, T, S) the head's weights, each row a distribution over the source positions.
        labels: (B, T, S) float, each row a distribution over the source positions its target token is
            linked to, or zeros where it has no link (such rows count for nothing).

    Returns:
        a scalar, ``-sum(labels * log(attention)) / rows``, ``rows`` the rows with links (0 for a batch
        without any). Computed on the device: no host sync.
    """
    # Attention that underflowed to 0 (a masked key, or a softmax in low precision) takes the smallest
    # normal float instead: log(0) would make 0 * -inf NaN where the label is 0 too.
    log_attention = attention.float().clamp_min(torch.finfo(torch.float32).tiny).log()  # (B, T, S)
    per_row = -(labels * log_attention).sum(dim=-1)  # (B, T)
    rows = (labels.sum(dim=-1) > 0).sum()  # a tensor, not a host number
    return per_row.sum() / rows.clamp(min=1)


def validation_bleu_tokenizer(datamodule, references: Iterable[str] | None = None) -> str:
    """The sacreBLEU tokenizer of BLEU against ``references`` (default: the data's validation references): the
    one prescribed for the data's ``target_lang``, or where that is 13a, for the language the references'
    script tells (Chinese, Japanese; ``analysis.metrics.bleu_tokenizer``). The toy tasks keep 13a; a data
    module without a language or pairs, too."""
    return bleu_tokenizer(*_bleu_languages(datamodule, references))


def validation_bleu_line(datamodule) -> str:
    """One line for the log: validation BLEU's tokenizer and what chose it."""
    return f"Validation BLEU: {bleu_tokenizer_line(*_bleu_languages(datamodule, None))}"


def _bleu_languages(datamodule, references: Iterable[str] | None) -> tuple[str | None, str | None]:
    """The data's ``target_lang`` and the language the script of ``references`` tells."""
    if references is None:
        references = [p.target for p in datamodule.pairs("val")] if hasattr(datamodule, "pairs") else []
    return getattr(datamodule, "target_lang", None), script_language(references)


def last_validation(trainer) -> bool:
    """Whether training ends after this validation, as far as is known when it starts: the run was asked to
    stop (``max_time``'s timer, or a callback; Lightning validates once more when asked), has reached
    ``max_steps``, or ends the last epoch of ``max_epochs``. An early stop decided on this validation's
    results is known only after it: the end of training catches that one."""
    if trainer.should_stop or 0 <= trainer.max_steps <= trainer.global_step:
        return True
    if not 0 <= trainer.max_epochs <= trainer.current_epoch + 1:
        return False
    progress = trainer.fit_loop.epoch_loop.batch_progress  # at the epoch's end, not inside it
    return progress.is_last_batch or progress.current.ready >= trainer.num_training_batches


def due_at_validation(trainer, every_n_epochs: int, done_before: bool) -> bool:
    """Whether work done every N-th epoch at validation (decoding for BLEU, logging attention) is due at this
    validation: at the first of the run (``done_before`` False), so that a run shorter than N epochs shows
    it; at every N-th epoch's; and at the last (``last_validation``). Never in the sanity check; 0: never."""
    if every_n_epochs == 0 or trainer.sanity_checking:
        return False
    return not done_before or (trainer.current_epoch + 1) % every_n_epochs == 0 or last_validation(trainer)


class TranslationModule(L.LightningModule):
    """Trains a ``model.Transformer`` with label-smoothed cross-entropy, AdamW and a warm-up schedule.

    Every argument is a primitive, so checkpoints load with ``torch.load(weights_only=True)`` and every
    argument is an option of ``train.py`` (``--model.NAME``). Vocabulary sizes and special ids come from the
    data.

    Args:
        src_vocab_size: source vocabulary size (set from the data).
        tgt_vocab_size: target vocabulary size (set from the data).
        pad_id: padding id (set from the data).
        bos_id: begin-of-sentence id (set from the data).
        eos_id: end-of-sentence id (set from the data).
        d_model: model dimension.
        num_heads: attention heads per layer.
        num_encoder_layers: encoder layers.
        num_decoder_layers: decoder layers.
        d_ff: hidden size of the feed-forward networks.
        dropout: dropout on embeddings, sublayer outputs and feed-forward activations.
        attention_dropout: dropout on attention weights.
        activation: feed-forward activation, "relu", "gelu" or "silu" (Marian's swish).
        max_len: longest sequence (in tokens) the positional encoding covers.
        norm_first: pre-LN (True) or the paper's post-LN (False).
        tie_output_embedding: share the target embedding with the output projection.
        share_embeddings: one embedding table for source and target (needs a shared vocabulary).
        positional: position signal: "sinusoidal" (the paper's, default), "learned", "rope", "alibi",
            "relative" (T5) or "none"; see ``model.positions`` for where each acts. Checkpoints saved before
            this option existed load as "sinusoidal".
        scale_embedding: multiply the token embeddings by sqrt(d_model) (§3.4); some Marian models do not.
        logits_bias: a fixed bias added to the logits (imported Marian models' ``final_logits_bias``).
        lr: peak learning rate, reached at the end of warm-up.
        warmup_steps: linear warm-up steps.
        schedule: after warm-up, "cosine" (to zero at the last step of ``max_epochs``/``max_steps``, the
            default), "inverse_sqrt" (the paper's §5.3 decay),
            "cosine_time" (to zero when the time budget ``--trainer.max_time`` runs out, or at the last step
            of ``max_epochs``/``max_steps`` if that comes first) or "constant".
        weight_decay: AdamW weight decay of matrices (not of biases and norms).
        adam_beta2: AdamW's second-moment decay (0.98 in the paper).
        label_smoothing: label smoothing of the training loss (0.1 in the paper, §5.4).
        decode_every_n_epochs: decode validation sentences for BLEU, chrF and exact match every N epochs,
            and at the first validation and the end of training whatever N (0: never).
        decode_max_sentences: decode only the first N validation sentences, in corpus order (None: all).
        decode_beam_size: beam size for validation decoding (1: greedy).
        decode_max_len: most tokens to generate per sentence (None: twice the source length plus 10; raise it
            for tasks whose outputs are much longer than their inputs, such as SCAN). evaluate.py uses it too.
        num_text_samples: source / reference / hypothesis triples shown in TensorBoard at each decoding.
        compile: train through ``torch.compile`` of the model's forward (validation and decoding stay eager).
        alignment_layer: guided alignment (Garg et al. 2019): the decoder layer, counted from 1, one of whose
            cross-attention heads is trained to follow the word links of ``--data.alignment_labels`` (the
            paper supervises the penultimate layer); None (the default): no supervision.
        alignment_head: the supervised head of that layer, counted from 1; given with ``alignment_layer``.
        alignment_weight: λ, the weight of the alignment loss added to the translation loss (0.05 in the
            paper).
        alignment_shift: supervise the head where Shift-Att reads it (Chen et al. 2020): each target word's
            links train the row of the step that takes the word as input, which has read it, instead of the
            row of the step that produces it, which must first guess it. Read such a head with the
            ``shift_att`` explanation.
        alignment_full_context: read the supervised head, in training and when it aligns, in a second pass
            without the decoder's causal mask, every position seeing the whole target (Garg et al. 2019's
            "full context"): a word's links may depend on the words after it. The second pass runs the
            decoder up to the supervised layer again: a share of each step's time (docs/explanations.md).
        alignment_null: train the rows of target tokens without a link (an article, a comma the aligner left
            alone) toward the source's end-of-sentence token, the head's "none of these words", instead of
            leaving them free: the head learns to say a word is unaligned, and a word map, which has no column
            for that token, shows it as a row of small shares that an extraction's floor can drop.
    """

    def __init__(
        self,
        *,
        src_vocab_size: int = 0,
        tgt_vocab_size: int = 0,
        pad_id: int = SPECIALS.pad_id,
        bos_id: int = SPECIALS.bos_id,
        eos_id: int = SPECIALS.eos_id,
        d_model: int = TransformerConfig.d_model,
        num_heads: int = TransformerConfig.num_heads,
        num_encoder_layers: int = TransformerConfig.num_encoder_layers,
        num_decoder_layers: int = TransformerConfig.num_decoder_layers,
        d_ff: int = TransformerConfig.d_ff,
        dropout: float = TransformerConfig.dropout,
        attention_dropout: float = TransformerConfig.attention_dropout,
        activation: Activation = TransformerConfig.activation,
        max_len: int = TransformerConfig.max_len,
        norm_first: bool = TransformerConfig.norm_first,
        tie_output_embedding: bool = TransformerConfig.tie_output_embedding,
        share_embeddings: bool = TransformerConfig.share_embeddings,
        positional: Positional = TransformerConfig.positional,
        scale_embedding: bool = TransformerConfig.scale_embedding,
        logits_bias: bool = TransformerConfig.logits_bias,
        lr: float = 2e-3,
        warmup_steps: int = 200,
        schedule: Schedule = "cosine",
        weight_decay: float = 0.01,
        adam_beta2: float = 0.98,
        label_smoothing: float = 0.1,
        decode_every_n_epochs: int = 1,
        decode_max_sentences: int | None = 1000,
        decode_beam_size: int = 1,
        decode_max_len: int | None = None,
        num_text_samples: int = 3,
        compile: bool = False,
        alignment_layer: int | None = None,
        alignment_head: int | None = None,
        alignment_weight: float = 0.05,
        alignment_shift: bool = False,
        alignment_full_context: bool = False,
        alignment_null: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_training_settings(self.hparams)
        # The architecture arguments, one for one with TransformerConfig's fields (whose defaults they take;
        # the special ids, which it leaves without defaults, default to data.special's).
        self.config = TransformerConfig(**{f.name: self.hparams[f.name] for f in fields(TransformerConfig)})
        self.model = Transformer(self.config)
        self._throughput_tokens = 0
        self._throughput_start: float | None = None
        self._base_seed = 0
        self._train_forward = None  # torch.compile of self.model.forward, made at the first training step
        self._bad_loss: Tensor | None = None  # the first non-finite training loss (see _watch_loss)
        self._bad_loss_step: Tensor | None = None  # its step, or -1
        self.lr_schedule = LearningRateSchedule(self.hparams.schedule, self.hparams.warmup_steps, self)
        self._reset_validation_state()
        self.last_decoded: list[tuple[int, str]] = []  # (validation index, hypothesis) of the last decoding
        self._decoding = False  # whether this validation decodes (due_at_validation, decided at its start)
        self._decoded_step: int | None = None  # the step of the last decoding in this fit
        self._start_step = 0  # the step this fit started from
        self._end_scores: dict[str, float] = {}  # the scores of a decoding at the end of training

    # -- training --------------------------------------------------------------------------------------------

    def loss(
        self, logits: Tensor, tgt_out: Tensor, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """Cross-entropy of logits (B, T, V) against tgt_out (B, T), or of packed (N, V) against (N,);
        padding targets count for nothing."""
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            tgt_out.reshape(-1),
            ignore_index=self.config.pad_id,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )

    def training_step(self, batch, batch_idx: int) -> Tensor:
        # Nothing here makes the host wait for the device: where the tokens sit was found on the CPU while
        # collating, and values are read back only on log steps (and where a run checks its loss).
        translation, alignment = self._training_losses(batch)
        loss = self._objective(translation, alignment)
        self._watch_loss(loss)
        if self._is_log_step():
            self._stop_if_loss_was_not_finite()
            # Host copies: the progress bar reads its values at every step, and would wait for a device one.
            # The translation loss alone, comparable with runs without guided alignment.
            self.log("train/loss", translation.detach().cpu(), prog_bar=True, batch_size=batch.src.size(0))
            if alignment is not None:
                self.log("train/alignment_loss", alignment.detach().cpu(), batch_size=batch.src.size(0))
            self.log("train/lr", host_scalar(self.optimizers().param_groups[0]["lr"]))
            if self.hparams.schedule == "cosine_time":
                self.log("train/time_fraction", host_scalar(self.lr_schedule.time_fraction()))
                total = self.lr_schedule.estimated_total_steps(self.global_step + 1)
                self.log("train/estimated_total_steps", host_scalar(total))
        self._count_tokens(batch)
        return loss

    def _training_loss(self, batch) -> Tensor:
        """What a batch trains on: the model's forward and the loss, one graph for ``compile``."""
        return self._objective(*self._training_losses(batch))

    def _training_losses(self, batch) -> tuple[Tensor, Tensor | None]:
        """The label-smoothed translation loss of a batch and, where a head is supervised and the batch has
        alignment labels (``Batch.alignment``, (B, T, S)), its alignment loss; else None."""
        tokens = token_index_of(batch, self.config.pad_id)
        head = self.alignment_head
        if head is None or getattr(batch, "alignment", None) is None:
            logits = self._training_forward()(batch.src, batch.tgt_in, tokens=tokens)  # (N, V)
            return self.loss(logits, tokens.labels(batch.tgt_out), self.hparams.label_smoothing), None
        logits, attention = self._training_forward()(
            batch.src, batch.tgt_in, tokens=tokens, alignment_head=head
        )  # (N, V), (B, T, S)
        translation = self.loss(logits, tokens.labels(batch.tgt_out), self.hparams.label_smoothing)
        labels = batch.alignment
        if self.hparams.get("alignment_null", False):
            labels = with_null(labels, batch.src, batch.tgt_out, self.config.pad_id)
        if self.hparams.get("alignment_shift", False):  # row t + 1 reads the token row t produces
            return translation, alignment_loss(attention[:, 1:], labels[:, :-1])
        return translation, alignment_loss(attention, labels)

    def _objective(self, translation: Tensor, alignment: Tensor | None) -> Tensor:
        """The translation loss, plus λ times the alignment loss where there is one."""
        return translation if alignment is None else translation + self.hparams.alignment_weight * alignment

    @property
    def alignment_head(self) -> AlignedHead | None:
        """The (decoder layer, head) guided alignment supervises, counted from 0 as the model counts them, and
        whether it is read with the full target (``alignment_full_context``); None without supervision."""
        layer, head = self.hparams.get("alignment_layer"), self.hparams.get("alignment_head")
        full = bool(self.hparams.get("alignment_full_context", False))
        return None if layer is None or head is None else AlignedHead(layer - 1, head - 1, full)

    @property
    def full_context_layer(self) -> int | None:
        """The decoder layer (from 0) whose cross-attention is read with the whole target in view: the
        supervised head's, where it trained so (``alignment_full_context``); else None."""
        head = self.alignment_head
        return head.layer if head is not None and head.full_context else None

    def _is_log_step(self) -> bool:
        """Whether the metrics of the current optimiser step reach the logger (every ``log_every_n_steps``-th,
        as Lightning counts them)."""
        return (self.global_step + 1) % self.trainer.log_every_n_steps == 0

    # -- the non-finite loss guard: one host-device sync, only where the host reads values anyway ------------

    def _watch_loss(self, loss: Tensor) -> None:
        """Remember on the device the first training loss that is NaN or infinite, and its step."""
        if self._bad_loss is None or self._bad_loss.device != loss.device:
            self._bad_loss_step = torch.full((), -1, dtype=torch.int64, device=loss.device)
            self._bad_loss = torch.zeros((), dtype=torch.float32, device=loss.device)
        first = (self._bad_loss_step < 0) & ~torch.isfinite(loss.detach())
        self._bad_loss_step = torch.where(first, self.global_step, self._bad_loss_step)
        self._bad_loss = torch.where(first, loss.detach().float(), self._bad_loss)

    def _stop_if_loss_was_not_finite(self) -> None:
        """Stop the run if a training loss so far, on any rank, was not finite.

        Called on every rank at the same points (log steps, validation, checkpoints, the end of training), it
        gathers each rank's first bad loss (one small all-reduce), so that every rank raises together with
        the same message. A rank that raised alone would leave the others waiting in the next all-reduce.
        """
        if self._bad_loss is None:  # no training step yet, on any rank
            return
        # Each rank writes its row, the sum gathers them: (world size, 2) of (first bad step or -1, loss).
        every = torch.zeros(self.trainer.world_size, 2, device=self._bad_loss.device)
        every[self.global_rank] = torch.stack([self._bad_loss_step.float(), self._bad_loss])
        every = self.trainer.strategy.reduce(every, reduce_op="sum").tolist()
        bad = [(step, rank, loss) for rank, (step, loss) in enumerate(every) if step >= 0]
        if not bad:
            return
        step, rank, loss = min(bad)
        where = f" on rank {rank}" if len(every) > 1 else ""
        raise NonFiniteLossError(f"training loss is {loss} at step {int(step)}{where}; {STOPPING}")

    def on_validation_start(self) -> None:
        self._stop_if_loss_was_not_finite()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self._stop_if_loss_was_not_finite()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # Lightning's restore (resuming a run) loads the weights after this hook: under today's names.
        checkpoint["state_dict"] = upgrade_state_dict(checkpoint["state_dict"])

    def on_train_end(self) -> None:
        self._stop_if_loss_was_not_finite()
        trained = self.global_step != self._start_step
        validates = self.hparams.decode_every_n_epochs and self.trainer.limit_val_batches != 0
        if trained and validates and self._decoded_step != self.global_step:
            self._decode_at_end()

    def _training_forward(self):
        """The model's forward, compiled once with ``torch.compile`` when ``compile`` is set."""
        if not self.hparams.get("compile", False):
            return self.model
        if self._train_forward is None:
            # A compiled bound method, not a compiled module: nothing is registered as a submodule, so the
            # checkpoint's weights keep their names.
            self._train_forward = torch.compile(self.model.forward)
        return self._train_forward

    def _count_tokens(self, batch) -> None:
        """Log source + target tokens per second (padding excluded), measured over each logging interval."""
        # Not ThroughputMonitor: it synchronises the GPU at every batch; this reads the count once per log.
        pad = self.config.pad_id
        # Counted on the device and read only when logged, so that a GPU is not made to wait every step.
        self._throughput_tokens = (
            self._throughput_tokens + (batch.src != pad).sum() + (batch.tgt_out != pad).sum()
        )
        now = time.perf_counter()
        if self._throughput_start is None:
            self._throughput_start, self._throughput_tokens = now, 0
        elif self._is_log_step():
            # The total of every rank: each counted its own batches over (nearly) the same interval.
            counted = torch.as_tensor(self._throughput_tokens, device=self.device).reshape(1).double()
            tokens = float(self.trainer.strategy.reduce(counted, reduce_op="sum")[0])
            self.log("train/tokens_per_s", tokens / max(now - self._throughput_start, 1e-9))
            self._throughput_start, self._throughput_tokens = now, 0

    def on_before_optimizer_step(self, optimizer) -> None:
        if self._is_log_step():
            # Lightning calls this hook before it clips the gradients: the norm logged is the unclipped one.
            # All gradients as one vector, computed on the device (foreach norms), read when logged.
            gradients = [p.grad for p in self.parameters() if p.grad is not None]
            self.log("train/grad_norm", torch.nn.utils.get_total_norm(gradients, norm_type=2.0))

    def configure_optimizers(self):
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.hparams.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams.lr,
            betas=(0.9, self.hparams.adam_beta2),
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, self.lr_schedule.factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_train_start(self) -> None:
        self._base_seed = torch.initial_seed()
        self._start_step = self.global_step
        if self.hparams.schedule == "cosine_time":
            self.lr_schedule.timer()  # fail now, not at the end of warm-up

    # -- validation ------------------------------------------------------------------------------------------

    def _reset_validation_state(self) -> None:
        # Per validation batch, on the device: the sentences' indices, summed NLLs and target token counts.
        self._val_index: list[Tensor] = []
        self._val_nll: list[Tensor] = []
        self._val_tokens: list[Tensor] = []
        self._val_decoded: list[tuple[int, list[int]]] = []

    def _decoding_this_validation(self) -> bool:
        every = self.hparams.decode_every_n_epochs
        return due_at_validation(self.trainer, every, done_before=self._decoded_step is not None)

    def on_validation_epoch_start(self) -> None:
        self._reset_validation_state()
        self._decoding = self._decoding_this_validation()

    def validation_step(self, batch, batch_idx: int) -> None:
        keep = batch.tgt_out != self.config.pad_id
        tokens = token_index_of(batch, self.config.pad_id)
        logits = self.model(batch.src, batch.tgt_in, tokens=tokens)  # (N, V)
        nll = self.loss(logits, tokens.labels(batch.tgt_out), reduction="none")  # (N,), tokens in row order
        rows = tokens.target // keep.size(1)  # (N,): each token's sentence
        dtype = sum_dtype(self.device)
        per_sentence = torch.zeros(keep.size(0), dtype=dtype, device=nll.device).index_add_(
            0, rows, nll.to(dtype)
        )  # (B,)
        self._val_index.append(batch.index.to(nll.device))
        self._val_nll.append(per_sentence)
        self._val_tokens.append(keep.sum(dim=1).to(dtype))
        if self._decoding:
            self._decode(batch)

    def _decode(self, batch) -> None:
        """Translate the batch's sentences among the first ``decode_max_sentences`` of the split."""
        limit = self.hparams.decode_max_sentences
        # The first sentences of the split, not the first batches: the loader sorts by length.
        chosen = batch.index < limit if limit is not None else torch.ones_like(batch.index, dtype=torch.bool)
        if bool(chosen.any()):
            hypotheses = self.model.generate(
                batch.src[chosen],
                max_len=self.hparams.decode_max_len,
                beam_size=self.hparams.decode_beam_size,
            )  # (chosen rows, L)
            for index, row in zip(batch.index[chosen].tolist(), hypotheses.tolist()):
                self._val_decoded.append((index, row))

    def _validation_totals(self) -> Tensor:
        """(summed NLL, target tokens) over the validation sentences of every rank, each sentence once.

        A distributed sampler gives every rank the same number of batches by repeating a few (wrap-around):
        the sums are kept per sentence and reduced with max, so that a sentence scored on two ranks (or twice
        on one) counts once, and the totals equal those of a single process.
        """
        # Not torchmetrics' SumMetric: the module's .to(dtype) under "bf16-true" would cast its float64 sums.
        dtype, strategy = sum_dtype(self.device), self.trainer.strategy
        index = torch.cat(self._val_index) if self._val_index else torch.zeros(0, dtype=torch.int64)
        index = index.to(self.device)
        size = index.max().reshape(1) + 1 if index.numel() else torch.zeros(1, dtype=torch.int64)
        size = int(strategy.reduce(size.to(self.device), reduce_op="max")[0])  # the split's size, as seen
        per_sentence = torch.zeros(2, size, dtype=dtype, device=self.device)  # (2, sentences)
        if index.numel():
            per_sentence[0, index] = torch.cat(self._val_nll).to(self.device)
            per_sentence[1, index] = torch.cat(self._val_tokens).to(self.device)
        per_sentence = strategy.reduce(per_sentence, reduce_op="max")  # NLL and counts are >= 0; unseen: 0
        return per_sentence.sum(dim=1)  # (2,)

    def on_validation_epoch_end(self) -> None:
        totals = self._validation_totals()
        nll = (totals[0] / totals[1].clamp(min=1)).item()
        if not math.isfinite(nll):
            # The training losses were finite, but the last updates ruined the weights (an epoch's last step
            # is checked by the training loss only at the next one). Stopped here, before a checkpoint keeps
            # them; every rank holds the same totals, so every rank raises together.
            raise NonFiniteLossError(
                f"validation loss is {nll} at step {self.global_step}: the weights diverged; {STOPPING}"
            )
        # Every rank holds the same totals (and below, the same decoded sentences): syncing averages equal
        # values.
        self.log("val/loss", nll, sync_dist=True)
        self.log("val/ppl", math.exp(min(nll, 50.0)), sync_dist=True)
        if self._decoding:
            scores = self._score_decoded()
            for name, value in scores.items():
                self.log(name, value, sync_dist=True)

    def _score_decoded(self) -> dict[str, float]:
        """BLEU, chrF and exact match of the sentences decoded on every rank (one all-gather); shows a few in
        TensorBoard."""
        decoded = self._val_decoded
        if dist.is_available() and dist.is_initialized():
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, decoded)
            decoded = [item for part in gathered for item in part]
        datamodule = self.trainer.datamodule
        pairs = datamodule.pairs("val")
        decoded = sorted(dict(decoded).items())  # one hypothesis per sentence, in corpus order
        hypotheses = [datamodule.tgt_tokenizer.decode(ids) for _, ids in decoded]
        references = [pairs[i].target for i, _ in decoded]
        # Not torchmetrics' SacreBLEUScore: float32, no sacreBLEU exp smoothing (0 if no 4-gram matches).
        scores = score_translations(hypotheses, references, tokenize=self._bleu_tokenize())
        self.last_decoded = [(i, h) for (i, _), h in zip(decoded, hypotheses)]
        self._decoded_step = self.global_step
        self._log_text_samples(pairs)
        return {"val/bleu": scores.bleu, "val/chrf": scores.chrf, "val/exact_match": scores.exact_match}

    def _decode_at_end(self) -> None:
        """Decode the validation sentences with the final weights where the last validation did not (training
        stopped by ``max_steps`` between validations, or by an early stop after one that did not decode), so
        that every run ends with its BLEU. Every rank decodes its share, as in validation."""
        was_training = self.training
        self.eval()
        self._reset_validation_state()
        with torch.inference_mode():
            for batch in self.trainer.datamodule.val_dataloader():
                self._decode(self.transfer_batch_to_device(batch, self.device, 0))
        self.train(was_training)
        self._end_scores = self._score_decoded()
        if self.logger is not None:
            self.logger.log_metrics(self._end_scores, step=self.global_step)  # self.log is closed here

    def _log_text_samples(self, pairs) -> None:
        experiment = getattr(self.logger, "experiment", None)
        if not self.trainer.is_global_zero or not hasattr(experiment, "add_text"):
            return
        rows = ["| source | reference | hypothesis |", "|---|---|---|"]
        for index, hypothesis in self.last_decoded[: self.hparams.num_text_samples]:
            cells = (pairs[index].source, pairs[index].target, hypothesis)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        experiment.add_text("samples", "\n".join(rows), self.global_step)

    # -- run bookkeeping -------------------------------------------------------------------------------------

    def on_fit_end(self) -> None:
        """Record the hyperparameters beside the final validation metrics (TensorBoard's HPARAMS tab)."""
        if self.logger is None or not self.trainer.is_global_zero:
            return
        logged = {name: float(value) for name, value in self.trainer.callback_metrics.items()}
        metrics = {
            f"final/{name.split('/')[-1]}": value
            for name, value in (logged | self._end_scores).items()
            if name.startswith("val/")
        }
        if metrics:
            self.logger.log_hyperparams(dict(self.hparams), metrics)

    def _bleu_tokenize(self) -> str:
        """sacreBLEU's tokenizer for the target language of the data (``zh`` for Chinese, 13a for the toy
        tasks), as evaluate.py chooses it."""
        return validation_bleu_tokenizer(self.trainer.datamodule)

    def setup(self, stage: str) -> None:
        """Check that the model can read every pair it will be given, so that a sentence longer than
        ``max_len`` stops the run now, naming its file and line, not at the first validation or in
        evaluate.py."""
        splits = {"fit": ("train", "val", "test"), "validate": ("val",), "test": ("test",)}.get(stage, ())
        datamodule = self.trainer.datamodule
        if splits and hasattr(datamodule, "check_fits"):  # any other data module: its own business
            datamodule.check_fits(self.config.max_len, splits)
        problem = self.alignment_problem(datamodule) if stage == "fit" else None
        if problem is not None:
            raise ValueError(problem)

    def alignment_problem(self, datamodule) -> str | None:
        """Why guided alignment cannot train on ``datamodule``: a supervised head without its labels, or
        labels without a head; None where it can (train.py asks before training: one line, no traceback)."""
        labels = getattr(datamodule, "alignment_labels", None)
        if self.alignment_head is not None and labels is None:
            return ("--model.alignment_layer and --model.alignment_head supervise a head with the links of "
                    "--data.alignment_labels (a file, or eflomal), which is not given")
        if self.alignment_head is None and labels is not None:
            return (f"--data.alignment_labels {labels} needs a head to supervise: give "
                    "--model.alignment_layer and --model.alignment_head (the paper's is a head of the "
                    "penultimate decoder layer)")
        return None

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        # Dropout draws from a generator seeded by the step (as fairseq does), so a resumed run draws exactly
        # the masks an uninterrupted one would, whatever else consumed random numbers in between.
        torch.manual_seed(dropout_seed(self._base_seed, self.global_step, self.global_rank))
