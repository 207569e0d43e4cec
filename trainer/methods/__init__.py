"""Training methods: one spec and one engine-independent step per method (trainer/methods/spec.py).

Import the registry from :mod:`trainer.methods.spec` (stdlib only); the step functions run
against the sampler interface of :mod:`trainer.methods.sampler` and return
:class:`trainer.methods.step.StepResult`, which the embedded (trainer/embedded/collect.py) and verl
(trainer/verl/collect.py) adapters turn into their own batches.
"""

from trainer.methods.spec import MethodSpec, get_method, get_step, method_names, register, specs

__all__ = ["MethodSpec", "get_method", "get_step", "method_names", "register", "specs"]
