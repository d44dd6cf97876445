"""Explanations of a translation that can be checked: several views of which source token each target token
comes from, each a target × source matrix, all scored alike against gold alignments.

Shape legend (every module of this package):
    B   sentences
    L   layers (decoder layers; 1 for methods that read the embeddings)
    H   heads
    S   source length (EOS included)
    T   target length: rows are the tokens the decoder *produces* (the target, then EOS)
    D   model dim, Dh head dim, V vocabulary size

Plain tensors in, plain tensors out; the model is never imported (``evaluation.forced`` runs it and fills a
``Trace``). One concept per module:

    trace.py        Trace (the inputs) and Explanation (the one output type)
    attention.py    raw cross-attention, per head and averaged over a layer's heads
    shift_att.py    shifted attention (Chen et al. 2020)
    value_norms.py  value-weighted attention ‖α v W_O‖ (Kobayashi et al. 2020)
    rollout.py      encoder attention rollout (Abnar & Zuidema 2020) composed with cross-attention
    attributions.py gradient × input and Integrated Gradients of the target's log-probability (Captum)
    registry.py     METHODS and ``explain``: every method behind one call
    scores.py       AER and agreement of an Explanation against gold links
    logit_lens.py   the logit lens (nostalgebraist 2020): each decoder layer read through the output layer

This package imports nothing itself, so that light users do not pay for Captum.
"""
