"""Evaluating and exploring trained checkpoints: loading, batched translation, attention export, head
ablation."""
