"""The allocator: one step's B groups through a registered strategy, with the cross-step state around it.

Each step runs one strategy (:data:`~sara_trl.allocation.strategies.STRATEGIES`: SARA, paper Alg. 1 with the
defaults of App. D; dynamic sampling; uniform) on a fresh :class:`~sara_trl.allocation.ledger.Ledger`; every round
is exactly ONE ``rollout_fn`` call. Between steps the allocator keeps the refill model, the cumulative totals, the
beyond-paper extensions and, with ``carry_over``, the prompts handed to the next step.
"""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.config import AllocationConfig
from sara_trl.allocation.extensions import Extensions, extensions_enabled
from sara_trl.allocation.ledger import CARRY_DTYPES, Ledger
from sara_trl.allocation.predictor import p_eff_unchecked
from sara_trl.allocation.rules import decide
from sara_trl.allocation.strategies import STRATEGIES, StepContext
from sara_trl.allocation.strategies.sara import ROUND_TO_DECISION
from sara_trl.allocation.stream import PromptStream
from sara_trl.allocation.streaming import StreamingCollector
from sara_trl.allocation.types import Fate, RolloutFn, StepResult

__all__ = ["Allocator"]


class Allocator:
    """Collects B groups per step with the strategy named by ``config.allocator``.

    The allocator is deterministic: given the same config, stream state, cross-step state and outcomes, every
    decision and every drawn prompt is identical, so several processes can run it in lock-step.

    Cross-step state (saved by :meth:`state_dict`): the refill model, decayed by ``yield_decay`` each step (per
    rollout count n, the share of still-unmixed prompts that went on to mix, :meth:`mix_rate`; and the rollouts a
    fresh prompt costs until resolved, :meth:`fresh_cost_estimate`), used to size refills so that a step needs few
    rounds; cumulative rollout/token totals; the beyond-paper extensions' state; and, with ``carry_over``, the
    prompts handed to the next step (their counts and rollout outcomes; the trainer keeps their completions, see
    ``StepResult.carry_rollout_ids``).

    Parameters
    ----------
    config : AllocationConfig, optional
        The settings; the paper's defaults when omitted.

    Attributes
    ----------
    total_rollouts, total_tokens : int
        Generated over all steps (carried rollouts counted once, when generated).
    steps : int
        Steps collected.
    """

    def __init__(self, config: AllocationConfig | None = None):
        self.config = cfg = config or AllocationConfig()
        k = cfg.k
        # Refill model: for an unmixed prompt with n rollouts, the share that went on to mix ("mix rate"; n = 0 is
        # a fresh prompt), and the rollouts a fresh prompt costs until it is resolved. Priors (weight one prompt):
        # the Beta-prior predictive p_eff(n, 0), and a probe plus a top-up to the commit floor for the p_eff(0, 0)
        # share that mixes.
        n = np.arange(k + 1)
        self._mix_prior = p_eff_unchecked(n, 0, k, cfg.prior_alpha, cfg.prior_beta)
        self._mix_num = np.zeros(k + 1)
        self._mix_den = np.zeros(k + 1)
        self._cost_prior = float(cfg.n0 + self._mix_prior[0] * (cfg.commit_floor - cfg.n0))
        self._cost_num = 0.0
        self._cost_den = 0.0
        # Rollout counts at which a still-unmixed prompt is observed: 0, n0, n0 + inc, ... (capped at k); every
        # count from n0 on when the increment runs to the next decision point (it varies per prompt).
        inc = 1 if cfg.round_increment == ROUND_TO_DECISION else cfg.round_increment
        self._checkpoints = np.unique(np.minimum(np.r_[0, np.arange(cfg.n0, k + inc, inc)], k))
        self.total_rollouts = 0
        self.total_tokens = 0
        self.steps = 0
        self._carry: dict | None = None  # carry_over: prompts handed from one step to the next (Ledger.seed)
        # Beyond-paper options (history, selection, tau_low="auto"); None keeps the paper's SARA untouched.
        self._ext = Extensions(cfg) if extensions_enabled(cfg) else None

    # ----------------------------------------------------------------------------------------------- refill model
    def mix_rate(self) -> np.ndarray:
        """Estimated share of unmixed prompts with n rollouts that go on to mix.

        Returns
        -------
        ndarray of float64, shape (k + 1,)
            Indexed by n (n = 0: a fresh prompt, i.e. the kept share for SARA and Phi for dynamic sampling),
            floored at 1/64.
        """
        est = (self._mix_num + self._mix_prior) / (self._mix_den + 1.0)
        return np.clip(est, 1.0 / 64, 1.0)

    def yield_estimate(self) -> float:
        """Estimated share of freshly drawn prompts that will be kept: ``mix_rate()[0]``."""
        return float(self.mix_rate()[0])

    def fresh_cost_estimate(self) -> float:
        """Estimated rollouts a fresh prompt costs until it is committed or abandoned (one pseudo-prompt of prior)."""
        return (self._cost_num + self._cost_prior) / (self._cost_den + 1.0)

    def _resolve(self, last_unmixed: np.ndarray, mixed: np.ndarray, cost: np.ndarray) -> None:
        """Feed the refill model with prompts whose fate became known this round.

        Parameters
        ----------
        last_unmixed : ndarray of int64, shape (P,)
            The largest rollout count at which each prompt was still unmixed.
        mixed : ndarray of bool, shape (P,)
            Whether it mixed (committed or certain to commit) or was abandoned.
        cost : ndarray, shape (P,)
            Rollouts it costs in all (a mixed prompt: topped up to the commit floor).
        """
        if len(mixed) == 0:
            return
        seen = self._checkpoints[:, None] <= last_unmixed[None, :]  # (checkpoints, P)
        self._mix_den[self._checkpoints] += seen.sum(axis=1)
        self._mix_num[self._checkpoints] += (seen & mixed[None, :]).sum(axis=1)
        self._cost_num += float(cost.sum())
        self._cost_den += len(cost)

    # ----------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The cross-step state, as plain Python values (lists, floats, ints)."""
        state = {"mix_num": self._mix_num.tolist(), "mix_den": self._mix_den.tolist(), "cost_num": self._cost_num,
                 "cost_den": self._cost_den, "total_rollouts": self.total_rollouts,
                 "total_tokens": self.total_tokens, "steps": self.steps}
        if self._ext is not None:
            state["extensions"] = self._ext.state_dict()
        if self._carry is not None:
            state["carry"] = {name: np.asarray(v).tolist() for name, v in self._carry.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises
        ------
        ValueError
            The state was saved for another group size k.
        """
        if len(state["mix_num"]) != self.config.k + 1:
            raise ValueError(f"allocator state was saved for k={len(state['mix_num']) - 1}, this allocator has "
                             f"k={self.config.k}")
        self._mix_num = np.asarray(state["mix_num"], dtype=np.float64)
        self._mix_den = np.asarray(state["mix_den"], dtype=np.float64)
        self._cost_num = float(state["cost_num"])
        self._cost_den = float(state["cost_den"])
        self.total_rollouts = int(state["total_rollouts"])
        self.total_tokens = int(state["total_tokens"])
        self.steps = int(state["steps"])
        if self._ext is not None and "extensions" in state:
            self._ext.load_state_dict(state["extensions"])
        carry = state.get("carry")
        if carry is not None and "status" in carry:  # saved before the carry held `committed` (status 1 = kept)
            carry = {**{k: v for k, v in carry.items() if k != "status"},
                     "committed": np.asarray(carry["status"]) == 1}
        self._carry = None if carry is None else {name: np.asarray(v, dtype=CARRY_DTYPES[name])
                                                  for name, v in carry.items()}

    @property
    def carried_prompts(self) -> int:
        """Prompts waiting to be carried into the next step (``carry_over``; 0 otherwise)."""
        return 0 if self._carry is None else len(self._carry["pid"])

    @property
    def carried_prompt_ids(self) -> np.ndarray:
        """Their prompt ids, ``(carried_prompts,)`` int64 (empty without ``carry_over``)."""
        return np.zeros(0, np.int64) if self._carry is None else np.asarray(self._carry["pid"], np.int64)

    @property
    def carried_rollouts(self) -> int:
        """Their rollouts, which take ids ``0 .. carried_rollouts - 1`` in the next step."""
        return 0 if self._carry is None else len(self._carry["r_slot"])

    def diagnostics(self) -> dict:
        """Beyond-paper metrics (fitted prior, boundary in use, cost per effective group, history hit rate, ...).

        Empty when every option is off. See :meth:`sara_trl.allocation.extensions.Extensions.diagnostics`.
        """
        return {} if self._ext is None else self._ext.diagnostics()

    # ----------------------------------------------------------------------------------------------- per round
    def _draw(self, stream: PromptStream, ledger: Ledger, count: int) -> np.ndarray:
        """Fresh prompts not yet in the step: the stream's next ``count``, or the predictive selector's pick."""
        in_step = ledger.prompt_ids()
        return stream.take(count, in_step) if self._ext is None else self._ext.take_fresh(stream, count, in_step)

    def _decide(self, pids, n, n_scored, s):
        """commit / abandon / continue and p_eff (Eq. 3), through the beyond-paper extensions when enabled."""
        cfg = self.config
        if self._ext is None:
            return decide(n, n_scored, s, k=cfg.k, tau_low=cfg.tau_low, commit_min=cfg.commit_floor,
                          alpha0=cfg.prior_alpha, beta0=cfg.prior_beta)
        return self._ext.decide(pids, n, n_scored, s)  # per-prompt history priors and/or the Bayes-optimal boundary

    def _decay_refill_model(self) -> None:
        for name in ("_mix_num", "_mix_den", "_cost_num", "_cost_den"):
            setattr(self, name, getattr(self, name) * self.config.yield_decay)

    def _account(self, result: StepResult) -> None:
        self.total_rollouts += result.stats.rollouts_generated
        self.total_tokens += result.stats.tokens_generated
        self.steps += 1

    # ----------------------------------------------------------------------------------------------- streaming
    def streaming(self, stream: PromptStream, B: int, max_in_flight: int) -> StreamingCollector:
        """A :class:`~sara_trl.allocation.streaming.StreamingCollector` for one step, bound to this allocator.

        It draws fresh prompts from ``stream``, sizes refills with this allocator's refill model (and feeds it),
        and on :meth:`StreamingCollector.finish` adds the step to the cumulative totals. With ``tau_low="auto"``
        the prior and its boundary are refitted here, from the outcomes of the steps before, and
        :meth:`StreamingCollector.finish` feeds the step's prompts to the fit, except those with an aborted request
        (:attr:`StreamingCollector.truncated`: their finished completions are a length-biased sample). Leaving them
        out errs towards mixed prompts, so towards abandoning less, never more.

        Parameters
        ----------
        stream : PromptStream
            Where fresh prompts come from.
        B : int
            Groups the batch needs.
        max_in_flight : int
            Concurrency cap of the engine (requests in flight), >= k.

        Raises
        ------
        ValueError
            ``config.collection`` is not ``"streaming"``, ``B < 1`` or ``max_in_flight < k``.
        """
        if self.config.collection != "streaming":
            raise ValueError(f"streaming() needs collection='streaming', this allocator has "
                             f"collection={self.config.collection!r}")
        if self._ext is not None:  # tau_low="auto": refit the prior (and boundary) on the outcomes so far
            self._ext.begin_step(stream)

        def on_finish(result: StepResult) -> None:
            # Prompts with an aborted request are left out of the prior fit: their recorded completions are the
            # first to finish, the short ones, which would tilt the fit towards successes where failures run longer.
            # With carry_over, a carried prompt is fed once, in the step that decides it (as with rounds).
            fed = ~collector.truncated
            if self.config.carry_over:
                fate = result.prompt_table["fate"]
                fed &= ~((fate == Fate.SURPLUS) | (fate == Fate.ACTIVE))
                self._carry = collector.carry
            self._feed_extensions(collector.ledger, fed)
            self._account(result)

        carry, self._carry = self._carry, None
        collector = StreamingCollector(self.config, B, stream.take, max_in_flight=max_in_flight,
                                       decide=self._decide, mix_rate=self.mix_rate,
                                       fresh_cost=self.fresh_cost_estimate, resolved=self._resolve,
                                       on_finish=on_finish, carry=carry)
        self._decay_refill_model()
        return collector

    def _feed_extensions(self, ledger: Ledger, fed: np.ndarray | None = None) -> None:
        """Feed the step's outcomes to the beyond-paper options (prior fit, history, token means): every prompt of
        ``ledger``, or those where ``fed`` ((size,) bool) is true, and their rollouts. A no-op when all are off."""
        if self._ext is None:
            return
        if fed is None:
            fed = np.ones(ledger.size, bool)
        rs, success, tokens = ledger.rollouts()
        self._ext.end_step(ledger.pid[: ledger.size][fed], ledger.nsc[: ledger.size][fed],
                           ledger.s[: ledger.size][fed], success[fed[rs]], tokens[fed[rs]])

    # ----------------------------------------------------------------------------------------------- collect
    def collect(self, rollout_fn: RolloutFn, stream: PromptStream, B: int) -> StepResult:
        """Assemble one step's batch of B groups.

        Parameters
        ----------
        rollout_fn : RolloutFn
            ``rollout_fn(prompt_ids (P,) int64, counts (P,) int64) -> RoundOutcome``, ONE batched generation
            call per round.
        stream : PromptStream
            Where fresh prompts come from.
        B : int
            Groups the trainer expects (effective groups for SARA and dynamic sampling).

        Returns
        -------
        StepResult
            Exactly B groups (fill groups flagged ``is_fill`` when the budget cap, the stream or ``max_rounds``
            ended the step short) and the step's accounting.

        Raises
        ------
        ValueError
            ``B < 1``, or ``rollout_fn`` returned malformed outcomes.
        """
        if not isinstance(B, (int, np.integer)) or B < 1:
            raise ValueError(f"B must be a positive integer number of groups, got {B!r}")
        if self.config.collection != "rounds":
            raise ValueError(f"collect() runs rounds; collection={self.config.collection!r} collects through "
                             "Allocator.streaming()")
        B = int(B)
        self._decay_refill_model()
        ledger = Ledger(rollout_fn)
        if self._carry is not None:
            ledger.seed(self._carry)
            self._carry = None
        if self._ext is not None:
            self._ext.begin_step(stream)
        ctx = StepContext(config=self.config, ledger=ledger, B=B, draw=lambda count: self._draw(stream, ledger, count),
                          decide=self._decide, mix_rate=self.mix_rate, fresh_cost=self.fresh_cost_estimate,
                          resolved=self._resolve)
        outcome = STRATEGIES[self.config.allocator](ctx)
        result, self._carry = ledger.finish(B, outcome.stop_reason, outcome.expected_lost,
                                            carry_over=self.config.carry_over)
        # Feed every prompt whose step is over; a carried prompt is fed once, in the step that decides it.
        fate = result.prompt_table["fate"]
        self._feed_extensions(ledger, ~((fate == Fate.SURPLUS) | (fate == Fate.ACTIVE)) if self.config.carry_over
                              else None)
        self._account(result)
        return result
