"""Decoding by its textbook definitions, with lists and full re-runs and no cache, for the tests that hold
``model.decoding`` (and each position variant) to them.
"""

import math

import torch

from tests.conftest import BOS, EOS, PAD


def teacher_forced_greedy(model, src, max_len):
    """The textbook definition: re-run the full model on the prefix, take the argmax, for each sentence
    alone."""
    rows = []
    for sentence in src:
        sentence = sentence[sentence != PAD][None]
        prefix = torch.tensor([[BOS]])
        for _ in range(max_len):
            logits = model(sentence, prefix)[0, -1]
            logits[[PAD, BOS]] = -math.inf  # never generated
            next_token = logits.argmax()
            prefix = torch.cat([prefix, next_token.view(1, 1)], dim=1)
            if next_token == EOS:
                break
        rows.append(prefix[0, 1:].tolist())
    return rows


def rows_of(tokens):
    """(B, L) padded output → list of token lists up to and including EOS."""
    return [[t for t in row.tolist() if t != PAD] for row in tokens]


def plain_beam_search(model, sentence, max_len, beam_size, alpha):
    """The beam search of ``beam_search``'s docstring for one sentence, with lists and full re-runs, no
    cache."""
    def penalty(n):
        return ((5 + n) / 6) ** alpha

    live, finished = [([], 0.0)], []  # (tokens, log-probability); (length-normalised score, tokens)
    for step in range(1, max_len + 1):
        candidates = []
        for tokens, score in live:
            logits = model(sentence[None], torch.tensor([[BOS, *tokens]]))[0, -1]
            logits[[PAD, BOS]] = -math.inf
            log_probs = logits.log_softmax(-1).tolist()
            candidates += [(tokens + [t], score + lp) for t, lp in enumerate(log_probs) if lp > -math.inf]
        candidates = sorted(candidates, key=lambda c: -c[1])[: 2 * beam_size]
        for tokens, score in candidates[:beam_size]:
            if tokens[-1] == EOS or step == max_len:
                finished.append((score / penalty(step), tokens))
        finished = sorted(finished, key=lambda f: -f[0])[:beam_size]
        live = [c for c in candidates if c[0][-1] != EOS][:beam_size]
        if len(finished) == beam_size and live[0][1] / penalty(max_len) <= finished[-1][0]:
            break
    return finished[0][1]
