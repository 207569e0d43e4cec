"""The embedded engine: the trainer that runs inside the worker process.

A transformers policy (``model``, ``presets``), KV-cache sampling (trainer/rollout/), the
method adapter (``collect``: the engine-independent steps of trainer/methods/ over this
engine), the update (``update``), the loop (``loop``), checkpoints and the tiny preset's
pretraining (``pretrain``). The verl engine (trainer/verl/) shares trainer/methods/,
trainer/core/, trainer/tasks/ and the sinks with it, never these modules.
"""
