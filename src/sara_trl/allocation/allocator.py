"""The allocator: one step's B groups through a registered strategy, with the cross-step state around it.

Each step runs one strategy (:data:`~sara_trl.allocation.strategies.STRATEGIES`: SARA, paper Alg. 1 with the
defaults of App. D; dynamic sampling; uniform) on a fresh :class:`~sara_trl.allocation.ledger.Ledger`; every round
is exactly ONE ``rollout_fn`` call (:meth:`Allocator.collect`) or one batch of engine requests
(:meth:`Allocator.rounds`); :meth:`Allocator.streaming` runs the streaming schedule instead. Between steps the
allocator keeps the refill model, the cumulative totals, the beyond-paper extensions and, with ``carry_over``, the
prompts handed to the next step.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from sara_trl.allocation.beyond_paper import Extensions, extensions_enabled
from sara_trl.allocation.config import AllocationConfig
from sara_trl.allocation.ledger import CARRY_DTYPES, Ledger
from sara_trl.allocation.prompt_stream import PromptStream
from sara_trl.allocation.refill import RefillModel, config_rule
from sara_trl.allocation.rounds import RoundCollector, run_rounds
from sara_trl.allocation.strategies import STRATEGIES, StepContext
from sara_trl.allocation.streaming import StreamingCollector
from sara_trl.allocation.types import Fate, RolloutFn, RoundRequest, StepResult, StepStats

__all__ = ["Allocator", "plain_json"]


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
    refill : RefillModel
        The refill model (:mod:`sara_trl.allocation.refill`), shared by both collection schedules.
    total_rollouts, total_tokens : int
        Generated over all steps (carried rollouts counted once, when generated).
    steps : int
        Steps collected.
    """

    def __init__(self, config: AllocationConfig | None = None):
        self.config = cfg = config or AllocationConfig()
        self.refill = RefillModel(cfg)  # what refills are sized with (sara_trl.allocation.refill)
        self.total_rollouts = 0
        self.total_tokens = 0
        self.steps = 0
        self._carry: dict | None = None  # carry_over: prompts handed from one step to the next (Ledger.seed)
        # Beyond-paper options (history, selection, stopping_rule="bayes_optimal"); None keeps the paper's SARA
        # untouched.
        self._ext = Extensions(cfg) if extensions_enabled(cfg) else None

    # ----------------------------------------------------------------------------------------------- refill model
    def mix_rate(self) -> np.ndarray:
        """Estimated share of unmixed prompts with n rollouts that go on to mix (:meth:`RefillModel.mix_rate`).

        Returns
        -------
        ndarray of float64, shape (k + 1,)
            Indexed by n (n = 0: a fresh prompt, i.e. the kept share for SARA and Phi for dynamic sampling),
            floored at 1/64.
        """
        return self.refill.mix_rate()

    def yield_estimate(self) -> float:
        """Estimated share of freshly drawn prompts that will be kept: ``mix_rate()[0]``."""
        return float(self.mix_rate()[0])

    def fresh_cost_estimate(self) -> float:
        """Estimated rollouts a fresh prompt costs until it is committed or abandoned (one pseudo-prompt of prior)."""
        return self.refill.fresh_cost()

    # ----------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The cross-step state, as plain Python values (dicts, lists, floats, ints, str, None): what
        ``json.dump`` writes (the trainer's ``sara_state.json``)."""
        state = {**self.refill.state_dict(), "total_rollouts": self.total_rollouts,
                 "total_tokens": self.total_tokens, "steps": self.steps}
        if self._ext is not None:
            state["extensions"] = self._ext.state_dict()
        if self._carry is not None:
            state["carry"] = self._carry
        return plain_json(state)

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises
        ------
        ValueError
            The state was saved for another group size k.
        """
        self.refill.load_state_dict(state)
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

        Empty when every option is off. See :meth:`sara_trl.allocation.beyond_paper.Extensions.diagnostics`.
        """
        return {} if self._ext is None else self._ext.diagnostics()

    # ----------------------------------------------------------------------------------------------- per round
    def _drawer(self, stream: PromptStream):
        """``draw(count, avoid) -> (<= count,) int64``: fresh prompts not in ``avoid`` (the step's prompt ids), the
        stream's next ``count`` or, with ``selection``, the predictive selector's pick. Both schedules draw with it."""
        if self._ext is None:
            return stream.take
        return lambda count, avoid: self._ext.take_fresh(stream, count, avoid)

    @property
    def _decide(self):
        """commit / abandon / continue and p_eff (Eq. 3), through the beyond-paper extensions when enabled
        (per-prompt history priors and/or the Bayes-optimal boundary)."""
        return config_rule(self.config) if self._ext is None else self._ext.decide

    def _account(self, result: StepResult) -> None:
        self.total_rollouts += result.stats.rollouts_generated
        self.total_tokens += result.stats.tokens_generated
        self.steps += 1

    def account_merged(self, local: StepStats, merged: StepStats) -> None:
        """A step collected in shares (streaming on several processes, each with its own allocator): count the other
        shares' rollouts and tokens in the cumulative totals too, so that they are the whole run's on every process.

        Parameters
        ----------
        local : StepStats
            This allocator's share, already counted when its collector finished.
        merged : StepStats
            The merged step (:func:`~sara_trl.allocation.merge_step_results`), every share's.
        """
        self.total_rollouts += merged.rollouts_generated - local.rollouts_generated
        self.total_tokens += merged.tokens_generated - local.tokens_generated

    # ----------------------------------------------------------------------------------------------- streaming
    def streaming(self, stream: PromptStream, B: int, max_in_flight: int) -> StreamingCollector:
        """A :class:`~sara_trl.allocation.streaming.StreamingCollector` for one step, bound to this allocator.

        It draws fresh prompts from ``stream`` (through the predictive selector with ``selection``, as rounds do),
        sizes refills with this allocator's refill model (and feeds it), and on :meth:`StreamingCollector.finish`
        adds the step to the cumulative totals. With ``stopping_rule="bayes_optimal"``
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
        if self._ext is not None:  # stopping_rule="bayes_optimal": refit the prior (and boundary) on the outcomes
            self._ext.begin_step(stream)

        def on_finish(result: StepResult) -> None:
            # Prompts with an aborted request are left out of the prior fit: their recorded completions are the
            # first to finish, the short ones, which would tilt the fit towards successes where failures run longer.
            # The per-prompt history still records them (what finished is that prompt's only evidence; without it
            # the selector would draw an abandoned prompt again as if unseen). With carry_over, a carried prompt is
            # fed once, in the step that decides it (as with rounds).
            fed = np.ones(collector.ledger.size, bool)
            if self.config.carry_over:
                fate = result.prompt_table["fate"]
                fed &= ~((fate == Fate.SURPLUS) | (fate == Fate.ACTIVE))
                self._carry = collector.carry
            self._feed_extensions(collector.ledger, fed, fit=fed & ~collector.truncated)
            self._account(result)

        carry, self._carry = self._carry, None
        collector = StreamingCollector(self.config, B, self._drawer(stream), max_in_flight=max_in_flight,
                                       decide=self._decide, mix_rate=self.mix_rate,
                                       fresh_cost=self.fresh_cost_estimate, resolved=self.refill.resolve,
                                       on_finish=on_finish, carry=carry,
                                       speculate=self.config.streaming_speculate)
        self.refill.decay()
        return collector

    def _feed_extensions(self, ledger: Ledger, fed: np.ndarray | None = None, fit: np.ndarray | None = None) -> None:
        """Feed the step's outcomes to the beyond-paper options: every prompt of ``ledger``, or those where ``fed``
        ((size,) bool) is true, to the history; of those, the ones where ``fit`` ((size,) bool, default ``fed``) is
        true, and their rollouts, to the prior fit and the token means. A no-op when all options are off."""
        if self._ext is None:
            return
        if fed is None:
            fed = np.ones(ledger.size, bool)
        fit = fed if fit is None else fit & fed
        rs, success, tokens = ledger.rollouts()
        self._ext.end_step(ledger.pid[: ledger.size][fed], ledger.nsc[: ledger.size][fed],
                           ledger.s[: ledger.size][fed], success[fit[rs]], tokens[fit[rs]], fit=fit[fed])

    # ----------------------------------------------------------------------------------------------- rounds
    def collect(self, rollout_fn: RolloutFn, stream: PromptStream, B: int) -> StepResult:
        """Assemble one step's batch of B groups, each round ONE ``rollout_fn`` call.

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
            ``B < 1``, ``config.collection`` is not ``"rounds"``, or ``rollout_fn`` returned malformed outcomes.
        """
        return run_rounds(self.round_steps(stream, B), rollout_fn)

    def rounds(self, stream: PromptStream, B: int, threshold: float = 0.5) -> RoundCollector:
        """The same step as :meth:`collect`, as a collector the event loop drives
        (:func:`~sara_trl.allocation.event_loop.drive_streaming_engine`): each round's rollouts are requests on a
        continuous-batching engine, scored as they finish, and the strategy decides once the whole round is in.
        As :meth:`streaming`, the step starts here: the carry is taken and the refill model decayed now.

        Parameters
        ----------
        stream : PromptStream
            Where fresh prompts come from.
        B : int
            Groups the batch needs.
        threshold : float
            ``success_threshold``: with ``ds_filter="score"``, what labels a group whose scores do not spread (as
            :func:`~sara_trl.allocation.labels.allocator_labels` labels a round).

        Raises
        ------
        ValueError
            ``B < 1`` or ``config.collection`` is not ``"rounds"``.
        """
        return RoundCollector(self.round_steps(stream, B), B, relabel_by_score=self.config.ds_filter == "score",
                              threshold=threshold)

    def round_steps(self, stream: PromptStream, B: int) -> Generator[RoundRequest, object, StepResult]:
        """One step of rounds as a generator: yields each round's :class:`RoundRequest`, is sent its outcomes
        (:class:`RoundOutcome`), and returns the :class:`StepResult`. :meth:`collect` and :meth:`rounds` drive it.
        The step starts when this is called (the carry is taken, the refill model decayed, the beyond-paper prior
        refitted); the generator runs the strategy.

        Raises
        ------
        ValueError
            ``B < 1`` or ``config.collection`` is not ``"rounds"``.
        """
        if not isinstance(B, (int, np.integer)) or isinstance(B, bool) or B < 1:
            raise ValueError(f"B must be a positive integer number of groups, got {B!r}")
        if self.config.collection != "rounds":
            raise ValueError(f"collect() runs rounds; collection={self.config.collection!r} collects through "
                             "Allocator.streaming()")
        B = int(B)
        self.refill.decay()
        ledger = Ledger()
        if self._carry is not None:
            ledger.seed(self._carry)
            self._carry = None
        if self._ext is not None:
            self._ext.begin_step(stream)
        draw = self._drawer(stream)
        ctx = StepContext(config=self.config, ledger=ledger, B=B, draw=lambda count: draw(count, ledger.prompt_ids()),
                          decide=self._decide, mix_rate=self.mix_rate, fresh_cost=self.fresh_cost_estimate,
                          resolved=self.refill.resolve)
        return self._run_strategy(ctx)

    def _run_strategy(self, ctx: StepContext) -> Generator[RoundRequest, object, StepResult]:
        outcome = yield from STRATEGIES[self.config.allocator](ctx)
        ledger = ctx.ledger
        result, self._carry = ledger.finish(ctx.B, outcome.stop_reason, outcome.expected_lost,
                                            carry_over=self.config.carry_over)
        # Feed every prompt whose step is over; a carried prompt is fed once, in the step that decides it.
        fate = result.prompt_table["fate"]
        self._feed_extensions(ledger, ~((fate == Fate.SURPLUS) | (fate == Fate.ACTIVE)) if self.config.carry_over
                              else None)
        self._account(result)
        return result


def plain_json(value):
    """``value`` with every numpy array and scalar (and tuple) turned into plain Python lists and numbers, so that
    ``json.dump`` writes it and ``json.load`` gives back the same values."""
    if isinstance(value, dict):
        return {key: plain_json(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
