"""Every attention head, logged to TensorBoard during validation: for the ATTENTION tab, and as pictures.

At the first validation, at every N-th epoch's, and at the end of training (after the last validation if
that one did not log: training stopped between validations, or early), a few validation sentences fixed at
the start of training go through the model's weight-returning attention path (ordinary training steps stay
on the fused kernel), and it logs:

- for the ATTENTION tab (``viz.tab``): the raw weights of every kind, layer and head of each probe
  sentence (float16) with its tokens; with ``explain_probes``, every explanation method's map of each probe
  (float16) and its logit lens (JSON); the head statistics as tensors; and on data with gold alignments each
  method's AER and agreement per layer (and per head) as tensors; a few hundred kB per validation;
- ``attention_overview/<kind>/sentence_<i>`` (IMAGES): the layers × heads grid of the first probes' maps;
- ``attention_<kind>/sentence_<i>/layer_<l>/head_<h>`` (IMAGES, with ``per_head``): one heatmap per head;
- ``heads/<kind>_<statistic>`` (IMAGES): a layers × heads heatmap of each head statistic over a larger set of
  validation sentences (entropy, attended distance, share on the diagonal / previous / next token, and on data
  with gold word alignments the agreement and alignment error rate of each cross-attention head);
- scalars ``heads/best_alignment`` and ``heads/best_aer`` (the best cross-attention head's figures);
- on data with gold alignments, scalars ``explain/<method>/aer_<layer>`` and
  ``explain/<method>/agreement_<layer>`` for the explanation methods of ``analysis.explain``
  (by default every method of ``analysis.explain.registry.METHODS`` but the ``costly`` Integrated Gradients)
  and layer, ``explain/<method>/best_aer`` (its best layer), and ``explain/seconds``, the time they
  took, over ``explanation_sentences`` validation sentences;
- on a gold set of more pairs than ``explanation_sentences``, the scored pairs choose each method's map (its
  layer or head of lowest forward arg-max AER, ``evaluation.gold_alignment.choose``) and the other pairs
  report it, as ``evaluate.py --gold-choose`` does: scalars ``explain/<method>/reported_aer`` and
  ``explain/reported_seconds``, the time the reporting pairs took;
- with ``explain_probes``, the scalar ``explain/probe_seconds``: the time the probes' explanation maps and
  logit lens took.

Kinds are ``encoder`` (source self-attention), ``decoder`` (causal target self-attention) and ``cross``; rows
and columns are labelled as ``analysis.axes`` says.

When the data names a gold alignment set (``gold.sentences`` and ``gold.alignments``: human gold on real
sentences), the probes and the scored sentences are its pairs, read word by word, and the ``explain/*``
scores are those of the forward arg-max on words (``evaluation.gold_alignment``, as ``evaluate.py
explain --gold-alignments`` scores them); each probe's gold links are drawn on the cells of their words'
tokens and its words logged beside them (``viz.tab.gold_words``), so that the tab scores its maps on words
too.
"""

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only

from analysis.explain.attributions import IG_STEPS_PREVIEW, MAX_IG_STEPS
from analysis.explain.registry import METHODS, check_methods
from analysis.explain.scores import AlignmentScores
from analysis.heads import STATISTIC, add_totals, summary_totals, totals_summary
from data.batching import collate
from data.gold import GoldSet
from evaluation.ablation import AnalysisError
from evaluation.alignment import check_alignable, one_token_per_word
from evaluation.explanations import explain_pass, explanation_alignment, lens_of, lens_record
from evaluation.forced import ForcedPass, SentenceTokens, forced_pass, sentence_pass
from evaluation.gold_alignment import (
    GoldItem,
    Parts,
    WordAlignmentScores,
    check_sure_links,
    choose,
    encode_gold,
    fits,
    gold_alignment,
    reported,
    token_cells,
)
from training.module import due_at_validation
from viz.plots import attention_grid, attention_heatmap, layer_head_matrix
from viz.tab.gold_words import gold_words_record
from viz.tab.metadata import (
    ABOUT,
    HEAD_SCORES,
    LAYER_SCORES,
    REPORTED,
    RUN_TAG,
    explain_tag,
    sentence_tag,
    statistic_tag,
)
from viz.tab.summary import json_summary, tensor_summary


class AttentionLogger(L.Callback):
    """Logs per-head attention weights, pictures and head statistics to TensorBoard during validation.

    Args:
        every_n_epochs: log at every N-th epoch's validation, and at the first validation and the end of
            training whatever N, so that every run shows in the ATTENTION tab (0 turns logging off).
        num_sentences: probe sentences whose weights the ATTENTION tab shows.
        num_images: of those, how many are also drawn as IMAGES (the layers × heads overview of each kind).
        max_tokens: pick probe sentences no longer than this (in tokens), so that labels stay legible.
        per_head: also draw one image per layer and head (the ATTENTION tab shows them without it).
        stats_sentences: validation sentences over which the head statistics are averaged (0: none).
        max_bytes: most bytes logged per validation for the ATTENTION tab: each probe's attention
            weights, its explanation maps and logit lens, then the explanation scores. The probes are logged
            in order until one would exceed it; that one and every later probe are left out (with a warning),
            so the logged sentences are always 0 .. k-1, and long sentences and big models keep the event file
            bounded. Scores that do not fit in what the probes left are left out of the tab (with a warning;
            the ``explain/*`` scalars keep them).
        stats_max_bytes: most bytes of attention maps the head-statistics forward holds at once; the
            ``stats_sentences`` are run in length-sorted batches under it (at least one sentence a batch).
        explanation_sentences: validation sentences over which every explanation method is scored against
            the gold alignments (0: none; data without gold alignments logs none).
        explanation_methods: the methods scored (``analysis.explain.registry.METHODS``); None = every
            method but the ``costly`` ones (Integrated Gradients; ``evaluate.py explain`` scores
            it).
        ig_steps: Integrated Gradients' points of the path integral, the methods' main cost (``evaluate.py
            explain`` takes ``IG_STEPS`` by default; for the arg-max alignment
            ``IG_STEPS_PREVIEW`` are a cheap estimate).
        explain_probes: also log every method of ``analysis.explain.registry.METHODS`` (Integrated Gradients
            with ``ig_steps``) and the logit lens of each probe sentence under forced decoding of its
            reference, for the ATTENTION tab; they count against ``max_bytes`` with the probe's weights.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        num_sentences: int = 4,
        num_images: int = 2,
        max_tokens: int = 16,
        per_head: bool = False,
        stats_sentences: int = 200,
        max_bytes: int = 1_000_000,
        stats_max_bytes: int = 256_000_000,
        explanation_sentences: int = 50,
        explanation_methods: list[str] | None = None,
        ig_steps: int = IG_STEPS_PREVIEW,
        explain_probes: bool = True,
    ) -> None:
        super().__init__()
        counts = (every_n_epochs, num_sentences, num_images, stats_sentences, max_bytes)
        counts += (explanation_sentences,)
        if min(counts) < 0 or max_tokens < 1 or ig_steps < 1:
            raise ValueError("attention logging counts must be >= 0; max_tokens and ig_steps positive")
        if stats_max_bytes < 1:
            raise ValueError(f"stats_max_bytes must be positive, got {stats_max_bytes}")
        if ig_steps > MAX_IG_STEPS:
            raise ValueError(f"ig_steps must be at most {MAX_IG_STEPS}, got {ig_steps}")
        self.explanation_sentences = explanation_sentences
        methods = explanation_methods
        if methods is None:
            methods = [name for name, method in METHODS.items() if not method.costly]
        self.explanation_methods = check_methods(methods)
        self.ig_steps = ig_steps
        self.explain_probes = explain_probes
        self._explain_pairs: list | None = None
        self._gold_items: dict = {}  # gold pair index -> GoldItem, with a gold set
        self._reporting: Reporting | None = None  # a gold set's pairs past the scored ones
        self.every_n_epochs = every_n_epochs
        self.num_sentences = num_sentences
        self.num_images = num_images
        self.max_tokens = max_tokens
        self.per_head = per_head
        self.stats_sentences = stats_sentences
        self.max_bytes = max_bytes
        self.stats_max_bytes = stats_max_bytes
        self._probes: list | None = None
        self._stats_items: list | None = None
        self._warned_budget = False
        self._warned_scores = False
        self._logged_step: int | None = None  # the step of the last logging in this fit
        self._end_logger = None  # at the end of training, the logger the scalars go to (else pl_module.log)
        self._start_step = 0  # the step this fit started from

    def _prepare(self, datamodule, max_len: int | None = None) -> None:
        """Choose the probe sentences once; they stay fixed so that the step slider shows the same maps.

        With a gold set (``datamodule.gold_set()``), the probes and the scored sentences are its pairs, read
        word by word (``evaluation.gold_alignment``; pairs the model cannot read in ``max_len`` positions are
        left out, warned of); the head statistics stay on validation sentences.
        """
        src_tok, tgt_tok = datamodule.src_tokenizer, datamodule.tgt_tokenizer
        val = datamodule.pairs("val")
        items = [(i, src_tok.encode(p.source), tgt_tok.encode(p.target)) for i, p in enumerate(val)]
        self._stats_pairs, self._stats_items = val, items[: self.stats_sentences]
        gold = datamodule.gold_set()
        named = gold is not None  # a gold set of its own, not a split's links read as one
        scored = val[: self.explanation_sentences]
        if gold is None and scored and all(p.alignment is not None for p in val) and not one_token_per_word(
            scored, src_tok, tgt_tok
        ):  # gold links of words written without spaces (the Han-script toy): scored on words, as a gold set
            gold = GoldSet(val)
        self._pairs, self._gold_items = val, {}
        if gold is not None:
            encoded = encode_gold(gold, src_tok, tgt_tok)
            self._pairs = gold.pairs
            self._gold_items = {i: item for i, item in enumerate(encoded)
                                if max_len is None or fits(item, max_len)}
            if len(self._gold_items) < len(encoded):
                warnings.warn(f"attention logging: {len(encoded) - len(self._gold_items)} gold pairs are "
                              f"longer than the model's max_len {max_len} and are left out", stacklevel=2)
            items = [(i, g.source.ids, g.target.ids) for i, g in self._gold_items.items()]
        short = [item for item in items if max(len(item[1]), len(item[2])) + 1 <= self.max_tokens]
        self._probes = (short or items)[: max(self.num_sentences, self.num_images)]
        if gold is not None:
            self._explain_pairs = [self._gold_items[i] for i, _, _ in items[: self.explanation_sentences]]
            if self._explain_pairs:  # by evaluate.py explain's rule for gold sets
                check_sure_links(self._explain_pairs, datamodule.gold.alignments or "the validation split")
            if named:  # a split's own links (the toy's) choose and report on the same pairs
                self._reporting = Reporting.of([item for _, item in sorted(self._gold_items.items())],
                                               self.explanation_sentences)
            return
        self._explain_pairs = val[: self.explanation_sentences]
        if self._explain_pairs:
            try:
                check_alignable(self._explain_pairs, src_tok, tgt_tok, "explanation logging")
            except AnalysisError:
                self._explain_pairs = []  # no gold links (Multi30k, TSV files): nothing to score against

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """With a gold set to score, choose the probes now: a set that cannot be scored stops the run before
        its first step (``check_sure_links``), not at its first logging validation."""
        gold_set = getattr(trainer.datamodule, "gold_set", None)
        if self.every_n_epochs and self.explanation_sentences and gold_set is not None and gold_set():
            self._prepare(trainer.datamodule, pl_module.model.config.max_len)

    def _due(self, trainer) -> bool:
        return due_at_validation(trainer, self.every_n_epochs, done_before=self._logged_step is not None)

    @rank_zero_only
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_step = trainer.global_step
        experiment = getattr(trainer.logger, "experiment", None)
        writer = _file_writer(experiment)
        if self.every_n_epochs and writer is not None:
            # Now, not at the first validation: TensorBoard shows the tab, and the tab lists the run, from the
            # start of training, saying when the first maps come.
            about = {"every_n_epochs": self.every_n_epochs}
            if (supervised := supervised_head(pl_module, trainer.datamodule)) is not None:
                about["supervised"] = supervised
            summary = json_summary(RUN_TAG, about)
            writer.add_summary(summary, trainer.global_step)
            experiment.flush()

    @rank_zero_only
    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._due(trainer):
            self._log(trainer, pl_module)

    @rank_zero_only
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log the final weights where the last validation did not: training stopped by ``max_steps``
        between validations, or by an early stop decided after a validation that did not log."""
        trained = trainer.global_step != self._start_step
        if self.every_n_epochs and trained and self._logged_step != trainer.global_step:
            was_training = pl_module.training
            pl_module.eval()
            self._end_logger = trainer.logger
            try:
                self._log(trainer, pl_module)
            finally:
                self._end_logger = None
                pl_module.train(was_training)

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        experiment = getattr(trainer.logger, "experiment", None)
        if not hasattr(experiment, "add_figure"):
            return
        self._logged_step = trainer.global_step
        datamodule = trainer.datamodule
        if self._probes is None:
            self._prepare(datamodule, pl_module.model.config.max_len)
        step = trainer.global_step
        model = pl_module.model
        src_tok, tgt_tok = datamodule.src_tokenizer, datamodule.tgt_tokenizer
        # Validation runs under inference mode; the gradient methods need a pass made outside it.
        with torch.no_grad(), torch.inference_mode(False):
            budget, logging, explaining = self.max_bytes, True, 0.0
            for number, (index, src_ids, tgt_ids) in enumerate(self._probes):
                seen = sentence_pass(model, src_ids, tgt_ids)
                tokens, maps = seen.tokens(src_tok, tgt_tok), seen.sentence_maps()
                if not seen.finite():
                    # A diverged model: its maps, lens and scores would be NaN; the module stops the run
                    # when it finds its validation loss is NaN too, after the callbacks' epoch end.
                    warnings.warn(
                        f"attention logging: the attention weights at step {step} are not finite (the "
                        "training diverged); nothing more is logged at this validation"
                    )
                    return
                if number < self.num_sentences and logging:
                    explained = None
                    if self.explain_probes:
                        start = time.perf_counter()
                        explained = self._explain_probe(model, tgt_tok, seen)
                        explaining += time.perf_counter() - start
                    written = self._log_tensors(
                        experiment, tokens, maps, self._pairs[index], number, step, budget, explained,
                        self._gold_items.get(index),
                    )
                    logging = written is not None  # past the budget: no later probe, so no gap in the ids
                    budget -= written or 0
                if number < self.num_images:
                    self._log_images(experiment, tokens, maps, number + 1, step)
            if self._stats_items:
                self._log_head_statistics(experiment, model, pl_module.config, step, pl_module)
        if self.explain_probes and self.num_sentences:
            self._scalar(pl_module, "explain/probe_seconds", explaining)
        if self._explain_pairs:
            self._log_explanations(model, datamodule, pl_module, experiment, step, budget)

    def _scalar(self, pl_module: L.LightningModule, name: str, value: float) -> None:
        """Log a scalar: through ``pl_module.log`` in a validation, straight to the logger at the end of
        training, where Lightning closes ``log``."""
        if self._end_logger is None:
            pl_module.log(name, value, rank_zero_only=True)
        else:
            self._end_logger.log_metrics({name: value}, step=self._logged_step)

    def _explain_probe(self, model, tgt_tokenizer, seen: ForcedPass) -> "ProbeExplanation":
        """Every method's map and the logit lens of one probe, from its pass under forced decoding of its
        reference."""
        with torch.enable_grad():  # the gradient methods need autograd
            explanations = explain_pass(seen, list(METHODS), ig_steps=self.ig_steps)
        lens = lens_of(model, seen)
        maps, described = {}, []
        for name, explanation in explanations.items():
            per_head = explanation.per_head is not None
            described.append({"name": name, "label": METHODS[name].label, "per_head": per_head,
                              "signed": explanation.signed, "layers": list(explanation.layers)})
            if METHODS[name].weights:
                continue  # the cross weights, logged already
            maps[name] = _half(explanation.per_head if per_head else explanation.per_layer)
            if per_head:  # a layer's map is not always its heads' mean (value norms: the norm of a sum)
                maps[f"{name}/per_layer"] = _half(explanation.per_layer)
        return ProbeExplanation(maps, described, lens_record(lens, tgt_tokenizer))

    def _log_tensors(
        self, experiment, tokens: SentenceTokens, maps: dict, pair, number: int, step: int, budget: int,
        explained: "ProbeExplanation | None" = None, gold: GoldItem | None = None,
    ) -> int | None:
        """Write one probe's weights (``ForcedPass.sentence_maps``; and its explanations, when given) for the
        ATTENTION tab if they fit in the budget: the bytes written, or None when they do not fit. ``gold``:
        the probe as a gold pair read word by word, its links drawn on its tokens and scored on words."""
        arrays = {kind: torch.stack(layers).to(torch.float16).numpy() for kind, layers in maps.items()}
        size = sum(array.nbytes for array in arrays.values())  # (L, H, Tq, Tk) each
        if explained is not None:
            size += explained.nbytes
        if size > budget:
            if not self._warned_budget:  # the probes and the budget are the same at every validation
                shown = f"probe sentences 0 to {number - 1} only" if number else "no probe sentence"
                warnings.warn(
                    f"attention logging: probe sentence {number} would take {size} bytes, more than the "
                    f"{budget} left of --attention.max_bytes {self.max_bytes}; this and the later probes are "
                    f"left out at every validation, and the ATTENTION tab shows {shown}",
                    stacklevel=2,
                )
                self._warned_budget = True
            return None
        writer = _file_writer(experiment)
        if writer is None:
            return 0
        text = {
            "source": pair.source,
            "target": pair.target,
            "source_tokens": tokens.source,
            "target_in": tokens.target_in,
            "target_out": tokens.target_out,
            "gold": _gold_cells(pair, tokens) if gold is None else token_cells(gold, pair.alignment or ()),
        }
        if gold is not None:
            text["gold_words"] = gold_words_record(gold)
        if explained is not None:
            text["methods"] = explained.methods
        writer.add_summary(json_summary(sentence_tag(number, "text"), text), step)
        for kind, array in arrays.items():
            writer.add_summary(tensor_summary(sentence_tag(number, kind), array), step)
        if explained is not None:
            for name, array in explained.maps.items():
                writer.add_summary(tensor_summary(sentence_tag(number, f"explain/{name}"), array), step)
            writer.add_summary(json_summary(sentence_tag(number, "lens"), explained.lens), step)
        return size

    def _log_images(self, experiment, tokens: SentenceTokens, maps: dict, number: int, step: int) -> None:
        axes = tokens.axes
        for kind, per_layer in maps.items():
            rows, cols = axes[kind]
            title = f"{kind} attention, sentence {number}, step {step}"
            figure = attention_grid(per_layer, rows, cols, title)
            experiment.add_figure(f"attention_overview/{kind}/sentence_{number}", figure, step)
            if not self.per_head:
                continue
            for layer, heads in enumerate(per_layer, start=1):
                for head, weights in enumerate(heads, start=1):
                    figure = attention_heatmap(weights, rows, cols, f"{kind} layer {layer} head {head}")
                    tag = f"attention_{kind}/sentence_{number}/layer_{layer}/head_{head}"
                    experiment.add_figure(tag, figure, step)

    def _log_head_statistics(self, experiment, model, special, step, pl_module) -> None:
        items = self._stats_items
        # The gold links index words: they are cells of the maps only where every word is one token.
        has_gold = all(
            (pair := self._stats_pairs[i]).alignment is not None
            and (len(src), len(tgt)) == (len(pair.words("source")), len(pair.words("target")))
            for i, src, tgt in items
        )
        totals = None
        for chunk in statistics_batches(items, model.config, self.stats_max_bytes):
            batch = collate(chunk, pad_id=special.pad_id, bos_id=special.bos_id, eos_id=special.eos_id)
            seen = forced_pass(model, batch)
            batch_totals = summary_totals(
                seen.maps, src_valid=seen.trace.src_valid, tgt_valid=seen.trace.tgt_valid,
                gold=[set(self._stats_pairs[i].alignment) for i, _, _ in chunk] if has_gold else None,
            )
            totals = batch_totals if totals is None else add_totals(totals, batch_totals)
            del seen  # the bound holds for one batch's maps at a time
        stats = {kind: {name: value.cpu() for name, value in named.items()}
                 for kind, named in totals_summary(totals).items()}
        writer = _file_writer(experiment)
        for kind, named in stats.items():
            for name, values in named.items():
                if writer is not None:
                    summary = tensor_summary(statistic_tag(kind, name), values.numpy().astype(np.float32))
                    writer.add_summary(summary, step)
                bounded = STATISTIC[name].bounded
                figure = layer_head_matrix(
                    values, f"{kind}: {name} per head, step {step}", vmin=0.0 if bounded else None,
                    vmax=1.0 if bounded else None,
                )
                experiment.add_figure(f"heads/{kind}_{name}", figure, step)
        if has_gold:
            self._scalar(pl_module, "heads/best_alignment", stats["cross"]["agreement"].max().item())
            self._scalar(pl_module, "heads/best_aer", stats["cross"]["aer"].min().item())


    def _log_explanations(self, model, datamodule, pl_module, experiment, step: int, budget: int) -> None:
        """Every method's AER and agreement per layer, as scalars, and the seconds they took; and as tensors
        for the ATTENTION tab (per layer and per head) if they fit in what the probes left of the budget."""
        start = time.perf_counter()
        # Validation runs under inference mode; the gradient methods need autograd.
        with torch.inference_mode(False), torch.enable_grad():
            if self._gold_items:  # a gold set's pairs, scored on their words (forward arg-max)
                on_words = gold_alignment(model, self._explain_pairs, methods=self.explanation_methods,
                                          extractions=("argmax",), ig_steps=self.ig_steps,
                                          full_context=getattr(pl_module, "full_context_layer", None))
                scores = {name: method.alignment_scores() for name, method in on_words.items()}
            else:
                scores = explanation_alignment(
                    model, datamodule.src_tokenizer, datamodule.tgt_tokenizer, self._explain_pairs,
                    methods=self.explanation_methods, ig_steps=self.ig_steps,
                    option="explanation logging", full_context=getattr(pl_module, "full_context_layer", None),
                )
        for name, method in scores.items():
            for row in method.layers:
                layer = row.layer.replace(" ", "_")
                for score in LAYER_SCORES:  # fields of the row
                    self._scalar(pl_module, f"explain/{name}/{score}_{layer}", getattr(row, score))
            self._scalar(pl_module, f"explain/{name}/best_aer", method.best.aer)
        self._scalar(pl_module, "explain/seconds", time.perf_counter() - start)
        chosen = None
        if self._gold_items and self._reporting is not None:
            chosen = self._log_reported(model, on_words, pl_module)
        self._log_score_tensors(experiment, scores, step, budget, chosen)

    def _log_reported(self, model, choosing: dict[str, WordAlignmentScores], pl_module) -> dict[str, dict]:
        """Each method's map chosen on the scored pairs (its forward arg-max map of lowest AER,
        ``choose``), scored on the reporting pairs (``reported``): one more explanation pass, over those
        pairs, the forward arg-max only. Logs the scalars ``explain/<method>/reported_aer`` and
        ``explain/reported_seconds``; returns method -> {layer, head (from 1, None for a layer's map), aer,
        chosen_aer} and the parts' pair numbers, for the tab."""
        start = time.perf_counter()
        # Validation runs under inference mode; the gradient methods need autograd.
        with torch.inference_mode(False), torch.enable_grad():
            reporting = gold_alignment(model, self._reporting.items, methods=list(choosing),
                                       extractions=("argmax",), ig_steps=self.ig_steps,
                                       full_context=getattr(pl_module, "full_context_layer", None))
        rows = {}
        for name, scores in choosing.items():
            chosen = {"argmax": choose(scores, ("argmax",))["argmax"]}
            row = reported(chosen, scores, reporting[name])["argmax"]
            rows[name] = {key: row[key] for key in ("layer", "head", "aer", "chosen_aer")}
            rows[name] |= self._reporting.parts.as_dict()
            self._scalar(pl_module, f"explain/{name}/reported_aer", row["aer"])
        self._scalar(pl_module, "explain/reported_seconds", time.perf_counter() - start)
        return rows

    def _log_score_tensors(
        self, experiment, scores: dict[str, AlignmentScores], step: int, budget: int,
        chosen: dict[str, dict] | None = None,
    ) -> None:
        """``explanation_alignment``'s table as the tab's tensors (``viz.tab.metadata``): per method its
        ``LAYER_SCORES`` (L,), its ``HEAD_SCORES`` (L, H) where the method has heads, and ``ABOUT``, its label
        and layer labels (JSON); with ``chosen`` (``_log_reported``'s), ``REPORTED``: the map chosen on the
        scored pairs and its AER on the reporting ones (JSON)."""
        summaries = []
        for name, method in scores.items():
            arrays = {score: [getattr(row, score) for row in method.layers] for score in LAYER_SCORES}
            if method.heads is not None:
                arrays |= {head: getattr(method.heads, score)
                           for head, score in zip(HEAD_SCORES, LAYER_SCORES, strict=True)}
            for score, values in arrays.items():
                summaries.append(tensor_summary(explain_tag(name, score), np.asarray(values, np.float32)))
            about = {"label": METHODS[name].label, "layers": [row.layer for row in method.layers]}
            summaries.append(json_summary(explain_tag(name, ABOUT), about))
            if chosen is not None:
                summaries.append(json_summary(explain_tag(name, REPORTED), chosen[name]))
        size = sum(len(value.SerializeToString()) for summary in summaries for value in summary.value)
        if size > budget:
            if self._warned_scores:
                return
            self._warned_scores = True
            warnings.warn(
                f"attention logging: the explanation scores would take {size} bytes, more than the {budget} "
                f"the probe sentences left of --attention.max_bytes {self.max_bytes}; the ATTENTION tab "
                f"shows no scores at step {step} (the explain/* scalars have them)", stacklevel=2,
            )
            return
        writer = _file_writer(experiment)
        for summary in summaries if writer is not None else ():
            writer.add_summary(summary, step)


@dataclass(frozen=True)
class Reporting:
    """The gold pairs past those scored at each validation, on which each method's chosen map is reported."""

    parts: Parts  # over the gold pairs the model reads, counted as evaluate.py --gold-choose counts them
    items: list[GoldItem]

    @classmethod
    def of(cls, items: list[GoldItem], scored: int) -> "Reporting | None":
        """The pairs of ``items`` past the first ``scored``; None where there are none, or none has a sure
        link to score against (warned of)."""
        parts = Parts.of(len(items), scored)
        if not parts.apart:
            return None
        reporting = items[slice(*parts.report)]
        if not any(item.sure for item in reporting):
            first, last = parts.report[0] + 1, parts.report[1]
            warnings.warn(f"attention logging: the gold pairs {first}–{last} have no sure link; the maps "
                          "are not reported on them", stacklevel=2)
            return None
        return cls(parts, reporting)


def supervised_head(pl_module, datamodule) -> dict | None:
    """The head guided alignment supervises, as the options name it: ``layer`` and ``head`` counted from 1,
    the ``labels`` (the links file's name, or eflomal), the ``weight`` λ, and whether it was ``shifted`` (each
    word's links on the row of the step that reads it), read in ``full_context`` (with the whole target) and
    trained to say ``null`` (its unlinked words toward the source's end of sentence); None without
    supervision."""
    head = getattr(pl_module, "alignment_head", None)
    if head is None:
        return None
    labels = getattr(datamodule, "alignment_labels", None)
    return {"layer": head[0] + 1, "head": head[1] + 1,
            "labels": None if labels is None else Path(labels).name,
            "weight": float(pl_module.hparams.alignment_weight),
            "shifted": bool(pl_module.hparams.get("alignment_shift", False)),
            "full_context": bool(pl_module.hparams.get("alignment_full_context", False)),
            "null": bool(pl_module.hparams.get("alignment_null", False))}


@dataclass(frozen=True)
class ProbeExplanation:
    """What the ATTENTION tab gets of one probe's explanations."""

    # method -> float16 (L, H, T, S), or (L, T, S) without heads; "<method>/per_layer" -> (L, T, S) for a
    # method with heads; never for the method whose maps are the cross weights (``Method.weights``)
    maps: dict[str, np.ndarray]
    methods: list[dict]  # every method: {"name", "label", "per_head", "signed", "layers"}, as METHODS orders
    lens: dict  # evaluation.explanations.lens_record

    @property
    def nbytes(self) -> int:
        """What counts against the budget: the maps' bytes and the lens's JSON text."""
        lens = len(json.dumps(self.lens, ensure_ascii=False).encode("utf-8"))
        return sum(array.nbytes for array in self.maps.values()) + lens


def attention_bytes(config, src_len: int, tgt_len: int, sentences: int = 1) -> int:
    """Bytes of the float32 attention maps of every layer and head for ``sentences`` padded to these lengths
    (source and target counted with their EOS / BOS)."""
    per_head = (
        config.num_encoder_layers * src_len * src_len
        + config.num_decoder_layers * (tgt_len * tgt_len + tgt_len * src_len)
    )
    return 4 * config.num_heads * per_head * sentences


def statistics_batches(items: list, config, max_bytes: int) -> list[list]:
    """``items`` (index, source ids, target ids) in batches of similar length whose attention maps take at
    most ``max_bytes`` (a sentence too big for it alone is a batch of its own)."""
    batches, current, src_len, tgt_len = [], [], 0, 0
    for item in sorted(items, key=lambda item: (len(item[1]), len(item[2]))):
        longer = max(src_len, len(item[1]) + 1), max(tgt_len, len(item[2]) + 1)  # + EOS, + BOS
        if current and attention_bytes(config, *longer, len(current) + 1) > max_bytes:
            batches.append(current)
            current, longer = [], (len(item[1]) + 1, len(item[2]) + 1)
        current.append(item)
        src_len, tgt_len = longer
    return batches + [current] if current else batches


def _half(scores: torch.Tensor) -> np.ndarray:
    """The first sentence of an ``Explanation``'s (1, ...) scores as float16."""
    return scores[0].detach().cpu().to(torch.float16).numpy()  # (L, H, T, S) or (L, T, S)


def _file_writer(experiment):
    """The ``SummaryWriter``'s event-file writer, or None for loggers without one (e.g.
    ``fast_dev_run``'s)."""
    writer = getattr(experiment, "file_writer", None)
    return writer if hasattr(writer, "add_summary") else None


def _gold_cells(pair, tokens: SentenceTokens) -> list[list[int]] | None:
    """The pair's gold links as [row, column] cells of its cross-attention map, when its tokens are its words.

    Links are word positions (``data.pairs.Pair``); they are cells only where every word is one token, as on
    the built-in toy tasks, whose alignments the head statistics use the same way.
    """
    words_are_tokens = (
        len(tokens.source) == len(pair.source.split()) + 1
        and len(tokens.target_out) == len(pair.target.split()) + 1
    )
    if pair.alignment is None or not words_are_tokens:
        return None
    return [[target, source] for source, target in pair.alignment]
