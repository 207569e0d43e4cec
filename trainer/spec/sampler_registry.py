"""The sampler registry: one :class:`SamplerSpec` per sampler (the config's ``rollout.sampler``),
what it can do, and the run config's ``rollout`` block (:class:`RolloutConfig`: the sampler, its
decode, its random source and AERO's generation schedule), which the registry owns. The
submit-time rules (trainer/spec/config_rules.py ``sampler_issues``, trainer/spec/resources.py,
trainer/spec/offpolicy.py, trainer/verl/rules.py), the verl overrides and the embedded engine's
fallback read these fields, never a sampler's name (tests/test_registry_names.py). Adding a
sampler is its module under trainer/rollout/ plus one entry in :data:`SAMPLER_SPECS`.

Pydantic and the stdlib only: the API's config validation imports it (trainer/rollout/ imports
torch). Code is named as ``"module:attribute"`` and imported when used (common/refs.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainer.spec.config_types import Field, Strict

# The config's rollout.decode values (trainer/rollout/static_decode.py ``DECODES``); "dynamic", the
# default, is every sampler's own decode
DYNAMIC = "dynamic"


@dataclass(frozen=True)
class SamplerSpec:
    name: str
    label: str  # its name in messages ("vLLM")
    description: str  # one line for help texts
    # "module:function(SamplerArgs) -> RolloutSampler" (trainer/rollout/__init__.py ``make_sampler``)
    build: str
    # the rollout.decode values it honours: "dynamic" (its own decode) and, for the hf sampler, the
    # static-shape decodes of trainer/rollout/static_decode.py
    decodes: tuple[str, ...] = (DYNAMIC,)
    # decodes that exist on CUDA only (CUDA graphs): elsewhere they run without what makes them differ
    cuda_decodes: tuple[str, ...] = ()
    keyed: bool = False  # rollout.rng="per-row": each rollout sampled from its own key (trainer/rollout/keyed.py)
    # a continuous batch (``stream``: trainer/rollout/continuous.py, rollout.schedule=continuous)
    stream: bool = False
    tensor_parallel: bool = False  # replicas over several GPUs (resources.rollout_tp > 1, the verl engine)
    # where it samples on every engine (a CPU build of vLLM also samples on the CPU on the embedded
    # engine: ``unavailable`` says where it cannot)
    devices: tuple[str, ...] = ("cpu", "cuda")
    # the asynchronous sampler (offpolicy.max_staleness > 0): it runs ahead on its own copy of the policy
    runs_ahead: bool = False
    # it loads the policy from a model directory (a model_shape has none)
    from_model_dir: bool = False
    # "module:function(torch.device) -> str | None": why it cannot sample on that device on this host
    # (None: it can), and the sampler the embedded engine uses instead, with a warning
    unavailable: str | None = None
    fallback: str | None = None
    verl_rollout: str = ""  # verl's actor_rollout_ref.rollout.name for it
    # verl's rollout.full_determinism: the rollout server keys each sample's draws by its request id
    verl_full_determinism: bool = False
    extra: str | None = None  # the pip extra that installs it


SAMPLER_SPECS: dict[str, SamplerSpec] = {s.name: s for s in (
    SamplerSpec("hf", "HF", "transformers' KV-cache sampling from the training model itself (CPU or CUDA)",
                build="trainer.rollout:build_hf", decodes=(DYNAMIC, "static", "graphs"), cuda_decodes=("graphs",),
                keyed=True, stream=True, runs_ahead=True,
                verl_rollout="aero_hf", verl_full_determinism=True),  # trainer/verl/plugins ROLLOUT_NAME
    SamplerSpec("vllm", "vLLM", "vLLM (extra aero-lab[vllm], CUDA; weights synced after every update)",
                build="trainer.rollout:build_vllm", tensor_parallel=True, devices=("cuda",), from_model_dir=True,
                unavailable="trainer.rollout.vllm:unavailable", fallback="hf", verl_rollout="vllm", extra="vllm"),
)}
SAMPLER_NAMES: tuple[str, ...] = tuple(SAMPLER_SPECS)


def get_sampler(name: str) -> SamplerSpec:
    try:
        return SAMPLER_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown sampler {name!r}; choose one of {sorted(SAMPLER_NAMES)}") from None


def samplers_that(capability: str, value: object = True) -> tuple[str, ...]:
    """The samplers whose spec has ``capability`` (a boolean field: ``keyed``...), or whose tuple
    field holds ``value`` (``samplers_that("devices", "cpu")``)."""
    out = []
    for name, spec in SAMPLER_SPECS.items():
        field = getattr(spec, capability)
        if (value in field) if isinstance(field, tuple) else field == value:
            out.append(name)
    return tuple(out)


def either(names: tuple[str, ...], field: str = "rollout.sampler") -> str:
    """``rollout.sampler=hf`` or ``rollout.sampler=hf or rollout.sampler=x``: the fix a message names."""
    return " or ".join(f"{field}={n}" for n in names)


class RolloutConfig(Strict):
    """How a run's rollouts are generated: one block, read by the sampler registry's rules
    (trainer/spec/config_rules.py ``sampler_issues``). Formerly the top-level ``sampler``,
    ``rollout_decode`` and ``sampler_rng`` and AERO's ``aero.schedule``, still read with a
    deprecation warning (trainer/spec/config_renames.py)."""

    sampler: Literal[SAMPLER_NAMES] = Field(  # type: ignore[valid-type]
        "hf", description="What generates the rollouts: " + "; ".join(f"'{s.name}': {s.description}"
                                                                      for s in SAMPLER_SPECS.values()) +
        ". Without vLLM or CUDA a 'vllm' run falls back to 'hf' with a warning. On the verl engine: 'hf' is the same "
        "sampler as an HF-generate rollout server (CPU or CUDA), 'vllm' is verl's vLLM replica (CUDA). Formerly "
        "sampler (and before it rollout_engine, 'embedded' = 'hf'), still accepted with a deprecation warning.")
    decode: Literal["dynamic", "static", "graphs"] = Field(
        DYNAMIC, description="How the hf sampler decodes on the embedded engine (the same tokens from the same seed on "
        "all three). dynamic: a growing KV cache, finished rows dropped from the batch, the host checked every token. "
        "static: a preallocated KV cache, finished rows masked and the batch shrunk along a few fixed sizes, sampling "
        "without host syncs, the host checked every 8 tokens on CUDA. graphs: static, with each decode step replayed "
        "as a CUDA graph per batch size (device=cuda; refused with device=cpu). vLLM decodes its own way and the "
        "verl engine's rollout servers use dynamic, so both refuse the others (docs/engines.md). With "
        "schedule=continuous the batch always runs on the static core (graphs with graphs): dynamic and static are "
        "then one path. Formerly rollout_decode.")
    rng: Literal["stream", "per-row"] = Field(
        "stream", description="Where the hf sampler's random numbers come from. stream: the run's generator, drawn "
        "for every row in turn (torch.multinomial's draws), so a rollout's tokens depend on the rows sampled with "
        "it. per-row: each rollout samples by inverse CDF from counter-based numbers keyed by its step, prompt and "
        "index among the prompt's rollouts, so its tokens depend on the policy and its key only, not on the batch, "
        "chunk or schedule that computes it (another seed's worth of samples: the same seed gives other tokens than "
        "stream). Needed by schedule=continuous. The hf sampler on the embedded engine only. Formerly sampler_rng.")
    schedule: Literal["calls", "continuous"] = Field(
        "calls", description="How a method that generates in rounds (AERO: exploration, then rescue) calls the "
        "sampler. calls: one call for exploration, then one per aero.rounds_per_call rescue rounds. continuous: all "
        "in ONE continuous batch on the hf sampler: a prompt's next rescue window joins the batch as soon as its "
        "exploration (or last window) is scored, instead of waiting for the slowest row of the batch; while the "
        "budget could still bind, rescue waits and is planned for the whole batch, as in calls. Per prompt the "
        "rollouts of calls with the same keys (exact when both compute the same logits, e.g. float32 on the CPU; "
        "elsewhere the same distribution). Needs rng=per-row and a method that streams (AERO). It decodes on the "
        "static core whatever the decode (graphs on request). Formerly aero.schedule.")
