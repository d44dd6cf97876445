"""The parts of the JoeyNMT comparison that import JoeyNMT: run with the Python of JoeyNMT's virtual
environment (``bench/peers/joeynmt_baseline.py`` creates it), never with the project's own.

    VENV/bin/python bench/peers/joeynmt_venv.py vocab CONFIG             # joint BPE codes and vocabulary
    VENV/bin/python bench/peers/joeynmt_venv.py joeynmt train CONFIG     # `python -m joeynmt`, today's torch
    VENV/bin/python bench/peers/joeynmt_venv.py speed BATCHES.pt OUT.json
    VENV/bin/python bench/peers/joeynmt_venv.py references CONFIG REFS.en OUT.en   # JoeyNMT's references

``vocab`` does what JoeyNMT's ``scripts/build_vocab.py --joint`` does for a subword-nmt config (that script is
in JoeyNMT's repository, not in its package): the training sentences of both languages, pre-processed by
JoeyNMT's own tokenizer settings of the config (Moses pre-tokenization here), learn one set of BPE merges;
the vocabulary is every BPE token of both sides, sorted by frequency then alphabetically
(``joeynmt.vocabulary.sort_and_cut``). One vocabulary for both sides is what ``tied_embeddings`` needs.

``joeynmt`` runs JoeyNMT's command line (``python -m joeynmt ...``) after two compatibility fixes for the
torch of this project (2.14), which JoeyNMT 2.3.0 (January 2024) predates; neither changes what is computed:
``ReduceLROnPlateau`` lost its ``verbose`` argument (JoeyNMT passes ``verbose=False``; it is dropped), and
``torch.load`` now defaults to ``weights_only=True``, which refuses JoeyNMT's own checkpoints (they hold more
than tensors; JoeyNMT loads only the files its own run wrote). A third fix is for JoeyNMT itself: its
``build_scheduler`` makes ``WarmupExponentialDecayScheduler`` without the optimizer, a required argument, so
``scheduling: warmupexponentialdecay`` fails with a TypeError in 2.3.0; the optimizer is passed. And it reads
the schedule from the parsed training section (``TrainConfig``), which has no fields for
``SCHEDULER_KEYS``: the peak, decay and decay length of the config never reached it, and it decayed from its
default peak (1e-3) by its default 0.1 over 10000 updates whatever the config said; they are passed too.
One addition changes what is computed, and only where the config asks for it: with
``learning_rate_decay_seconds`` (``joeynmt_baseline.py --decay-clock time``) the exponential decay counts
seconds since the first update instead of updates (``clock_decay_rate``).

``references`` writes a split's references as JoeyNMT's ``test`` mode scores them: each line pre-processed
(Moses tokenization here) and post-processed (Moses detokenization) by the config's target tokenizer.

``speed`` times JoeyNMT's Transformer on the batches ``bench/speed.py`` saved (random ones and, where
saved, ``train.py``'s own), with this project's ``model.Transformer`` at the same sizes, their steps
alternating as in ``bench/speed.py``; and greedy decoding of ours with and without its cache beside JoeyNMT's
(the venv sees the system's packages, so this project's model imports here too).

Shape legend: B batch, S source length, T target length, V vocabulary size.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# -- vocab ---------------------------------------------------------------------------------------------------


def build_joint_vocab(config_path: Path, train: str | None = None) -> dict:
    """Learn the config's joint BPE codes on its training files (or ``train``'s: a path without the language
    suffix) and write its vocabulary file; returns sizes for the log."""
    from collections import Counter

    from joeynmt.config import load_config
    from joeynmt.helpers import flatten, write_list_to_file
    from joeynmt.tokenizers import BasicTokenizer
    from joeynmt.vocabulary import sort_and_cut
    from subword_nmt import apply_bpe, learn_bpe

    cfg = load_config(config_path)
    data = cfg["data"]
    src, trg = data["src"], data["trg"]
    codes = Path(src["tokenizer_cfg"]["codes"])
    vocab_file = Path(src["voc_file"])
    sentences = []
    for side in (src, trg):
        pre = BasicTokenizer(
            level=side["level"],
            lowercase=side.get("lowercase", False),
            normalize=side.get("normalize", False),
            pretokenizer=side["tokenizer_cfg"].get("pretokenizer", "none"),
            lang=side["lang"],
        )
        with open(f"{train or data['train']}.{side['lang']}", encoding="utf-8") as f:
            sentences += [pre.pre_process(line.rstrip("\n")) for line in f]

    codes.parent.mkdir(parents=True, exist_ok=True)
    with codes.open("w", encoding="utf-8") as out:
        learn_bpe.learn_bpe(sentences, out, src["tokenizer_cfg"]["num_merges"], src.get("voc_min_freq", 1))
    with codes.open(encoding="utf-8") as f:
        bpe = apply_bpe.BPE(f, separator=src["tokenizer_cfg"].get("separator", "@@"))
    tokens = [bpe.process_line(s).strip().split() for s in sentences]
    unique = sort_and_cut(Counter(flatten(tokens)), min_freq=src.get("voc_min_freq", 1))
    write_list_to_file(vocab_file, unique)
    return {"sentences": len(sentences), "vocabulary": len(unique), "codes": str(codes),
            "vocab": str(vocab_file)}  # fmt: skip


# -- JoeyNMT's command line ---------------------------------------------------------------------------------


# Settings of JoeyNMT's training section that its TrainConfig (joeynmt/config.py, 2.3.0) drops when it parses
# the section, and that build_scheduler reads from the parsed section all the same; the last is this
# harness's own (clock_decay_rate).
SCHEDULER_KEYS = ("learning_rate_peak", "learning_rate_decay", "learning_rate_decay_length",
                  "learning_rate_decay_seconds")


def clock_decay_rate(step: int, seconds: float, warmup_seconds: float, *, peak: float, warmup: int,
                     decay: float, decay_seconds: float) -> float:
    """JoeyNMT's ``warmupexponentialdecay`` rate with its decay counted in seconds, not updates.

    ``peak * step / warmup`` during the warm-up (updates, as JoeyNMT's), then ``peak * decay ** ((seconds -
    warmup_seconds) / (decay_seconds - warmup_seconds))``, where ``seconds`` is the time since the first
    update and ``warmup_seconds`` the time the warm-up took: the peak as the warm-up ends and ``decay * peak``
    when ``decay_seconds`` have passed, at whatever pace the machine trains (JoeyNMT's own decay reaches
    ``decay * peak`` at a chosen update, early on a faster machine and late on a slower one).
    """
    if step < warmup:
        return peak * step / warmup
    share = (seconds - warmup_seconds) / max(decay_seconds - warmup_seconds, 1e-9)
    return peak * decay ** max(share, 0.0)


def scheduler_settings(config: Path | None) -> dict:
    """The ``SCHEDULER_KEYS`` set in ``config``'s training section (none without a config)."""
    if config is None:
        return {}
    from joeynmt.config import load_config

    training = load_config(config).get("training", {})
    return {key: training[key] for key in SCHEDULER_KEYS if key in training}


def patch_joeynmt(config: Path | None = None) -> None:
    """The fixes of the module docstring, applied to this process only, before JoeyNMT's modules that
    import ``load_checkpoint`` or ``build_scheduler`` by name are imported; ``config`` is the run's, whose
    schedule reaches ``build_scheduler``."""
    import functools

    import joeynmt.builders
    import joeynmt.helpers

    build_scheduler = joeynmt.builders.build_scheduler
    decay_scheduler = joeynmt.builders.WarmupExponentialDecayScheduler
    schedule = scheduler_settings(config)
    decay_seconds = schedule.pop("learning_rate_decay_seconds", None)

    class ClockDecayScheduler(decay_scheduler):
        """``WarmupExponentialDecayScheduler`` whose decay counts seconds (``clock_decay_rate``)."""

        started = warmup_ended = None  # time.monotonic() at the first update and at the warm-up's end

        def _compute_rate(self) -> float:
            now = time.monotonic()
            self.started = self.started if self.started is not None else now
            if self._step <= self.warmup or self.warmup_ended is None:
                self.warmup_ended = now
            rate = clock_decay_rate(self._step, now - self.started, self.warmup_ended - self.started,
                                    peak=self.peak_rate, warmup=self.warmup, decay=self.decay_rate,
                                    decay_seconds=decay_seconds)  # fmt: skip
            return max(rate, self.min_rate)

    scheduler = decay_scheduler if decay_seconds is None else ClockDecayScheduler

    def build_scheduler_with_optimizer(cfg, optimizer, scheduler_mode, hidden_size=0):
        joeynmt.builders.WarmupExponentialDecayScheduler = functools.partial(scheduler, optimizer)
        return build_scheduler({**cfg, **schedule}, optimizer, scheduler_mode, hidden_size)

    class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
        def __init__(self, optimizer, verbose: bool = False, **kwargs) -> None:
            super().__init__(optimizer, **kwargs)

    def load_checkpoint(path: Path, map_location) -> dict:
        if not path.is_file():
            raise FileNotFoundError(f"Checkpoint {path} not found.")
        return torch.load(path, map_location=map_location, weights_only=False)

    joeynmt.builders.ReduceLROnPlateau = ReduceLROnPlateau
    joeynmt.builders.build_scheduler = build_scheduler_with_optimizer
    joeynmt.helpers.load_checkpoint = load_checkpoint


def run_joeynmt(args: list[str]) -> None:
    """``python -m joeynmt *args`` with ``patch_joeynmt`` for the config among ``args``."""
    patch_joeynmt(next((Path(a) for a in args if a.endswith((".yaml", ".yml"))), None))
    from joeynmt.__main__ import main as joeynmt_main

    sys.argv = ["joeynmt", *args]
    joeynmt_main()


def write_references(config_path: Path, references: Path, out: Path) -> int:
    """Write ``references`` as JoeyNMT's ``test`` mode scores them (``joeynmt.prediction.evaluate``: its
    dataset keeps each line pre-processed, and the reference is that line post-processed); returns how many
    lines differ from the file's own."""
    from joeynmt.config import load_config
    from joeynmt.tokenizers import build_tokenizer

    data = load_config(config_path)["data"]
    tokenizer = build_tokenizer(data)[data["trg"]["lang"]]
    lines = references.read_text(encoding="utf-8").splitlines()
    joey = [tokenizer.post_process(tokenizer.pre_process(line)) for line in lines]
    out.write_text("".join(line + "\n" for line in joey), encoding="utf-8")
    return sum(a != b for a, b in zip(lines, joey, strict=True))


# -- speed ---------------------------------------------------------------------------------------------------


def joey_model(sizes: dict, vocab_size: int):
    """JoeyNMT's Transformer (pre-LN, as in its Transformer recipes) at ``sizes``, tied as speed.py's model
    (``sizes["tied"]``: one embedding for source, target and output, as its recipes have it; else untied)."""
    from joeynmt.model import build_model
    from joeynmt.vocabulary import Vocabulary

    specials = argparse.Namespace(unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  sep_token=None, unk_id=0, pad_id=1, bos_id=2, eos_id=3, sep_id=None,
                                  lang_tags=[])  # fmt: skip
    vocab = Vocabulary([f"w{i}" for i in range(4, vocab_size)], specials)  # (V,) ids 0-3 are the specials
    assert len(vocab) == vocab_size, (len(vocab), vocab_size)

    def side() -> dict:
        return {
            "type": "transformer", "num_layers": sizes["num_layers"], "num_heads": sizes["num_heads"],
            "embeddings": {"embedding_dim": sizes["d_model"], "scale": True, "dropout": 0.0},
            "hidden_size": sizes["d_model"], "ff_size": sizes["d_ff"], "dropout": sizes["dropout"],
            "layer_norm": "pre", "activation": "relu",
        }  # fmt: skip

    tied = sizes.get("tied", False)
    cfg = {"initializer": "xavier_uniform", "embed_initializer": "xavier_uniform",
           "bias_initializer": "zeros", "tied_embeddings": tied, "tied_softmax": tied,
           "encoder": side(), "decoder": side()}  # fmt: skip
    torch.manual_seed(sizes.get("seed", 0))
    model = build_model(cfg, src_vocab=vocab, trg_vocab=vocab)
    model.loss_function = ("crossentropy", 0.0)  # plain cross-entropy, as speed.py's models
    return model


def joey_batch(batch):
    """A JoeyNMT ``Batch`` of the same sentences: its ``trg`` is BOS + sentence + EOS, padded (B, T + 1)."""
    from joeynmt.batch import Batch

    from bench.peers.timing import peer_target, to_peer_ids

    src_j, trg = to_peer_ids(batch.src), peer_target(batch)
    return Batch(src=src_j, src_length=(src_j != 1).sum(1), src_prompt_mask=None, trg=trg,
                 trg_prompt_mask=None, indices=torch.arange(src_j.size(0)), device=torch.device("cpu"),
                 pad_index=1, eos_index=3)  # fmt: skip


def joey_train_step(model, optimizer, batch) -> None:
    """``joeynmt.training.TrainManager._train_step`` and its update: loss summed, normalised by tokens."""
    batch.sort_by_src_length()
    optimizer.zero_grad(set_to_none=True)
    loss, _, _, _ = model(return_type="loss", **vars(batch))
    (loss / batch.ntokens).backward()
    optimizer.step()


def joey_greedy(model, batch, steps: int):
    """JoeyNMT's greedy search (it re-runs the decoder over the whole prefix), EOS blocked for ``steps``."""
    from joeynmt.search import search

    output, _, _ = search(model, batch, max_output_length=steps, beam_size=1, beam_alpha=-1,
                          min_output_length=steps)  # fmt: skip
    return output


def time_training(config: dict, saved_batches: list[dict]) -> dict:
    """Training target tokens/s of JoeyNMT's model and of ours on the same batches, steps alternating."""
    from bench.peers.timing import alternate_training
    from bench.speed_common import Batch, BenchConfig, our_model
    from bench.speed_training import train_step

    cfg = BenchConfig(**config)
    batches = [Batch(**b) for b in saved_batches]
    joey_batches = [joey_batch(b) for b in batches]
    models = {
        "ours": our_model(cfg, torch.device("cpu")).train(),
        "joeynmt": joey_model(config, cfg.vocab_size).train(),
    }
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    rates = alternate_training({
        "ours": lambda i: train_step(models["ours"], optimizers["ours"], batches[i]),
        "joeynmt": lambda i: joey_train_step(models["joeynmt"], optimizers["joeynmt"], joey_batches[i]),
    }, batches, cfg.train_warmup)  # fmt: skip
    return {
        name: {"params": sum(p.numel() for p in m.parameters()), "target_tokens_per_s": rates[name]}
        for name, m in models.items()
    }


def time_greedy(config: dict, saved_batch: dict) -> dict:
    """Greedy sentences/s of ours with and without the key/value cache and of JoeyNMT's search (which re-runs
    the prefix), ``decode_steps`` tokens each (EOS blocked) for the batch's sources, the three alternating."""
    from bench.speed_common import Batch, BenchConfig, our_model
    from model.decoding import greedy_search
    from tests.helpers.weight_surgery import suppress_eos

    config = {**config, "tied": False}  # both untied, as speed.py decodes (suppress_eos needs its own output)
    cfg = BenchConfig(**config)
    batch = Batch(**saved_batch)
    ours = our_model(cfg, torch.device("cpu")).eval()
    suppress_eos(ours)
    joey = joey_model(config, cfg.vocab_size).eval()
    decode_batch = joey_batch(batch)
    runs = {
        "ours": lambda: greedy_search(ours, batch.src, cfg.decode_steps, use_cache=True),
        "ours_uncached": lambda: greedy_search(ours, batch.src, cfg.decode_steps, use_cache=False),
        "joeynmt": lambda: joey_greedy(joey, decode_batch, cfg.decode_steps),
    }
    times = {name: [] for name in runs}
    with torch.no_grad():
        for i in range(cfg.decode_warmup + cfg.decode_iters):
            for name, fn in runs.items():
                start = time.perf_counter()
                out = fn()
                if i >= cfg.decode_warmup:
                    times[name].append(time.perf_counter() - start)
                if tuple(out.shape) != (batch.src.size(0), cfg.decode_steps):
                    raise RuntimeError(
                        f"{name} greedy decoding made {tuple(out.shape)}, not {cfg.decode_steps} steps"
                    )
    return {name: batch.src.size(0) / statistics.median(t) for name, t in times.items()}


def time_speed(saved: dict) -> dict:
    """Training target tokens/s and greedy sentences/s of JoeyNMT's model and of ours: training on the saved
    random batches and, where saved, on ``train.py``'s own (``recipe``); greedy on the first random batch."""
    result = time_training(saved["config"], saved["batches"])
    greedy = time_greedy(saved["config"], saved["batches"][0])
    result["ours"]["greedy_sentences_per_s"] = greedy["ours"]
    result["ours"]["uncached_greedy_sentences_per_s"] = greedy["ours_uncached"]
    result["joeynmt"]["greedy_sentences_per_s"] = greedy["joeynmt"]
    if "recipe" in saved:
        result["recipe"] = time_training(saved["recipe"]["config"], saved["recipe"]["batches"])
    result["threads"] = torch.get_num_threads()
    return result


# -- command line --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    from bench.peers.timing import add_speed_command, run_speed_command

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("vocab", help="learn the joint BPE codes and write the joint vocabulary of a config")
    v.add_argument("config", type=Path)
    v.add_argument("--train", help="learn on these training files (a path without .de/.en), not the config's")
    j = sub.add_parser("joeynmt", help="JoeyNMT's command line (python -m joeynmt), on today's torch")
    j.add_argument("args", nargs=argparse.REMAINDER)
    add_speed_command(sub, "JoeyNMT")
    r = sub.add_parser("references", help="write references as JoeyNMT's test mode scores them")
    r.add_argument("config", type=Path)
    r.add_argument("references", type=Path)
    r.add_argument("out", type=Path)
    args = p.parse_args(argv)
    if args.command == "references":
        print(json.dumps({"lines_changed": write_references(args.config, args.references, args.out)}))
    elif args.command == "vocab":
        print(json.dumps(build_joint_vocab(args.config, args.train)), flush=True)
    elif args.command == "joeynmt":
        run_joeynmt(args.args)
    else:
        run_speed_command(args, time_speed)


if __name__ == "__main__":
    main()
