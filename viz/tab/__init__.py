"""TensorBoard's ATTENTION tab: every head of every layer, explored interactively, at every logged step.

Installed with the project (``pip install -r requirements.txt``), plain ``tensorboard --logdir runs`` shows it
(entry point ``tensorboard_plugins``); without installing, ``python -m viz.tab --logdir runs`` starts
TensorBoard with it. ``metadata`` and ``summary`` are the writing side (used by ``viz.logger.AttentionLogger``
during training); the serving side is ``plugin`` (the routes), ``events`` (reading the logged data) and
``live`` (a run's checkpoint, translating a typed sentence); ``static/`` is the frontend (plain ES modules, no
build step).
"""
