"""TensorBoard pictures of every attention head, and numbers about what each head does.

At every N-th validation, for a few validation sentences fixed at the start of training, the model is run once
through its weight-returning attention path (ordinary training steps stay on the fused kernel) and logs:

- ``attention_<kind>/sentence_<i>/layer_<l>/head_<h>``: one heatmap per layer and head, tokens on the axes;
- ``attention_overview/<kind>/sentence_<i>``: the layers × heads grid of the same maps;
- ``heads/<kind>_<statistic>``: a layers × heads heatmap of each head statistic over a larger set of validation
  sentences (entropy, attended distance, share on the diagonal / previous / next token, and on data with gold
  word alignments the agreement and alignment error rate of each cross-attention head);
- scalars ``heads/best_alignment`` and ``heads/best_aer`` (the best cross-attention head's figures).

Kinds are ``encoder`` (source self-attention), ``decoder`` (causal target self-attention) and ``cross``.
Rows (queries) of decoder and cross maps are labelled with the token being *generated* at that position; the
columns of decoder maps show the tokens it can see (BOS and the tokens before it).
"""

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from analysis.heads import summarize
from analysis.plots import attention_grid, attention_heatmap, figure_to_array, layer_head_matrix
from data.batching import collate

KINDS = ("encoder", "decoder", "cross")


class AttentionLogger(L.Callback):
    """Logs per-head attention maps and head statistics to TensorBoard during validation.

    Args:
        every_n_epochs: log at every N-th validation (0 turns logging off).
        num_sentences: fixed validation sentences whose maps are drawn.
        max_tokens: pick drawn sentences no longer than this (in tokens), so that labels stay legible.
        per_head: draw one heatmap per layer and head (else only the layers × heads overview).
        stats_sentences: validation sentences over which the head statistics are averaged (0: none).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        num_sentences: int = 2,
        max_tokens: int = 16,
        per_head: bool = True,
        stats_sentences: int = 200,
    ) -> None:
        super().__init__()
        self.every_n_epochs = every_n_epochs
        self.num_sentences = num_sentences
        self.max_tokens = max_tokens
        self.per_head = per_head
        self.stats_sentences = stats_sentences
        self._probes: list | None = None
        self._stats_items: list | None = None

    def _prepare(self, datamodule) -> None:
        """Choose the probe sentences once; they stay fixed so that the step slider shows the same maps."""
        pairs = datamodule.pairs("val")
        src_tok, tgt_tok = datamodule.src_tokenizer, datamodule.tgt_tokenizer
        items = [(i, src_tok.encode(p.source), tgt_tok.encode(p.target)) for i, p in enumerate(pairs)]
        short = [item for item in items if max(len(item[1]), len(item[2])) + 1 <= self.max_tokens]
        self._probes = (short or items)[: self.num_sentences]
        self._stats_items = items[: self.stats_sentences]
        self._pairs = pairs

    def _due(self, trainer) -> bool:
        n = self.every_n_epochs
        return n > 0 and not trainer.sanity_checking and (trainer.current_epoch + 1) % n == 0

    @rank_zero_only
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        experiment = getattr(trainer.logger, "experiment", None)
        if not self._due(trainer) or not hasattr(experiment, "add_image"):
            return
        datamodule = trainer.datamodule
        if self._probes is None:
            self._prepare(datamodule)
        special = pl_module.config
        step = trainer.global_step
        model = pl_module.model
        with torch.no_grad(), torch.autocast(pl_module.device.type, enabled=False):
            for number, item in enumerate(self._probes, start=1):
                self._log_sentence(experiment, model, item, datamodule, special, number, step, pl_module.device)
            if self._stats_items:
                self._log_head_statistics(experiment, model, special, step, pl_module)

    def _log_sentence(self, experiment, model, item, datamodule, special, number, step, device) -> None:
        batch = collate([item], pad_id=special.pad_id, bos_id=special.bos_id, eos_id=special.eos_id)
        _, maps = model(batch.src.to(device), batch.tgt_in.to(device), return_attention=True)
        src_tokens = datamodule.src_tokenizer.tokens(batch.src[0].tolist())
        tgt_in_tokens = datamodule.tgt_tokenizer.tokens(batch.tgt_in[0].tolist())
        tgt_out_tokens = datamodule.tgt_tokenizer.tokens(batch.tgt_out[0].tolist())
        axes = {  # kind -> (row tokens, column tokens)
            "encoder": (src_tokens, src_tokens),
            "decoder": (tgt_out_tokens, tgt_in_tokens),
            "cross": (tgt_out_tokens, src_tokens),
        }
        for kind, layers in zip(KINDS, maps):
            rows, cols = axes[kind]
            per_layer = [weights[0].float().cpu() for weights in layers]  # per layer (H, Tq, Tk)
            title = f"{kind} attention, sentence {number}, step {step}"
            image = figure_to_array(attention_grid(per_layer, rows, cols, title))
            experiment.add_image(f"attention_overview/{kind}/sentence_{number}", image, step, dataformats="HWC")
            if not self.per_head:
                continue
            for layer, heads in enumerate(per_layer, start=1):
                for head, weights in enumerate(heads, start=1):
                    figure = attention_heatmap(weights, rows, cols, f"{kind} layer {layer} head {head}")
                    tag = f"attention_{kind}/sentence_{number}/layer_{layer}/head_{head}"
                    experiment.add_image(tag, figure_to_array(figure), step, dataformats="HWC")

    def _log_head_statistics(self, experiment, model, special, step, pl_module) -> None:
        items = self._stats_items
        batch = collate(items, pad_id=special.pad_id, bos_id=special.bos_id, eos_id=special.eos_id)
        device = pl_module.device
        _, maps = model(batch.src.to(device), batch.tgt_in.to(device), return_attention=True)
        gold = [self._pairs[i].alignment for i, _, _ in items]
        has_gold = all(links is not None for links in gold)
        stats = summarize(
            {kind: [m.float().cpu() for m in layers] for kind, layers in zip(KINDS, maps)},
            src_valid=batch.src != special.pad_id,
            tgt_valid=batch.tgt_out != special.pad_id,
            gold=[set(links) for links in gold] if has_gold else None,
        )
        for kind, named in stats.items():
            for name, values in named.items():
                bounded = name in ("diagonal", "previous", "next", "agreement", "aer")
                figure = layer_head_matrix(
                    values, f"{kind}: {name} per head, step {step}", vmin=0.0 if bounded else None,
                    vmax=1.0 if bounded else None,
                )
                experiment.add_image(f"heads/{kind}_{name}", figure_to_array(figure), step, dataformats="HWC")
        if has_gold:
            pl_module.log("heads/best_alignment", stats["cross"]["agreement"].max().item(), rank_zero_only=True)
            pl_module.log("heads/best_aer", stats["cross"]["aer"].min().item(), rank_zero_only=True)
