"""Evaluating and exploring trained checkpoints: loading, batched translation, attention export, and the head
analyses (head masks, batched ablation, head importance, pruning, cross-attention alignment)."""
