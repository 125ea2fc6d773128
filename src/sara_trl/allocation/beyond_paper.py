"""Options beyond the paper, off by default: history warm-start, predictive selection, Bayes-optimal stopping
(``stopping_rule="bayes_optimal"``) and token-aware cost, as three jobs (:class:`HistoryPrior`,
:class:`PromptSelector`, :class:`BayesStopping`). :class:`Extensions` wires them to the allocator's four hooks (step
start, fresh-prompt draw, per-round decision, step end) when any option is on; with every option off the allocator
never builds it and runs the paper's SARA unchanged.

* History warm-start (paper App. D): :class:`~sara_trl.allocation.history.PromptHistory` keeps decayed
  pseudo-counts per dataset row; a drawn prompt's prior is the base prior updated with them.
* Predictive selection (paper §4 "SARA + DPS", done here with the same Beta posteriors): fresh prompts come from a
  candidate pool taken from the stream, ranked by a Thompson draw (or the posterior mean) of the chance that a full
  group mixes, with an epsilon-uniform share so that no prompt starves. In-step verification still decides.
* Bayes-optimal stopping: :mod:`~sara_trl.allocation.optimal_stopping` at the cost per effective group ``lam*``
  that is consistent for the prompts being drawn (Dinkelbach), under a prior fitted online by
  :mod:`~sara_trl.allocation.empirical_bayes`.
* Token-aware cost: rollouts cost their expected length (running means of success and failure lengths), so long
  all-fail traces are abandoned sooner.
"""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.config import PAPER_TAU_LOW, AllocationConfig
from sara_trl.allocation.empirical_bayes import OutcomeTable, PredictiveBuffer, fit_prior
from sara_trl.allocation.history import PromptHistory, pool_size, select_candidates
from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.optimal_stopping import (
    MixturePrior,
    StoppingSolution,
    p_eff_mixture,
    solve_rate,
    solve_values,
)
from sara_trl.allocation.rules import decide as paper_decide
from sara_trl.allocation.types import ABANDON, COMMIT, CONTINUE

__all__ = ["BayesStopping", "Extensions", "HistoryPrior", "PromptSelector", "extensions_enabled"]

BURN_IN_TAU_LOW = PAPER_TAU_LOW  # "bayes_optimal" runs the paper's default rule until the prior has been fitted
_POPULATION_MAX = 512  # prompts of the last step kept to set lam* under history
_MOVE_W, _MOVE_LOG, _MOVE_TOK = 1e-3, 1e-3, 1e-2  # the fitted prior "moved" beyond these -> recompute boundary


def extensions_enabled(config: AllocationConfig) -> bool:
    """True when any beyond-paper option is on (else the allocator runs the paper's SARA untouched)."""
    return config.stopping_rule == "bayes_optimal" or config.history_decay is not None or config.selection is not None


class HistoryPrior:
    """History warm-start (paper App. D): each dataset row's decayed pseudo-counts
    (:class:`~sara_trl.allocation.history.PromptHistory`, sized to the stream at the first step), and how many drawn
    prompts had any (``last_hits`` of ``last_drawn``, and the running totals)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.history: PromptHistory | None = None
        self.last_hits = self.last_drawn = self.total_hits = self.total_drawn = 0

    def size_to(self, stream) -> None:
        """Build the history for the stream's dataset, or check it is the same dataset.

        Raises
        ------
        ValueError
            The stream's dataset has another number of rows than the history.
        """
        # a ShardStream (one process's share in streaming) draws dataset indices: size the table to the dataset
        rows = getattr(stream, "dataset_size", stream.num_prompts)
        if self.history is None:
            self.history = PromptHistory(rows, self.decay)
        elif self.history.num_prompts != rows:
            raise ValueError(f"the prompt history covers {self.history.num_prompts} rows but the stream has "
                             f"{rows}: one Allocator must stay with one dataset")

    def observe(self, pids: np.ndarray, n_scored: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed a step's prompts (``(P,)`` each); returns their pseudo-counts ``(hs, hf)`` before the step."""
        hs, hf = self.history.counts(pids)
        self.last_hits = int(((hs + hf) > 0).sum())
        self.last_drawn = len(pids)
        self.total_hits += self.last_hits
        self.total_drawn += self.last_drawn
        self.history.observe(pids, n_scored, s)
        self.history.end_step()
        return hs, hf


class PromptSelector:
    """Predictive selection (paper §4 "SARA + DPS"): fresh prompts picked from a candidate pool by a Thompson draw
    (or the posterior mean) of the chance that a full group mixes, with an epsilon-uniform share; the only randomness
    of the extensions, from a generator seeded with ``selection_seed``."""

    def __init__(self, config: AllocationConfig):
        self.config = config
        self.rng = np.random.default_rng(config.selection_seed)
        self.last_pool = self.last_uniform_picks = 0

    def take(self, stream, count: int, avoid, priors) -> np.ndarray:
        """``count`` fresh prompt ids not in ``avoid``, ranked under ``priors(pool) -> MixturePrior`` (``(<= count,)``
        int64)."""
        cfg, k = self.config, self.config.k
        size = pool_size(count, cfg.selection_pool)
        if avoid is not None:  # no larger than the prompts not yet in the step, so the pool holds no repeat
            ids = np.sort(np.asarray(avoid, np.int64).reshape(-1))  # distinct ids counted on a plain sort
            distinct = int(ids.size and 1 + np.count_nonzero(ids[1:] != ids[:-1]))
            size = max(count, min(size, stream.num_prompts - distinct))
        pool = stream.take(size, avoid)
        if len(pool) == 0:
            return pool
        prior = priors(pool)
        if cfg.selection == "thompson":
            g = prior.sample(self.rng, size=len(pool))
            scores = 1.0 - g**k - (1.0 - g) ** k
        else:
            scores = p_eff_mixture(prior, np.zeros(len(pool), np.int64), np.zeros(len(pool), np.int64), k)
        picked, uniform = select_candidates(pool, count, scores, self.rng, cfg.selection_floor, return_uniform=True)
        self.last_uniform_picks += int(uniform.sum())
        self.last_pool += len(pool)
        return picked


class BayesStopping:
    """Bayes-optimal stopping (``stopping_rule="bayes_optimal"``): the empirical-Bayes prior fitted online
    (:mod:`~sara_trl.allocation.empirical_bayes`, on an outcome table, or with history on the predictive buffer),
    the rollout costs (token means with ``cost_unit="tokens"``) and the boundary at the consistent cost per effective
    group ``lam*`` (:mod:`~sara_trl.allocation.optimal_stopping`), cached while the prior and costs stay put."""

    def __init__(self, config: AllocationConfig, base: MixturePrior):
        cfg = self.config = config
        self.k, self.m, self.base = cfg.k, cfg.commit_floor, base
        self.tokens = cfg.cost_unit == "tokens"
        self.fitted: MixturePrior | None = None
        self.table = OutcomeTable(cfg.k)  # prior-fit data without history
        self.buffer = PredictiveBuffer() if cfg.history_decay is not None else None  # ... with it
        self.tok_sum = np.zeros(2)  # decayed token totals of failed / successful rollouts
        self.tok_cnt = np.zeros(2)
        self.lam: float | None = None
        self.boundaries: dict[int, StoppingSolution] = {}  # capacity K -> solution (common prior only)
        self.key: tuple | None = None
        self.pop_s, self.pop_f = np.zeros(0), np.zeros(0)
        self.recomputes = 0

    def prior_now(self) -> MixturePrior:
        """The empirical-Bayes fit once available, else the config's Beta."""
        return self.fitted if self.fitted is not None else self.base

    def token_costs(self) -> tuple[float, float]:
        """``(t_pass, t_fail)``: cost of a successful / failed rollout in the configured unit."""
        if not self.tokens or np.any(self.tok_cnt <= 0):
            return 1.0, 1.0
        mean = self.tok_sum / self.tok_cnt
        return float(mean[1]), float(mean[0])

    def refit(self, with_history: bool) -> None:
        """Refit the prior on the outcomes so far and recompute ``lam*`` and the boundary when they moved."""
        cfg = self.config
        fit = None
        if self.buffer is not None:  # predictive likelihood given each draw's history (valid under selection)
            if self.buffer.total >= cfg.auto_min_prompts:
                fit = self.buffer.fit(cfg.auto_prior, init=self.fitted)
        elif self.table.total >= cfg.auto_min_prompts:
            fit = fit_prior(self.table, cfg.auto_prior, init=self.fitted)
        if fit is not None and (self.fitted is None or _moved(self.fitted, fit)):
            self.fitted = fit
        if self.fitted is None:
            return  # burn-in: the paper's rule at BURN_IN_TAU_LOW until auto_min_prompts outcomes are in
        t_pass, t_fail = self.token_costs()
        w0, w1, a, b = self.prior_now().as_tuple()
        key = (w0, w1, a, b, t_pass, t_fail, len(self.pop_s))
        if self.key is not None and not with_history and not _key_moved(self.key, key):
            return  # prior and costs unchanged: keep the cached boundary
        if with_history and len(self.pop_s):
            population = self.prior_now().posterior(self.pop_s, self.pop_f)
        else:
            population = self.prior_now()
        self.lam, sol = solve_rate(population, self.k, self.m, cfg.n0, t_pass, t_fail, loss_cap=cfg.auto_loss_cap)
        self.boundaries = {}
        if not with_history:
            self.boundaries[self.k] = sol
        self.key = key
        self.recomputes += 1

    def decide(self, priors: MixturePrior, n, n_scored, s, per_prompt: bool):
        """The Bayes-optimal decisions (``per_prompt``: ``priors`` holds one prior per prompt, from history)."""
        cfg, k = self.config, self.k
        P = len(n)
        cap = k - (n - n_scored)  # scorable capacity: an unscorable rollout occupies a slot
        cap = np.maximum(cap, np.maximum(n_scored, 1))
        p = p_eff_mixture(priors, n_scored, s, cap)
        mixed = is_mixed(s, n_scored)
        dec = np.full(P, CONTINUE, np.int8)
        unmixed = ~mixed & (n_scored > 0)
        ab = np.zeros(P, bool)
        t_pass, t_fail = self.token_costs()
        for K in np.unique(cap[unmixed]):
            rows = np.flatnonzero(unmixed & (cap == K))
            K = int(K)
            if K < 2:
                ab[rows] = True
                continue
            m = max(1, min(K, self.m - (k - K)))
            n0 = min(cfg.n0, K)
            if not per_prompt:
                sol = self.boundaries.get(K)
                if sol is None:
                    sol = solve_values(priors, K, m, n0, self.lam, t_pass, t_fail, loss_cap=cfg.auto_loss_cap)
                    self.boundaries[K] = sol
                row_sol = np.zeros(len(rows), np.int64)
            else:
                sol = solve_values(priors.take(rows), K, m, n0, self.lam, t_pass, t_fail, size=len(rows),
                                   loss_cap=cfg.auto_loss_cap)
                row_sol = np.arange(len(rows))
            ns = n_scored[rows]
            on_fail = s[rows] == 0
            ab[rows] = np.where(on_fail, sol.abandon_f[row_sol, ns], sol.abandon_p[row_sol, ns])
        dec[(~mixed) & (ab | (n >= k))] = ABANDON
        dec[mixed & (n >= self.m)] = COMMIT
        return dec, p

    def feed(self, n_scored, s, success, tokens, hs=None, hf=None) -> None:
        """A step's outcomes: into the buffer (with history, ``hs``/``hf`` the drawn prompts' pseudo-counts, whose
        population sets the next ``lam*``) or the outcome table, and the token means; all decayed first."""
        cfg = self.config
        if hs is not None:  # the population of priors being drawn, for next step's lam* (as pseudo-counts)
            keep = np.linspace(0, len(hs) - 1, min(len(hs), _POPULATION_MAX)).astype(np.int64) \
                if len(hs) else np.zeros(0, np.int64)
            self.pop_s, self.pop_f = hs[keep], hf[keep]
            self.buffer.decay(cfg.auto_prior_decay)
            self.buffer.add(hs, hf, s, n_scored - s)
        else:
            self.table.decay(cfg.auto_prior_decay)
            self.table.add(n_scored, s)
        if self.tokens:
            success = np.asarray(success, np.float64)
            tokens = np.asarray(tokens, np.float64)
            ok = ~np.isnan(success)
            self.tok_sum *= cfg.auto_prior_decay
            self.tok_cnt *= cfg.auto_prior_decay
            self.tok_sum += np.bincount(success[ok].astype(np.int64), weights=tokens[ok], minlength=2)
            self.tok_cnt += np.bincount(success[ok].astype(np.int64), minlength=2)


class Extensions:
    """What the allocator calls at its four hooks when a beyond-paper option is on: the three jobs above, each built
    only when its option is on (:class:`HistoryPrior` with ``history_decay``, :class:`PromptSelector` with
    ``selection``, :class:`BayesStopping` with ``stopping_rule="bayes_optimal"``), wired together here: the history
    sets each prompt's prior for the rule and the selector, and feeds the prior fit.

    Deterministic like the allocator: the only randomness (Thompson draws, epsilon-uniform picks) comes from a
    generator seeded with ``config.selection_seed`` whose state is saved by :meth:`state_dict`.
    """

    def __init__(self, config: AllocationConfig):
        self.config = cfg = config
        self.k = cfg.k
        self.m = cfg.commit_floor
        self.base = MixturePrior(0.0, 0.0, cfg.prior_alpha, cfg.prior_beta)
        self.prior = HistoryPrior(cfg.history_decay) if cfg.history_decay is not None else None
        self.selector = PromptSelector(cfg)
        self.stopping = BayesStopping(cfg, self.base) if cfg.stopping_rule == "bayes_optimal" else None

    @property
    def history(self) -> PromptHistory | None:
        """The per-row history (None without ``history_decay``, or before the first step)."""
        return None if self.prior is None else self.prior.history

    @property
    def table(self) -> OutcomeTable | None:
        """The prior fit's outcome table (``stopping_rule="bayes_optimal"`` without history), else None."""
        return None if self.stopping is None else self.stopping.table

    # ------------------------------------------------------------------------------------------- priors
    def prior_now(self) -> MixturePrior:
        """The prior of a prompt without history: the empirical-Bayes fit once available, else the config's Beta."""
        return self.base if self.stopping is None else self.stopping.prior_now()

    def prompt_priors(self, pids: np.ndarray) -> MixturePrior:
        """Per-prompt priors ``(P,)``: the base prior updated with each row's decayed history."""
        prior = self.prior_now()
        if self.history is None:
            return prior
        s, f = self.history.counts(pids)
        return prior.posterior(s, f)

    # ------------------------------------------------------------------------------------------- hooks
    def begin_step(self, stream) -> None:
        """Size the history to the stream's dataset; refit the prior and the boundary when they moved."""
        self.selector.last_pool = 0
        self.selector.last_uniform_picks = 0
        if self.prior is not None:
            self.prior.size_to(stream)
        if self.stopping is not None:
            self.stopping.refit(with_history=self.history is not None)

    def take_fresh(self, stream, count: int, avoid=None) -> np.ndarray:
        """Fresh prompt ids for this round: the stream's next ``count`` or, with selection, the best of a pool
        (:class:`PromptSelector`); ``avoid``: ids already in the step (see :meth:`PromptStream.take`).

        Returns
        -------
        ndarray of int64, shape (<= count,)
        """
        if self.config.selection is None or count <= 0:
            return stream.take(count, avoid)
        return self.selector.take(stream, count, avoid, self.prompt_priors)

    def decide(self, pids, n, n_scored, s):
        """commit / abandon / continue and p_eff for the prompts of a round (same contract as
        :func:`sara_trl.allocation.rules.decide`), using per-prompt priors and, with
        ``stopping_rule="bayes_optimal"``, the Bayes-optimal boundary instead of the fixed threshold."""
        cfg = self.config
        n = np.asarray(n, np.int64)
        n_scored = np.asarray(n_scored, np.int64)
        s = np.asarray(s, np.int64)
        if self.stopping is None or self.stopping.fitted is None:
            # Fixed tau_low (or the burn-in of "bayes_optimal"): the paper's rule, with Beta(alpha0 + S, beta0 + F)
            # priors.
            hs, hf = self.history.counts(pids) if self.history is not None else (0.0, 0.0)
            tau = BURN_IN_TAU_LOW if self.stopping is not None else cfg.tau_low
            return paper_decide(n, n_scored, s, k=self.k, tau_low=tau, commit_min=self.m,
                                alpha0=cfg.prior_alpha + hs, beta0=cfg.prior_beta + hf)
        per_prompt = self.history is not None
        priors = self.prompt_priors(pids) if per_prompt else self.prior_now()
        return self.stopping.decide(priors, n, n_scored, s, per_prompt)

    def end_step(self, pids, n_scored, s, success, tokens, fit=None) -> None:
        """Feed the step's outcomes to the history, the prior fit and the token means; decay all three.

        Parameters
        ----------
        pids, n_scored, s
            ``(P,)`` per drawn prompt of the step (every fate), all recorded in the history.
        success, tokens
            ``(R,)`` per generated rollout of the prompts ``fit`` keeps (success NaN = unscorable).
        fit : (P,) bool, optional
            The prompts the prior fit takes (default all): streaming leaves out those with an aborted request.
        """
        pids = np.asarray(pids, np.int64)
        n_scored = np.asarray(n_scored, np.int64)
        s = np.asarray(s, np.int64)
        fit = np.ones(len(pids), bool) if fit is None else np.asarray(fit, bool)
        hs = hf = None
        if self.history is not None:
            hs, hf = self.prior.observe(pids, n_scored, s)
            hs, hf = hs[fit], hf[fit]
        if self.stopping is not None:
            self.stopping.feed(n_scored[fit], s[fit], success, tokens, hs, hf)

    # ------------------------------------------------------------------------------------------- reporting
    def diagnostics(self) -> dict:
        """Numbers worth logging each step (keys are stable; absent options report NaN)."""
        nan = float("nan")
        st, pr, sel = self.stopping, self.prior, self.selector
        w0, w1, a, b = self.prior_now().as_tuple()
        lam = None if st is None else st.lam
        out = {"prior_w0": w0, "prior_w1": w1, "prior_a": a, "prior_b": b,
               "lam": float(lam) if lam is not None else nan,
               "abandon_at_fail": nan, "abandon_at_pass": nan,
               "boundary_recomputes": float(0 if st is None else st.recomputes),
               "history_hit_rate": (pr.last_hits / pr.last_drawn) if pr is not None and pr.last_drawn else nan,
               "history_hit_rate_total": (pr.total_hits / pr.total_drawn) if pr is not None and pr.total_drawn
               else nan,
               "selection_pool": float(sel.last_pool), "selection_uniform_picks": float(sel.last_uniform_picks)}
        t_pass, t_fail = (1.0, 1.0) if st is None else st.token_costs()
        out["cost_pass"], out["cost_fail"] = t_pass, t_fail
        if lam is not None:
            sol = st.boundaries.get(self.k)
            if sol is None:
                sol = solve_values(self.prior_now(), self.k, self.m, self.config.n0, lam, t_pass, t_fail,
                                   loss_cap=self.config.auto_loss_cap)
            out["abandon_at_fail"], out["abandon_at_pass"] = (float(x) for x in sol.abandon_points())
        return out

    def state_dict(self) -> dict:
        st, pr, sel = self.stopping, self.prior, self.selector
        empty = np.zeros(0)
        return {
            "fitted": None if st is None or st.fitted is None else st.fitted.as_tuple(),
            "table": None if self.table is None else self.table.state_dict(),
            "buffer": None if st is None or st.buffer is None else st.buffer.state_dict(),
            "history": None if self.history is None else self.history.state_dict(),
            "rng": sel.rng.bit_generator.state,
            "tok_sum": np.zeros(2) if st is None else st.tok_sum.copy(),
            "tok_cnt": np.zeros(2) if st is None else st.tok_cnt.copy(),
            "pop_s": empty if st is None else st.pop_s.copy(), "pop_f": empty if st is None else st.pop_f.copy(),
            "counters": [0 if st is None else st.recomputes] + ([0] * 4 if pr is None else
                                                                 [pr.last_hits, pr.last_drawn, pr.total_hits,
                                                                  pr.total_drawn])
            + [sel.last_pool, sel.last_uniform_picks],
        }

    def load_state_dict(self, state: dict) -> None:
        st, pr, sel = self.stopping, self.prior, self.selector
        if state["table"] is not None and self.table is None:
            raise ValueError("checkpoint holds an outcome table but stopping_rule is not 'bayes_optimal'")
        if state.get("buffer") is not None and (st is None or st.buffer is None):
            raise ValueError("checkpoint holds a prior-fit buffer but stopping_rule is not 'bayes_optimal' with "
                             "history")
        if state["history"] is not None and pr is None:
            raise ValueError("checkpoint holds a prompt history but history_decay is None")
        counters = [int(x) for x in state["counters"]]
        if st is not None:
            st.fitted = None if state["fitted"] is None else MixturePrior(*state["fitted"])
            if state["table"] is not None:
                st.table.load_state_dict(state["table"])
            if state.get("buffer") is not None:
                st.buffer.load_state_dict(state["buffer"])
            st.tok_sum = np.asarray(state["tok_sum"], np.float64).copy()
            st.tok_cnt = np.asarray(state["tok_cnt"], np.float64).copy()
            st.pop_s = np.asarray(state["pop_s"], np.float64).copy()
            st.pop_f = np.asarray(state["pop_f"], np.float64).copy()
            st.recomputes = counters[0]
            st.key = None  # boundary is recomputed from the restored prior at the next step
            st.boundaries = {}
        if pr is not None:
            if state["history"] is not None:
                pr.history = PromptHistory(int(state["history"]["num_prompts"]), self.config.history_decay)
                pr.history.load_state_dict(state["history"])
            pr.last_hits, pr.last_drawn, pr.total_hits, pr.total_drawn = counters[1:5]
        sel.rng.bit_generator.state = state["rng"]
        sel.last_pool, sel.last_uniform_picks = counters[5:7]


def _moved(old: MixturePrior, new: MixturePrior) -> bool:
    w0, w1, a, b = old.as_tuple()
    v0, v1, c, d = new.as_tuple()
    return (max(abs(w0 - v0), abs(w1 - v1)) > _MOVE_W
            or max(abs(np.log(a / c)), abs(np.log(b / d))) > _MOVE_LOG)


def _key_moved(old: tuple, new: tuple) -> bool:
    return (old[:4] != new[:4] or max(abs(np.log(old[4] / new[4])), abs(np.log(old[5] / new[5]))) > _MOVE_TOK
            or old[6] != new[6])
