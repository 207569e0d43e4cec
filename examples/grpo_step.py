"""One GRPO step, top to bottom: the training step of this project with nothing in the way.

What a reader learns here: how a batch of prompts becomes one policy update under GRPO (the
AERO paper's baseline, §3.1), in the five moves every method shares. No training loop, method
registry, checkpoint or metric sink, but no re-implementation either: each move calls the
function the embedded engine calls, so the loss printed here is the engine's loss on the same
batch (tests/test_examples.py checks it). Where each move lives in the real engine:

  1. sample     HFSampler.generate (trainer/rollout/embedded.py), driven by the method's
                step (trainer/methods/grpo.py) through trainer/embedded/collect.py
  2. score      the task's verifier (trainer/tasks/arithmetic.py: exact match, 1 or 0), which
                the engine calls through trainer/tasks/verify.py::score_batch (timeouts)
  3. advantage  trainer/core/advantages.py::grpo_advantage, via
                trainer/methods/step.py::group_advantages
  4. loss       trainer/core/losses.py::clipped_surrogate and the entropy bonus, as
                trainer/embedded/update.py::Updater.micro_batch_loss composes them
  5. update     gradient clipping and one AdamW step, Updater.mini_batch_step (the engine adds
                LR warmup, mini-batches, micro-batches, PPO epochs and the optional KL term)

The loop that repeats this step is trainer/embedded/loop.py::train_step.

Run it:  python examples/grpo_step.py   (the tiny preset on the CPU, a few seconds)
"""

from __future__ import annotations

import torch

from trainer.spec.config import RunConfig, parse_run_config
from trainer.core.advantages import grpo_advantage
from trainer.core.losses import Aggregation, clipped_surrogate
from trainer.embedded.forward import TrainBatch, collate, sequence_logprobs
from trainer.embedded.presets import Setup, load_setup
from trainer.rollout.base import SamplingParams


def config(**overrides) -> RunConfig:
    """GRPO on the tiny preset: a 1M-parameter Qwen2-shaped policy that already does some
    arithmetic (trainer/assets/tiny), so a batch holds solved, failed and mixed prompts.
    8 prompts x 8 rollouts keeps the step to a few seconds on a CPU."""
    return parse_run_config({"method": "grpo", "preset": "tiny", "task": "arithmetic", "device": "cpu",
                             "batch_prompts": 8, "n_total": 8, **overrides})


def sample_batch(setup: Setup, cfg: RunConfig, generator: torch.Generator) -> TrainBatch:
    """Moves 1 and 2: sample n_total responses per prompt and score each one.

    Returns the rollouts right-padded into one TrainBatch (prompt + response tokens, the
    sampler's log-probs, the response mask, ``rewards`` and ``prompt_index``, the group)."""
    task = setup.task
    # The next P problems of the run's seeded training stream (data position 0: a first step).
    problems = task.train_problems(0, cfg.batch_prompts, cfg.seed)
    prompts = [task.encode_prompt(p) for p in problems]
    # One batched call for every rollout: the prompts are prefilled once each and their KV
    # cache shared by their n rows. All randomness comes from `generator`, so the same seed
    # gives the same tokens (the test relies on it).
    sampling = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens)
    rollouts = setup.sampler.generate(prompts, cfg.n_total, sampling, generator)
    # The reward is verifiable: the verifier reads the decoded answer, never the model.
    for r in rollouts:
        r.reward = task.score(task.tokenizer.decode(r.response_ids), problems[r.prompt_index])
    return collate(rollouts, task.tokenizer.pad_id)


def grpo_step(policy: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch,
              cfg: RunConfig) -> dict[str, float]:
    """Moves 3 to 5 on a sampled batch: advantages, loss, one optimizer step. Returns the loss
    and the other numbers the engine logs for it, under the engine's metric names: the gradient
    norm before clipping, the batch's mean reward, the mean |A| and the share of rows with A = 0."""
    # 3. Advantage. Each rollout is compared with the other rollouts of its own prompt:
    #    A_i = (r_i - mean_g r) / (std_g r + eps). No value network: the group is the baseline.
    #    A group whose rewards are all equal (all solved, all failed) gets A = 0 and teaches nothing.
    advantages = grpo_advantage(batch.rewards, batch.prompt_index, eps=1e-6, unbiased=cfg.std_unbiased)

    # 4. Loss. Log-probs of the sampled tokens under the current policy, at the sampling
    #    temperature. The behaviour policy is the sampler's own log-probs (no extra forward):
    #    on this first pass over the batch the ratio is 1 up to float rounding, and the clip
    #    only bites from a second epoch or mini-batch on.
    policy.train()
    logp, entropy = sequence_logprobs(policy, batch, cfg.temperature)
    # GRPO averages tokens within each response, then responses (paper §3.1's 1/|o_i|), so a long
    # response weighs no more than a short one (DAPO's aggregation would be "token-mean").
    agg = Aggregation("seq-mean-token-mean")
    policy_loss, stats = clipped_surrogate(logp, batch.old_logprobs, advantages, batch.response_mask,
                                           eps_low=cfg.clip_eps, eps_high=cfg.clip_eps, agg=agg)
    # A small entropy bonus keeps the policy from collapsing onto one answer too early.
    loss = policy_loss - cfg.entropy_coef * agg(entropy, batch.response_mask)

    # 5. Update. Clip the gradient norm (paper: 1.0) so no single batch takes an outsized step,
    #    then one AdamW step. set_to_none frees the gradients before the next sampling needs memory.
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optim.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss/total": loss.item(), "loss/policy": policy_loss.item(), "train/grad_norm": grad_norm.item(),
            "train/clip_frac": stats["clip_frac"].item(), "reward/mean": batch.rewards.mean().item(),
            "adv/abs_mean": advantages.abs().mean().item(), "adv/zero_frac": (advantages == 0).float().mean().item()}


def make_optimizer(policy: torch.nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW with the run's settings (the engine also warms the LR up linearly, which a single
    step does not need to show)."""
    o = cfg.optim
    return torch.optim.AdamW(policy.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)


def main() -> None:
    cfg = config()
    setup = load_setup(cfg)  # policy, task and sampler, as the engine builds them from a config
    generator = torch.Generator(device=setup.device).manual_seed(cfg.seed)  # the run's sampling RNG
    batch = sample_batch(setup, cfg, generator)
    out = grpo_step(setup.model, make_optimizer(setup.model, cfg), batch, cfg)
    print(f"{cfg.batch_prompts} prompts x {cfg.n_total} rollouts: reward {out['reward/mean']:.3f}, "
          f"rows with A = 0 {out['adv/zero_frac']:.2f}, loss {out['loss/total']:.6f}, "
          f"grad norm {out['train/grad_norm']:.4f}")


if __name__ == "__main__":
    main()
