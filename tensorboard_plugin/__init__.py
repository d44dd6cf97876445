"""TensorBoard's ATTENTION tab: every head of every layer, explored interactively, at every logged step.

Installed with the project (``pip install -r requirements.txt``), plain ``tensorboard --logdir runs`` shows it
(entry point ``tensorboard_plugins``); without installing, ``python -m tensorboard_plugin --logdir runs``
starts TensorBoard with it. ``metadata`` and ``summary`` are the writing side (used by training's
``AttentionLogger``), ``plugin`` the serving side, ``static/`` the frontend (plain ES modules, no build step).
"""
