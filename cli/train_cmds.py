"""Trainer commands: pretrain, train, eval, bench."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional, get_args

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cli.common import console, fail_config, parse_sets, read_json, safe
import common.metric_keys as mk
from trainer.spec.config import METHODS, ConfigError, ModelShape, parse_run_config
from trainer.spec.config_renames import renamed_fields
from common.dotted import merge
from trainer.core.reach import single_seed_reach
from trainer.tasks.registry import TASK_NAMES, get_task_spec

# cli/main.py merges these into the `aero` app; this module never imports it.
commands = typer.Typer()

SHAPE_NAMES = get_args(ModelShape)
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Config override key=value, dotted for nested (aero.k=2). Repeatable.")]


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console)


def _step_info(m: dict) -> str:
    return (f"reward {m.get('reward/mean', 0):.3f}  zero-acc {m.get('zero_acc/after_rescue', 0):.2f}  "
            f"step {m.get('time/step_s', 0):.2f}s")


@commands.command()
def pretrain(
    out: Annotated[Path, typer.Option(help="Output directory (HF model + char tokenizer + pretrain.json).")] = Path("trainer/assets/tiny"),
    task_name: Annotated[str, typer.Option("--task", help="The generated task to warm-start on: arithmetic (the tiny "
                                                          "preset) or countdown (tiny-countdown).")] = "arithmetic",
    steps: Annotated[int, typer.Option(help="Clean supervised steps.")] = 900,
    batch: Annotated[int, typer.Option(help="Sequences per step.")] = 256,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate of the clean phase (cosine decay to 10%).")] = 2e-3,
    seed: int = 0,
    noisy_steps: Annotated[int, typer.Option(help="Noisy-label steps after the clean phase (0 = a clean base).")] = 150,
    noisy_lr: Annotated[float, typer.Option(help="Peak AdamW learning rate of the noisy-label phase.")] = 1e-3,
    label_noise: Annotated[float, typer.Option(help="Fraction of noisy-phase targets with one wrong answer digit: "
                                                    "the base samples worse than it knows (RL headroom).")] = 0.3,
):
    """Warm-start the embedded tiny policy on a generated task (the base checkpoint of its preset)."""
    from trainer.embedded.pretrain import pretrain as run

    out.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails now, not after the training
    with _progress() as bar:
        task = bar.add_task("pretrain", total=steps + noisy_steps, info="")
        report = run(out, task_name, steps=steps, batch=batch, lr=lr, seed=seed, noisy_steps=noisy_steps, noisy_lr=noisy_lr,
                     label_noise=label_noise,
                     progress=lambda s, loss: bar.update(task, completed=s, info=f"loss {loss:.4f}"))
    console.print_json(json.dumps(report))
    console.print(f"saved to {out} (recipe and measured base in {out / 'pretrain.json'})")


@commands.command()
def train(
    method: Annotated[Optional[str], typer.Option(help=f"One of {', '.join(METHODS)} (default aero).")] = None,
    preset: Annotated[Optional[str], typer.Option(help="Embedded preset (default tiny).")] = None,
    model_path: Annotated[Optional[str], typer.Option(help="Local HF model directory instead of a preset.")] = None,
    engine: Annotated[Optional[str], typer.Option(help="embedded (default: this process) or verl (verl's RayPPOTrainer "
                                                       "on a local Ray; extra: pip install aero-lab with verl; runs on the CPU too).")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Training steps.")] = None,
    seed: Annotated[Optional[int], typer.Option()] = None,
    out: Annotated[Path, typer.Option(help="Run directory: metrics.jsonl, evals.jsonl, config.json, checkpoints/.")] = Path("runs/latest"),
    config: Annotated[Optional[Path], typer.Option(help="JSON run config; --set and flags override it.")] = None,
    sets: SetOpt = None,
):
    """Train one run (resumes from OUT/checkpoints if present) with a live progress bar."""
    from trainer.platform.run import run_training
    from trainer.spec.engine_registry import get_engine
    from trainer.platform.sinks import JsonlSink, MultiSink
    from trainer.spec.operator_policy import RunPolicy
    from trainer.platform.trackers import make_trackers

    data = read_json(config) if config else {}
    data = renamed_fields(data) if isinstance(data, dict) else data  # a file of old names, then new --sets
    flags = {k: v for k, v in {"method": method, "steps": steps, "seed": seed, "preset": preset,
                               "engine": engine}.items() if v is not None}
    if model_path:
        flags.update(model_path=model_path, preset=None)
    data = merge(merge(data, flags), parse_sets(sets))
    try:
        policy = RunPolicy.from_env()  # the operator's caps and sandbox settings (AERO_SANDBOX_*, AERO_MAX_*)
        cfg = parse_run_config(data, policy)
        with _progress() as bar:
            task = bar.add_task(cfg.method, total=cfg.steps, info="")
            # the run's trackers (verl runs them as its own loggers); alerts act on the platform only
            trackers = [] if get_engine(cfg.engine).own_trackers else make_trackers(cfg.trackers, out, cfg.name or cfg.method,
                                                                      cfg.model_dump(mode="json"))
            summary = run_training(cfg, out, MultiSink(JsonlSink(out), *trackers), policy=policy,
                                   progress=lambda s, n, m: bar.update(task, completed=s, info=_step_info(m)))
    except ConfigError as e:
        fail_config(e)
    final = (summary.get("final_eval") or {}).get(mk.OVERALL)
    if final:
        console.print(f"final Avg@{final['k']} {final['avg_at_k']:.3f}  Pass@{final['k']} {final['pass_at_k']:.3f}")
    console.print(f"{summary['status']} at step {summary['last_step']}; metrics in {out / 'metrics.jsonl'}")


@commands.command("eval")
def eval_cmd(
    preset: Annotated[Optional[str], typer.Option(help="Evaluate a preset's base checkpoint.")] = "tiny",
    run_dir: Annotated[Optional[Path], typer.Option(help="Evaluate a run's latest checkpoint instead.")] = None,
    n: Annotated[int, typer.Option(help="Samples per problem (k of Avg@k / Pass@k).")] = 8,
    problems: Annotated[int, typer.Option(help="Problems per benchmark.")] = 64,
    seed: int = 0,
):
    """Avg@k and Pass@k (with 95% bootstrap CIs) per held-out benchmark."""
    from trainer.embedded.checkpoint import load_latest_checkpoint
    from trainer.tasks.evaluate import evaluate
    from trainer.embedded.presets import load_setup
    from trainer.rollout.base import SamplingParams

    data = read_json(run_dir / "config.json") if run_dir else {"preset": preset}
    from trainer.spec.operator_policy import RunPolicy

    policy = RunPolicy.from_env()
    try:
        cfg = parse_run_config({**data, "eval_n": n, "eval_problems": problems}, policy)
    except ConfigError as e:
        fail_config(e)
    setup = load_setup(cfg, policy)
    if run_dir:
        ckpt = load_latest_checkpoint(run_dir)
        if ckpt is None:
            console.print(f"[red]no checkpoint in {safe(run_dir)}/checkpoints[/]")
            raise typer.Exit(1)
        setup.model.load_state_dict(ckpt["model"])
    res = evaluate(setup.sampler, setup.task, SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens), n,
                   problems, seed, cfg.verifier_timeout_s)
    table = Table(title=f"Evaluation ({problems} problems per benchmark, n={n})")
    for col in ("benchmark", f"Avg@{n}", "95% CI", f"Pass@{n}"):
        table.add_column(col)
    for name, r in res.items():
        table.add_row(safe(name), f"{r['avg_at_k']:.3f}", f"[{r['avg_ci'][0]:.3f}, {r['avg_ci'][1]:.3f}]", f"{r['pass_at_k']:.3f}")
    console.print(table)


@commands.command()
def bench(
    preset: Annotated[Optional[str], typer.Option(help="Embedded preset every method starts from (default: the task's, "
                                                       "tiny for arithmetic; --set model_path=DIR for a local model "
                                                       "instead).")] = None,
    task_name: Annotated[Optional[str], typer.Option("--task", help="The task every method trains: arithmetic "
                                                                    "(default), countdown, or a file task with --set "
                                                                    "model_path=... train_data=...")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Training steps per method (default 60; with --shape 3).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of a single-seed bench.")] = 0,
    seeds: Annotated[Optional[str], typer.Option(help="Comma-separated seeds (e.g. 0,1,2): repeat the bench per seed "
                                                      "and report mean ± 95% CI across seeds.")] = None,
    shape: Annotated[Optional[str], typer.Option(help="Paper-scale cost bench, nothing downloaded: a shipped architecture "
                                                     f"({', '.join(SHAPE_NAMES)}) with RANDOM weights on the scripted "
                                                     "strata task at the paper's step shape (128 prompts x 16, responses "
                                                     "up to 1,536 tokens; --set overrides). Rewards are scripted: no "
                                                     "learning is measured.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the full report here.")] = None,
    ablations: Annotated[bool, typer.Option(help="Also run aero-s1 and aero-s1s2 (measured waterfall).")] = False,
    methods: Annotated[Optional[str], typer.Option(help="Comma-separated methods instead of grpo,dapo,aero; the "
                                                       "rollout-allocation arena: grpo,dapo,aero,cppo,knapsack,speed,greso "
                                                       "with --set train_size=1024 (knapsack and greso need it).")] = None,
    out: Annotated[Path, typer.Option(help="Directory of the runs (OUT/METHOD or OUT/seedS/METHOD: config.json, "
                                           "metrics.jsonl, evals.jsonl).")] = Path("runs/bench"),
    sets: SetOpt = None,
):
    """Train GRPO, DAPO and AERO (or --methods) side by side from the same base and seed, in one table.

    Also reports the compute each method needs to reach fractions of GRPO's accuracy gain; with
    --seeds, the leaderboard against GRPO (docs/comparisons.md "The rollout-allocation arena").
    With --shape, the paper-scale cost bench on a random-weight architecture: per method the
    step's split, tokens per second, update MFU and peak memory (docs/bench.md)."""
    from trainer.bench import (ABLATIONS, MAIN_METHODS, SHAPE_STEPS, render_markdown, render_reach, render_seeds_markdown,
                               render_shape_markdown, run_bench, run_bench_seeds)

    chosen = tuple(m.strip() for m in methods.split(",")) if methods else MAIN_METHODS
    bad = [m for m in chosen if m not in METHODS]
    if bad:
        raise typer.BadParameter(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}", param_hint="--methods")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()] if seeds else None
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers; got {seeds!r}", param_hint="--seeds") from None
    chosen += tuple(m for m in (ABLATIONS if ablations else ()) if m not in chosen)
    if shape is not None and shape not in SHAPE_NAMES:
        raise typer.BadParameter(f"unknown shape {shape!r}; choose from {', '.join(SHAPE_NAMES)}", param_hint="--shape")
    if shape is not None and seed_list:
        raise typer.BadParameter("a shape bench measures cost on one seed (its rewards are scripted)", param_hint="--seeds")
    steps = steps if steps is not None else (SHAPE_STEPS if shape else 60)
    overrides = parse_sets(sets)
    if task_name is not None:
        if task_name not in TASK_NAMES:
            raise typer.BadParameter(f"unknown task {task_name!r}; choose from {', '.join(TASK_NAMES)}", param_hint="--task")
        overrides["task"] = task_name
    preset = preset or get_task_spec(overrides.get("task", "arithmetic")).preset
    with _progress() as bar:
        def on_method(method, cfg):
            task = bar.add_task(f"{method} s{cfg.seed}", total=cfg.steps, info="")
            return lambda s, n, m: bar.update(task, completed=s, info=_step_info(m))

        kw = dict(preset=preset, steps=steps, methods=chosen, overrides=overrides, out_dir=out, on_method=on_method)
        try:
            report = run_bench_seeds(seed_list, **kw) if seed_list else run_bench(seed=seed, shape=shape, **kw)
        except ConfigError as e:
            fail_config(e)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
    if seed_list:
        print(render_seeds_markdown(report))
    elif shape:
        print(render_shape_markdown(report))
    else:
        print(render_markdown(report))
        if "reach" in report:
            print("\n" + render_reach(single_seed_reach(report["reach"]), report["meta"]["eval"]["k"]))
