"""Real verl DataProto batches for the verl-backend tests, and a scripted stand-in for the vLLM
agent loop (the one part that cannot run without a GPU). verl is imported lazily, so the main
suite (without verl) still collects this directory; every test module importorskips verl."""

import numpy as np
import pytest
import torch

PAD, EOS = 0, 2
PROMPT_LEN, RESPONSE_LEN = 3, 4


def prompt_batch(P: int):
    """A prompt batch as verl's dataloader yields it (RLHFDataset rows: a dummy tensor, the raw
    chat prompt, data_source, reward_model, extra_info, index), with uids."""
    from verl import DataProto

    return DataProto.from_single_dict({
        "dummy_tensor": torch.zeros((P, 1), dtype=torch.uint8),
        "raw_prompt": np.array([[{"role": "user", "content": f"q{p}"}] for p in range(P)] + [None], dtype=object)[:-1],
        "data_source": np.array(["toy"] * P, dtype=object),
        "reward_model": np.array([{"ground_truth": str(p)} for p in range(P)], dtype=object),
        "extra_info": np.array([{"index": p} for p in range(P)], dtype=object),
        "index": np.arange(P),
        "uid": np.array([f"u{p}" for p in range(P)], dtype=object),
    })


def split(batch):
    """verl's own split into (batch, gen_batch): RayPPOTrainer._get_gen_batch (it uses no state)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return batch, RayPPOTrainer._get_gen_batch(None, batch)


class ScriptedRollout:
    """Stands in for AgentLoopManager.generate_sequences: one row out per row in, in order.

    The outcome of the j-th row of prompt p in call c is ``script[p][c][j]`` (0 past the end),
    so the divisor's pad rows (appended last) never change a real row's outcome. Row r's
    response has ``1 + (r % RESPONSE_LEN)`` tokens, the last one EOS; rm_scores holds the reward
    on the last response token, ``acc`` the correctness, as verl's reward loop writes them.
    """

    def __init__(self, script: dict[int, list[list[int]]]):
        self.script, self.calls, self.requests = script, 0, []

    def __call__(self, request):
        from verl import DataProto

        prompts = [int(m[0]["content"][1:]) for m in request.non_tensor_batch["raw_prompt"]]
        self.requests.append(prompts)
        seen: dict[int, int] = {}
        B = len(prompts)
        acc = np.zeros(B)
        lengths = np.array([2 + r % 3 for r in range(B)])
        for r, p in enumerate(prompts):
            j = seen.get(p, 0)
            seen[p] = j + 1
            calls = self.script.get(p, [])
            acc[r] = calls[self.calls][j] if self.calls < len(calls) and j < len(calls[self.calls]) else 0
        self.calls += 1
        responses = torch.full((B, RESPONSE_LEN), PAD)
        response_mask = torch.zeros((B, RESPONSE_LEN), dtype=torch.long)
        rm = torch.zeros((B, RESPONSE_LEN))
        for r, L in enumerate(lengths):
            responses[r, :L] = 10 + r
            responses[r, L - 1] = EOS
            response_mask[r, :L] = 1
            rm[r, L - 1] = acc[r]
        prompt_ids = torch.full((B, PROMPT_LEN), 5)
        attention = torch.cat([torch.ones((B, PROMPT_LEN), dtype=torch.long), response_mask], dim=1)
        return DataProto.from_single_dict({
            "prompts": prompt_ids, "responses": responses, "response_mask": response_mask,
            "input_ids": torch.cat([prompt_ids, responses], dim=1), "attention_mask": attention,
            "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "rm_scores": rm,
            "acc": acc.astype(np.float64),
        }, meta_info={"timing": {"agent_loop/generate_sequences/mean": 0.01}})


@pytest.fixture(scope="session")
def vr():
    """The helpers above (with --import-mode=importlib a conftest cannot be imported by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(PAD=PAD, EOS=EOS, ScriptedRollout=ScriptedRollout, prompt_batch=prompt_batch, split=split)
