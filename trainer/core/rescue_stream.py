"""AERO's rescue (S1) on a continuous batch (``rollout.schedule="continuous"``): each prompt's next
rescue window starts as soon as its last one is scored, instead of every prompt waiting for the
slowest (arXiv 2602.14338, Algorithm 1's rescue loop, §4.2.1; the rounds are trainer/core/rescue.py's).

Per prompt, the rollouts are exactly those of :func:`trainer.core.rescue.plan_rounds` and
:func:`trainer.core.rescue.replay` on the whole batch (the same windows of R rounds, the same
shares, the same ``rescued_at``), because prompts only interact through the budget B. So a prompt
runs ahead of the others only while the budget *cannot* bind, whatever the rollouts not yet
scored turn out to be:

    slack = budget_left + (rows in flight) - sum over prompts that may still want rollouts of
            min(n_max - produced_p, (K_max - rounds_p) * delta_n)    (their most, if never rescued)

When slack >= 0, every future round gives every active prompt its full share whatever happens,
as sequential rounds would; slack never falls (a window spends at most what it removes from the
sum), so once it holds it holds for the rest of the step. Before that, rescue waits, as in
separate calls, until nothing is in flight, and the window is planned for the whole batch at once
(``plan_rounds`` on every prompt, its budget split included).

Pure numpy bookkeeping: the AERO step (trainer/methods/aero.py) calls :meth:`RescueStream.explored`
and :meth:`RescueStream.scored` from the sampler's stream and gets back the rollouts to ask for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trainer.core.rescue import RescueState, plan_rounds, replay
from trainer.core.strata import Stratum, stratify


@dataclass(frozen=True)
class RescueRules:
    """The rescue's settings (the ``aero`` section's)."""

    S: int
    tau: float
    rounds: int  # aero.rounds_per_call (0: every round in one window)
    delta_n: int
    n_max: int
    k_max: int
    split: str


class RescueStream:
    """Per-prompt rescue windows over a stream of scored blocks (module docstring).

    ``may_rescue`` bool[P]: prompts that are rescued if exploration leaves them in the rescue
    stratum (S1 on, aero-mem's give-ups off); ``n_first`` int[P] their exploration rollouts;
    ``budget`` B."""

    def __init__(self, may_rescue, n_first, budget: int, rules: RescueRules):
        self.may = np.asarray(may_rescue, dtype=bool)
        self.n_first = np.asarray(n_first, dtype=np.int64)
        P = len(self.n_first)
        self.rules, self.budget = rules, int(budget)
        self.done_exploring = np.zeros(P, dtype=bool)
        if (self.n_first < 1).any():
            raise ValueError("every prompt explores at least one rollout on a continuous batch (its scored "
                             "exploration is what starts its rescue)")
        self.active = np.zeros(P, dtype=bool)
        self.produced = self.n_first.copy()
        self.rescued_at = np.full(P, -1, dtype=np.int64)
        self.rounds = np.zeros(P, dtype=np.int64)
        self.unused = 0
        self.window: dict[int, np.ndarray] = {}  # prompt -> its plan column [R', 1] in flight
        self.safe = False
        self.global_windows = 0  # windows planned for the whole batch (the budget could bind)

    def in_flight(self) -> int:
        """Blocks asked for and not yet scored: explorations, then windows."""
        return int((~self.done_exploring).sum()) + len(self.window)

    def _most(self, p: int) -> int:
        r = self.rules
        return max(0, min(r.n_max - int(self.produced[p]), (r.k_max - int(self.rounds[p])) * r.delta_n))

    def slack(self) -> int:
        """budget_left + rows in flight - the most rollouts the prompts could still want."""
        wanting = (~self.done_exploring & self.may) | self.active
        flight = sum(int(w.sum()) for w in self.window.values())
        return self.budget + flight - sum(self._most(p) for p in np.flatnonzero(wanting).tolist())

    def _view(self, p: int) -> RescueState:
        return RescueState(active=self.active[p:p + 1].copy(), produced=self.produced[p:p + 1].copy(),
                           budget_left=self.budget, rescued_at=self.rescued_at[p:p + 1].copy(),
                           rounds_used=int(self.rounds[p]))

    def _launch(self, p: int, column: np.ndarray) -> list[tuple[int, int, int]]:
        n = int(column.sum())
        if n == 0:
            return []
        self.window[p] = column
        self.budget -= n
        return [(p, n, int(self.rounds[p]) + 1)]

    def _next(self) -> list[tuple[int, int, int]]:
        """What to ask for now: per-prompt windows once the budget cannot bind, else a window of
        the whole batch once nothing is in flight."""
        r = self.rules
        self.safe = self.safe or self.slack() >= 0
        asks: list[tuple[int, int, int]] = []
        if self.safe:
            for p in np.flatnonzero(self.active).tolist():
                if p not in self.window:
                    asks += self._launch(p, plan_rounds(self._view(p), r.rounds, delta_n=r.delta_n, n_max=r.n_max,
                                                        k_max=r.k_max, split=r.split))
            return asks
        if self.in_flight():
            return asks
        plan = plan_rounds(self.state(), r.rounds, delta_n=r.delta_n, n_max=r.n_max, k_max=r.k_max, split=r.split)
        if len(plan):
            self.global_windows += 1
            for p in np.flatnonzero(self.active).tolist():
                asks += self._launch(p, plan[:, p:p + 1])
        return asks

    def explored(self, p: int, correct: int) -> list[tuple[int, int, int]]:
        """Prompt p's exploration was scored (``correct`` of its n_first[p]). Returns the rollouts
        to ask for: (prompt, count, round) each."""
        self.done_exploring[p] = True
        stratum = stratify(np.array([correct]), self.n_first[p:p + 1], self.rules.S, self.rules.tau)[0]
        self.active[p] = bool(self.may[p] and stratum == int(Stratum.RESCUE))
        return self._next()

    def scored(self, p: int, correct) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Prompt p's rescue window was scored (``correct``: bool per rollout, in generation order).
        Returns which of them count (replay's ``used``) and the rollouts to ask for next."""
        column = self.window.pop(p)  # its budget was charged at launch: replay charges a budget of its own
        new, used = replay(replace(self._view(p), budget_left=int(column.sum())), column,
                           [np.asarray(correct, dtype=np.float64)])
        self.active[p], self.produced[p], self.rescued_at[p] = new.active[0], new.produced[0], new.rescued_at[0]
        self.rounds[p] = new.rounds_used
        self.unused += new.unused
        return used[0], self._next()

    def state(self) -> RescueState:
        """The step's rescue state, as separate calls would leave it."""
        return RescueState(active=self.active.copy(), produced=self.produced.copy(), budget_left=self.budget,
                           rescued_at=self.rescued_at.copy(), rounds_used=int(self.rounds.max(initial=0)),
                           unused=self.unused)
