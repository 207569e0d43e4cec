"""The training methods' specs as GET /api/methods lists them (trainer/methods/spec.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class MethodStrategiesPublic(BaseModel):
    s1: bool = Field(description="S1: rescue zero-accuracy prompts with more rollouts.")
    s2: bool = Field(description="S2: Bayesian baseline for zero-variance groups.")
    s3: bool = Field(description="S3: rejection sampling of negatives in low-success groups.")


class MethodVerlPublic(BaseModel):
    rollout_n: Literal["n_total", "n_explore"]
    adv_estimator: str = Field(description="verl's advantage estimator in the stock fit.")
    stock_fit: bool = Field(description="True: verl's own fit loop (every rollout trained, verl's estimator); False: "
                            "the curated loop, trained on the method step's own advantages.")


class MethodSectionPublic(BaseModel):
    name: str = Field(description="The run-config block (``aero`` -> config.aero).")
    title: str = Field(description="Its heading on the Launch form.")
    form: list[list[str]] = Field(description="The Launch form's inputs: [dotted config path, label] pairs.")


class MethodPublic(BaseModel):
    """One training method's spec (trainer/methods/spec.py)."""

    name: str
    label: str
    colour: str = Field(description="Hex colour of the method on every chart.")
    description: str
    family: str
    order: int = Field(description="Position in lists and menus.")
    dash: int = Field(description="Where the method's curves start in the dashboard's dash cycle.")
    baseline: bool = Field(description="The method every other one is compared against (exactly one is).")
    sections: list[MethodSectionPublic] = Field(
        description="The run-config blocks the method reads; a run config of this method carries exactly these.")
    strategies: MethodStrategiesPublic
    loss_agg: str = Field(description="Default loss aggregation (RunConfig.loss_agg overrides it).")
    clip: Literal["symmetric", "clip-higher"] = Field(
        description="symmetric: (clip_eps, clip_eps); clip-higher: the method's own range (DAPO: dapo.eps_low, "
        "dapo.eps_high).")
    normalize_std: bool | None = Field(description="null: follow adv_estimator; false: never divide by the group std.")
    verl: MethodVerlPublic
    engines: list[str] = Field(description="The engines that can run the method.")
    needs_prompt_ids: bool = Field(description="True: the arithmetic task needs train_size (stable prompt ids).")


class MethodsPublic(BaseModel):
    methods: list[MethodPublic]
