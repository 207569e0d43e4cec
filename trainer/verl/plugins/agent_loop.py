"""verl's single-turn agent loop for every preset: the tiny presets' character tokenizer, and an
installed real model whose ``model_type`` (``llama`` for SmolLM2) has no builder of its own.

verl picks a "continuous token" builder (how chat turns are joined into token ids) from the
model's ``model_type``; for ``qwen2`` it is the ChatML builder, which needs a newline token and
``<|im_end|>``. The tiny preset is Qwen2-shaped but speaks a 19-character vocabulary with no such
tokens, so this loop is verl's own ``SingleTurnAgentLoop`` with the model-type hint dropped: verl's
generic builder renders the prompt through the tokenizer's chat template (BOS + the problem) and
appends the generated tokens, which is all a single turn needs (a real model has no builder
registered either: verl would fall back to the same generic one, warning once per sample). It is
listed in the agent-loop file every preset's run writes (trainer/verl/model_dir.py) and chosen with
``rollout.agent.default_agent_loop`` (trainer/verl/overrides.py).
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

# verl warns at every agent-loop construction (once per sample) that no model-specific builder is
# registered for the dropped model type; that is the point here, so the warning is silenced
logging.getLogger("verl.utils.tokenizer.continuous_token_wiring").setLevel(logging.ERROR)


class CharSingleTurnAgentLoop(SingleTurnAgentLoop):
    def __init__(self, *args: Any, hf_model_type: str | None = None, **kwargs: Any):
        super().__init__(*args, hf_model_type=None, **kwargs)
