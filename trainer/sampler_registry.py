"""The sampler registry: one :class:`SamplerSpec` per sampler (the config's ``sampler``), what it
can do. The submit-time rules (trainer/config_rules.py ``sampler_issues``, trainer/resources.py,
trainer/offpolicy.py, trainer/verl/rules.py), the verl overrides and the embedded engine's
fallback read these fields, never a sampler's name (tests/test_registry_names.py). Adding a
sampler is its module under trainer/rollout/ plus one entry in :data:`SAMPLER_SPECS`.

Stdlib only: the API's config validation imports it (trainer/rollout/ imports torch). Code is
named as ``"module:attribute"`` and imported when used (common/refs.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# The config's rollout_decode values (trainer/rollout/static_decode.py ``DECODES``); "dynamic", the
# default, is every sampler's own decode
DYNAMIC = "dynamic"


@dataclass(frozen=True)
class SamplerSpec:
    name: str
    label: str  # its name in messages ("vLLM")
    description: str  # one line for help texts
    # "module:function(SamplerArgs) -> RolloutSampler" (trainer/rollout/__init__.py ``make_sampler``)
    build: str
    # the rollout_decode values it honours: "dynamic" (its own decode) and, for the hf sampler, the
    # static-shape decodes of trainer/rollout/static_decode.py
    decodes: tuple[str, ...] = (DYNAMIC,)
    # decodes that exist on CUDA only (CUDA graphs): elsewhere they run without what makes them differ
    cuda_decodes: tuple[str, ...] = ()
    keyed: bool = False  # sampler_rng="per-row": each rollout sampled from its own key (trainer/rollout/keyed.py)
    # a continuous batch (``stream``: trainer/rollout/continuous.py, aero.schedule=continuous)
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


def either(names: tuple[str, ...], field: str = "sampler") -> str:
    """``sampler=hf`` or ``sampler=hf or sampler=x``: the fix a message names."""
    return " or ".join(f"{field}={n}" for n in names)
