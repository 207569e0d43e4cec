"""Result texts, written once (stdlib only): the dashboard's tables, ``aero compare`` and the
bench's Markdown tables print the same statistic the same way.

    stat_text      0.480 ± 0.012            mean ± half the CI; the mean alone without a CI
    si_stat_text   2.44 ± 0.31 GFLOP        the same in the mean's SI prefix, the unit once
    ratio_text     0.52× [0.48, 0.56]       a ratio (per seed pair) and its CI
    p_text         p=0.012, p<0.001         a p-value
    acc_text       0.480                    an accuracy (Avg@k, Pass@k)
    pct            30.0%                    every percentage
    si             1.23 TFLOP               engineering notation
    metric_stat_text                        a per-step metric's Stat in its unit (s, FLOP, %)
    reach_cell     the compute to reach a target: costs, ratios, seeds that did not reach it

A Stat is a mapping ``{"mean", "lo", "hi", "n"}`` as the API and the bench summaries give it
(``lo``/``hi`` None without an interval); a RatioStat the same, ``n`` counting seed pairs.
A missing value (None, NaN) reads :data:`MISSING`; :data:`NOT_APPLICABLE` marks a cell that has
no value by construction (the baseline's ratio or p-value against itself). ``with_n`` appends
how many seeds (pairs) a number stands on, for tables without a seeds column (``aero compare``).

Stdlib only (of the project it imports ``common.metric_keys``), so the dashboard (HTTP only),
the CLI and the trainer's bench tables import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import common.metric_keys as mk

MISSING = "–"  # no value (None, NaN): an en dash
NOT_APPLICABLE = "—"  # no value by construction (the baseline against itself): an em dash
NOT_REACHED = "not reached"
SI_PREFIXES = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}

Formatter = Callable[[float], str]
Stat = Mapping[str, Any]


def is_missing(value: Any) -> bool:
    """None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value: float | None, spec: str = ".3f", *, scale: float = 1.0) -> str:
    """``value / scale`` in the format ``spec`` (``".3f"``, ``".1%"``); :data:`MISSING` when missing."""
    if value is None or is_missing(value):
        return MISSING
    return format(value / scale, spec)


def acc_text(value: float | None) -> str:
    """An accuracy as every table shows it (Avg@k, Pass@k): 0.48 -> '0.480'."""
    return number(value, ".3f")


def pct(fraction: float | None) -> str:
    """The one percentage format: pct(0.3) -> '30.0%', pct(0.8667) -> '86.7%'."""
    return number(fraction, ".1%")


pct_text = pct


def si_exponent(value: float) -> int:
    """The power of ten :func:`si` writes ``value`` in: a multiple of 3 in 0..18 (0 for 0, NaN, inf)."""
    if not value or not math.isfinite(value):
        return 0
    return max(0, min(18, int(math.floor(math.log10(abs(value)) / 3) * 3)))


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """Engineering notation: si(1.23e12, "FLOP") -> '1.23 TFLOP'; si(0.5, "s") -> '0.5 s'."""
    if value is None or is_missing(value):
        return MISSING
    if value == 0:
        return f"0 {unit}".strip()
    exp = si_exponent(value)
    return f"{value / 10 ** exp:.{digits}g} {SI_PREFIXES[exp]}{unit}".strip()


def half_ci(stat: Stat | None) -> float | None:
    """Half the CI width, (hi - lo) / 2, or None without a (complete) CI."""
    if not stat or is_missing(stat.get("lo")) or is_missing(stat.get("hi")):
        return None
    return float(stat["hi"] - stat["lo"]) / 2


def interval_text(ci: Iterable[float | None] | None, spec: str = ".3f") -> str:
    """'[0.400, 0.600]'; '' without both bounds."""
    lo, hi = (list(ci or ()) + [None, None])[:2]
    if is_missing(lo) or is_missing(hi):
        return ""
    return f"[{format(lo, spec)}, {format(hi, spec)}]"


def count_text(n: int, what: str) -> str:
    """'3 pairs', '1 pair'."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def _n_suffix(stat: Stat, what: str | None) -> str:
    n = stat.get("n")
    if n is None:
        return ""
    return f" (n={n})" if what is None else f" ({count_text(n, what)})"


def _apply(fmt: str | Formatter, value: float, sign: bool = False) -> str:
    if isinstance(fmt, str):
        return format(value, ("+" if sign else "") + fmt)
    text = fmt(value)
    return "+" + text if sign and value >= 0 and not text.startswith(("+", "-")) else text


def stat_text(stat: Stat | None, fmt: str | Formatter = ".3f", *, scale: float = 1.0, sign: bool = False,
              with_n: bool = False) -> str:
    """'0.480 ± 0.012': mean ± half the CI; the mean alone without a CI; :data:`MISSING` without
    a mean. ``fmt``: a format spec or a function of the number; ``scale`` divides both numbers
    (1e9: GFLOPs); ``sign``: the mean with its sign ('+0.020 ± 0.010'); ``with_n``: ' (n=3)'."""
    if not stat or is_missing(stat.get("mean")):
        return MISSING
    half = half_ci(stat)
    text = _apply(fmt, stat["mean"] / scale, sign)
    if half is not None:
        text += f" ± {_apply(fmt, half / scale)}"
    return text + (_n_suffix(stat, None) if with_n else "")


def si_stat_text(stat: Stat | None, unit: str = "", *, with_n: bool = False) -> str:
    """'2.44 ± 0.31 GFLOP': mean and half-CI in the mean's SI prefix, the unit once."""
    if not stat or is_missing(stat.get("mean")):
        return MISSING
    mean, half = stat["mean"], half_ci(stat)
    text = si(mean, unit)
    if half is not None:
        num, _, suffix = text.partition(" ")
        text = f"{num} ± {half / 10 ** si_exponent(mean):.3g}" + (f" {suffix}" if suffix else "")
    return text + (_n_suffix(stat, None) if with_n else "")


def ratio_text(ratio: Stat | float | None, digits: int = 2, *, with_n: bool = False) -> str:
    """'0.52× [0.48, 0.56]': a ratio (a RatioStat's mean over seed pairs, or a plain number) and
    its CI when it has one; ``with_n``: ' (3 pairs)'; :data:`MISSING` without a value."""
    if not isinstance(ratio, Mapping):
        ratio = {"mean": ratio}
    if is_missing(ratio.get("mean")):
        return MISSING
    ci = interval_text((ratio.get("lo"), ratio.get("hi")), f".{digits}f")
    return f"{ratio['mean']:.{digits}f}×" + (f" {ci}" if ci else "") + (_n_suffix(ratio, "pair") if with_n else "")


def p_text(p: float | None) -> str:
    """'p=0.012'; 'p<0.001' below that (a permutation test cannot resolve less); 'p=–' without one."""
    if p is None or is_missing(p):
        return f"p={MISSING}"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


# How the per-step means every client tabulates read (seed groups, the arena's leaderboard,
# ``aero compare``): seconds and FLOPs in SI prefixes, counts too, fractions in percent.
METRIC_UNITS: dict[str, str] = {mk.STEP_S: "s", mk.FLOPS_TOTAL: "FLOP", mk.ROLLOUTS_TRAINED: "", mk.ROLLOUTS_GENERATED: ""}
METRIC_FRACTIONS = frozenset({mk.ZERO_ACC_AFTER_RESCUE, mk.ZERO_ACC_AFTER_EXPLORE, mk.WASTE_FLOPS_FRAC})


def metric_stat_text(key: str, stat: Stat | None, *, with_n: bool = False) -> str:
    """A per-step metric's Stat as the tables show it: '2.05 ± 0.1 s', '4 ± 0.1 GFLOP', '18.0% ±
    2.0%'; any other key with 3 significant digits."""
    if key in METRIC_UNITS:
        return si_stat_text(stat, METRIC_UNITS[key], with_n=with_n)
    return stat_text(stat, pct if key in METRIC_FRACTIONS else ".3g", with_n=with_n)


# ---------------------------------------------------------------- compute to reach a target accuracy

# A target of the reach blocks (GET /compare/groups, the bench's reach): {"reached", "of",
# "flops", "seconds", "rollouts": Stat, "ratio": {cost: RatioStat}}; one run is a group of one.
REACH_RATIOS: tuple[tuple[str, str], ...] = (("flops", "FLOPs"), ("seconds", "time"), ("rollouts", "rollouts"))


def not_reached_text(missing: int, of: int, seeds: bool = True) -> str:
    """'not reached (2/3 seeds)': 2 of the 3 seeds never reached the target; 'not reached' for one run."""
    return f"{NOT_REACHED} ({missing}/{of} seed{'s' if of != 1 else ''})" if seeds else NOT_REACHED


def reach_cell(t: Mapping[str, Any], is_base: bool, *, seeds: bool = True, with_n: bool = False, sep: str = "<br>") -> str:
    """One target of one method, one short line each (``sep`` between them): training FLOPs,
    seconds and rollouts generated to first reach it (mean ± half-CI over the seeds that did;
    rollouts where the runs logged them), the ratios to the baseline at equal accuracy (none
    for the baseline itself; ``with_n``: with their seed pairs), then how many seeds did not
    reach it; 'not reached (n/n seeds)' alone when none did."""
    missing = t["of"] - t["reached"]
    if not t["reached"]:
        return not_reached_text(missing, t["of"], seeds)
    lines = [si_stat_text(t.get("flops"), "FLOP"), si_stat_text(t.get("seconds"), "s")]
    if not is_missing((t.get("rollouts") or {}).get("mean")):
        lines.append(f"{si_stat_text(t['rollouts'])} rollouts")
    for cost, name in REACH_RATIOS:
        ratio = (t.get("ratio") or {}).get(cost)
        if not is_base and ratio and not is_missing(ratio.get("mean")):
            lines.append(f"{ratio_text(ratio)} {name}" + (_n_suffix(ratio, "pair") if with_n else ""))
    if missing:
        lines.append(not_reached_text(missing, t["of"], seeds))
    return sep.join(lines)


def per_seed_text(items: Iterable[tuple[Any, str | None]], sep: str = "; ") -> str:
    """'s0 2 GFLOP; s1 not reached': each seed's text, :data:`NOT_REACHED` where it has none."""
    return sep.join(f"s{seed} {NOT_REACHED if text is None else text}" for seed, text in items)
