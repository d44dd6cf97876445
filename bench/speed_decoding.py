"""Decoding speed: greedy decoding with the key/value cache against re-running the decoder over the whole
prefix (same tokens, with the FLOPs each does), at one or several batch sizes, and beam search relative to
greedy. The model is kept from emitting EOS, so that every decoding runs the same number of steps.

Shape legend: B batch, S source length, L generated length.
"""

import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import replace

import torch

from analysis.flops import matmul_flops
from bench.speed_common import EOS, BenchConfig, make_batches, our_model, timed
from model.decoding import greedy_search
from tests.helpers.weight_surgery import suppress_eos


def decode_length(requested: int | None, reference_lengths: Sequence[int] | None, default: int) -> int:
    """How many tokens each benchmarked decoding runs: ``requested`` where given; else what greedy decoding of
    a reference of mean length runs (its tokens and EOS, rounded); else ``default``.

    Raises:
        ValueError: ``requested`` below 1, or an empty list of reference lengths.
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"decode tokens must be at least 1, got {requested}")
        return requested
    if reference_lengths is None:
        return default
    if not reference_lengths:
        raise ValueError("no reference lengths to take the mean of")
    return round(statistics.fmean(reference_lengths) + 1)  # + 1: the step that emits EOS


def bench_decoding(
    cfg: BenchConfig, device: torch.device, peak: float, *, batch_size: int | None = None, beam: bool = True
) -> dict:
    """Greedy decoding with and without the cache, and beam search, all forced to ``decode_steps`` tokens.

    Each greedy decoding's FLOPs are counted too: their ratio is what the cache saves in arithmetic, the
    speedup it would give if both ran equally close to the machine's peak.

    Args:
        peak: the machine's matmul FLOP/s, for each decoding's share of it.
        batch_size: sentences per batch instead of ``cfg.batch_size``.
        beam: also time beam search (the ``beam_*`` entries of the result).

    Raises:
        RuntimeError: a decoding did not run exactly ``decode_steps`` steps, so the figures would compare
            unequal work.
    """
    if batch_size is not None:
        cfg = replace(cfg, batch_size=batch_size)
    model = our_model(replace(cfg, tied=False), device).eval()  # suppress_eos needs its own output weights
    suppress_eos(model)
    src = make_batches(cfg, 1, device)[0].src
    steps = cfg.decode_steps
    runs = {
        "cached": lambda: greedy_search(model, src, steps, use_cache=True),
        "uncached": lambda: greedy_search(model, src, steps, use_cache=False),
    }
    if beam:
        runs["beam"] = lambda: model.generate(src, max_len=steps, beam_size=cfg.beam_size)
    times = {name: [] for name in runs}
    outputs = {}
    with torch.no_grad():
        for i in range(cfg.decode_warmup + cfg.decode_iters):
            for name, fn in runs.items():
                seconds, outputs[name] = timed(fn, device)
                if i >= cfg.decode_warmup:
                    times[name].append(seconds)
        flops = {name: matmul_flops(runs[name]) for name in ("cached", "uncached")}  # one more run each
    for name, tokens in outputs.items():
        if tokens.shape != (src.size(0), steps) or bool((tokens == EOS).any()):
            raise RuntimeError(
                f"{name} decoding did not run exactly {steps} steps: output {tuple(tokens.shape)}"
            )

    seconds = {name: statistics.median(t) for name, t in times.items()}
    per_s = {name: src.size(0) / t for name, t in seconds.items()}
    result = {
        "batch_size": src.size(0),
        "steps": steps,
        "cached_sentences_per_s": per_s["cached"],
        "uncached_sentences_per_s": per_s["uncached"],
        "cache_ratio": per_s["cached"] / per_s["uncached"],
        "outputs_equal": bool(torch.equal(outputs["cached"], outputs["uncached"])),
        "cached_gflop": flops["cached"] / 1e9,
        "uncached_gflop": flops["uncached"] / 1e9,
        "flop_ratio": flops["uncached"] / flops["cached"],
        "cached_peak_fraction": flops["cached"] / seconds["cached"] / peak,
        "uncached_peak_fraction": flops["uncached"] / seconds["uncached"] / peak,
    }
    if beam:
        result |= {
            "beam_size": cfg.beam_size,
            "beam_sentences_per_s": per_s["beam"],
            "beam_over_greedy": per_s["beam"] / per_s["cached"],
        }
    return result


def decoding_lines(results: dict) -> list[str]:
    """The report's decoding table, and greedy decoding by batch size where it was measured."""
    c, de = results["config"], results["decoding"]
    lines = [
        (
            f"decoding: {de['steps']} tokens, batch {c['batch_size']}, eval, no_grad, "
            f"median of {c['decode_iters']}"
        ),
        textwrap.fill(results["eos_suppression"], width=110, initial_indent="  ", subsequent_indent="  "),
        f"{'':26}{'sent/s':>11}{'GFLOP':>9}{'of peak':>9}",
        (
            f"{'greedy, KV cache':26}{de['cached_sentences_per_s']:>11.1f}{de['cached_gflop']:>9.2f}"
            f"{de['cached_peak_fraction']:>9.1%}"
        ),
        (
            f"{'greedy, prefix re-run':26}{de['uncached_sentences_per_s']:>11.1f}{de['uncached_gflop']:>9.2f}"
            f"{de['uncached_peak_fraction']:>9.1%}"
        ),
        (
            f"{'cache / re-run':26}{de['cache_ratio']:>10.2f}x   "
            f"same tokens: {'yes' if de['outputs_equal'] else 'NO'}"
        ),
        f"{'  in FLOPs':26}{de['flop_ratio']:>10.2f}x   (the speedup if both ran equally close to peak)",
        f"{'beam ' + str(de['beam_size']) + ', KV cache':26}{de['beam_sentences_per_s']:>11.1f}",
        f"{'beam / greedy':26}{de['beam_over_greedy']:>10.2f}x",
    ]
    if not results["decoding_by_batch_size"]:
        return lines
    lines += [
        "",
        "greedy decoding by batch size (same model and steps)",
        (
            f"{'batch':>7}{'cache sent/s':>14}{'re-run sent/s':>15}{'ratio':>8}{'in FLOPs':>10}"
            f"{'cache of peak':>15}{'re-run of peak':>16}{'same tokens':>13}"
        ),
    ]
    for r in results["decoding_by_batch_size"]:
        lines.append(
            f"{r['batch_size']:>7}{r['cached_sentences_per_s']:>14.1f}"
            f"{r['uncached_sentences_per_s']:>15.1f}"
            f"{r['cache_ratio']:>7.2f}x{r['flop_ratio']:>9.2f}x{r['cached_peak_fraction']:>15.1%}"
            f"{r['uncached_peak_fraction']:>16.1%}{'yes' if r['outputs_equal'] else 'NO':>13}"
        )
    return lines
