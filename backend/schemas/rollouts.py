"""A run's step details: stored rollout samples, per-step histograms and the metric keys it logged."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RolloutPublic(BaseModel):
    """One stored rollout of a step (trainer/platform/step_detail.py). ``prompt`` and ``response`` are
    model text: untrusted, clipped to the operator's AERO_ROLLOUT_TEXT_CHARS (``clipped``); a
    client renders them as text, never as markup."""

    group: int = Field(description="Prompt group within the step.")
    row: int = Field(description="Global row id within the step (generation order).")
    prompt: str
    response: str
    reward: float | None
    correct: bool
    advantage: float | None = Field(description="The advantage it was trained with; null when curated out.")
    stratum: str = Field(description="rescue, low or high (from the group's exploration).")
    round: int = Field(description="Generation round (0 = exploration / the first call).")
    stage: str = Field(description='"explore", "rescue r", "round r" or "curated out".')
    length: int = Field(description="Response tokens.")
    truncated: bool = Field(description="Cut at max_new_tokens (no EOS).")
    clipped: bool = Field(description="The stored text was clipped to the operator's cap.")


class RolloutsPublic(BaseModel):
    run_id: int
    step: int
    data: list[RolloutPublic]
    count: int = Field(description="Rollouts matching the filters in all (the page is data).")
    offset: int
    limit: int
    steps: list[int] = Field(description="Every step with a stored sample, ascending.")


class HistogramPublic(BaseModel):
    """Fixed-bin counts per step: ``counts[i][b]`` is bin b at ``steps[i]``; bins are equal widths over [lo, hi]."""

    lo: float
    hi: float
    bins: int
    counts: list[list[int]]


class HistogramsPublic(BaseModel):
    run_id: int
    steps: list[int]
    histograms: dict[str, HistogramPublic] = Field(description="pass_rate (per prompt) and length (per rollout).")


class MetricKeysPublic(BaseModel):
    run_id: int
    keys: list[str] = Field(description="Every metric key the run logged, sorted.")
