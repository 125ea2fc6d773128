"""`SaraTrainerMixin`: SARA's *collect, then replay* inside a TRL trainer, each part delegating to a module.

TRL's private methods that SARA answers are overridden in the port (:class:`sara_trl.trainer.trl.v1_16.TrlHooks`, a
base of this mixin); they call back into the ``_sara_*`` methods here. SARA's run state is one object,
``trainer.sara`` (:class:`~sara_trl.trainer.state.SaraRun`).

Which module does what: :mod:`~sara_trl.trainer.prepare` (checks before and set-up after TRL's construction),
:mod:`~sara_trl.trainer.collect` (step 1), :mod:`~sara_trl.trainer.replay` (steps 2 and 3),
:mod:`~sara_trl.trainer.metric_repair` (step 4 and every correction of TRL's metrics),
:mod:`~sara_trl.trainer.checkpoint` (SARA's state in a checkpoint), :mod:`~sara_trl.trainer.vllm_cpu` (the vLLM
engine on a CPU).

How one generation batch is built:

1. **Collect** (:mod:`~sara_trl.trainer.collect`). The allocator's collector (rounds, paper Alg. 1, or streaming)
   runs on the core's event loop over SARA's own prompt stream, on the engine the run's plan chose: the batch engine
   (:mod:`~sara_trl.trainer.round_engine`: each round ONE call of TRL's own ``_tokenize_prompts`` and
   ``_generate_single_turn`` over every requested rollout, ``num_generations=1``, or of the user's ``rollout_func``),
   or the colocated vLLM engine request by request. With ``tools=`` or ``environment_factory`` each rollout is a
   chain of turns (:mod:`~sara_trl.trainer.trajectory`: its environment instance reset with its row, TRL's own tool
   loop run one rollout at a time, every turn still to generate in the next engine step). Each reward pass is ONE
   call of TRL's ``_calculate_rewards`` (:class:`~sara_trl.trainer.streaming.TrainerScorer`). Success labels come from
   the rewards (threshold on the weighted sum, or one named function). The result is exactly B groups: committed
   ones first, then fill groups.
2. **Lay out.** Each group becomes k contiguous rows (TRL defines groups by contiguity, ``view(-1, k)``): its
   rollouts, then padding rows up to k (short groups when ``commit_min < k``; all k rows for a fill group). Padding
   rows carry the group's prompt, a completion of :data:`PADDING_COMPLETION_TOKENS` EOS tokens and an all-NaN reward
   row.
3. **Replay.** The *unchanged* ``super()._generate_and_score_completions(rows)`` runs on those B*k rows with two
   hooks answering from the cache: ``_generate_single_turn`` returns the cached completion ids (and vLLM sampling
   log-probs, so importance sampling sees the real sampling distribution), ``_tool_call_loop`` (``tools=``) returns the
   cached trajectories (every turn's ids, ``tool_mask``, log-probs, messages, tool call counts), ``_calculate_rewards``
   returns the cached reward rows, and with ``environment_factory`` TRL's pool holds stand-ins whose ``reset`` returns
   the cached observations (no environment is reset again). Reward functions are therefore called exactly once per
   generated rollout. Everything else (padding, old/ref log-probs, IS ratios, advantages, metrics, completion logs,
   output keys) is TRL's own code.
4. **Mask.** Padding rows get ``completion_mask = 0`` (and RLOO's ``old_logps = 0``); ``num_items_in_batch`` is
   recomputed over the real tokens (a collective, done on every process). Their NaN rewards already kept them out
   of the group mean/std (GRPO) and the leave-one-out baseline (RLOO), and gave them a zero advantage.

Loss exactness with padding rows (rows = B*k per generation batch, real = non-padding rows):

- ``dapo`` (TRL's default), ``cispo``, ``vespo``: exact (normalized by ``num_items_in_batch``, recomputed).
- ``bnpo``: exact (token mean over the micro-batch mask).
- ``dr_grpo``: unchanged constant normalizer ``rows x max_completion_length``; padding rows add zero, which is
  Dr. GRPO's own definition with a fixed batch size.
- ``grpo``, ``sapo``, ``luspo`` and RLOO (mean over sequences): padding rows count in the denominator, so the
  loss is scaled by real/rows of the micro-batch. The direction of the update is unchanged; only its size shrinks
  when groups are short or the step ended with fill groups.

Metrics: TRL's ``reward``, ``reward_std``, ``rewards/*`` and the completions table only see the *committed* rows (for
SARA and dynamic sampling these are mostly mixed groups, so the mean reward is biased towards 0.5); SARA logs
``sara/raw_success_rate`` over every generated rollout and the full rollout/token accounting as ``sara/*``
(:mod:`sara_trl.trainer.metrics`). Every TRL metric computed per row or per token excludes padding rows, and is NaN
(logged as NaN, never None: every logged metric is a number) when no real row is left: the completion-length metrics and
``num_tokens`` (:func:`~sara_trl.trainer.metric_repair.correct_padding_metrics`), the loss-time ``kl``, ``entropy`` and
clip ratios (:func:`~sara_trl.trainer.metric_repair.correct_loss_metrics`), and the replay-time metrics each trainer
recomputes in its ``_sara_fix_replay_metrics`` hook (RLOO's ``kl``, GRPO's vLLM ``sampling/*``, both in
:mod:`~sara_trl.trainer.metric_repair`). ``frac_reward_zero_std`` counts fill
groups as zero-std groups.

Steps and data: prompts come from SARA's stream (seeded, identical on every process, wrapping at epoch end), not
from the dataloader; the dataloader's batches only count steps. Set ``max_steps``. A ``datasets.IterableDataset`` is
read in order by :class:`~sara_trl.allocation.IterablePromptStream` through a bounded buffer (shuffle, epochs,
processes and resume: :mod:`sara_trl.trainer.iterable`), and TRL's dataloader then iterates a placeholder.

The members this mixin needs from the TRL base and from the trainer file are declared in
:class:`sara_trl.trainer.hooks.SaraTrainerBase`.
"""

from __future__ import annotations

from typing import Any

from datasets import IterableDataset

from sara_trl.allocation import IterablePromptStream
from sara_trl.trainer.checkpoint import SARA_STATE_NAME, load_sara_state, optimizer_state_onto_cpu, save_sara_state
from sara_trl.trainer.collect import collect_step, request_engine
from sara_trl.trainer.iterable import step_counter_dataset
from sara_trl.trainer.metric_repair import (
    log_sampling_difference_by_origin,
    loss_with_real_row_metrics,
    mask_padding_rows,
    numeric_logs,
)
from sara_trl.trainer.metrics import log_collected_step
from sara_trl.trainer.plan import CollectionPlan
from sara_trl.trainer.prepare import prepare_arguments, setup
from sara_trl.trainer.replay import (
    PADDING_COMPLETION_TOKENS,
    PADDING_KEY,
    active_replay,
    build_row_plan,
    lay_out,
    replaying,
)
from sara_trl.trainer.state import SaraRun
from sara_trl.trainer.trl import port
from sara_trl.trainer.vllm_cpu import engine_context

__all__ = ["PADDING_COMPLETION_TOKENS", "PADDING_KEY", "SARA_STATE_NAME", "SaraTrainerMixin", "build_row_plan"]


class SaraTrainerMixin(port.TrlHooks):
    """Shared SARA logic for :class:`SaraGRPOTrainer` and :class:`SaraRLOOTrainer` (put it first in the bases).

    A subclass implements the hooks of :class:`sara_trl.trainer.hooks.SaraTrainerBase` (``_sara_returns_logprobs``,
    ``_sara_generate_round``, ``_sara_decode``, ``_sara_row_metrics``, ``_sara_fix_replay_metrics``); the class
    docstring there has the checklist for a new TRL trainer base.

    Attributes
    ----------
    sara : SaraRun
        SARA's run state (allocator, prompt stream, success rule, carry, last step, replay), set after TRL's
        construction; None before.
    sara_allocator, sara_stream, sara_last_step
        Read-only views of ``sara.allocator``, ``sara.stream`` and ``sara.last_step`` (the allocation core; the
        prompt stream; the latest step's result with per-prompt records, None before the first step).
    """

    sara: SaraRun | None = None

    @property
    def sara_allocator(self):
        return self.sara.allocator

    @property
    def sara_stream(self):
        return self.sara.stream

    @property
    def sara_last_step(self):
        return self.sara.last_step

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def _sara_prepare(
        cls, model: Any, args: Any, config_class: type, train_dataset: Any, processing_class: Any, unsupported: dict,
        rounds_only: dict | None = None, reward_funcs: Any = None,
    ) -> tuple[Any, CollectionPlan]:
        """Before TRL's construction: validate, return the args to use and the collection plan
        (:func:`sara_trl.trainer.prepare.prepare_arguments`, which documents the errors)."""
        return prepare_arguments(cls, model, args, config_class, train_dataset, processing_class, unsupported,
                                 rounds_only, reward_funcs)

    @staticmethod
    def _sara_engine_context(args):
        """Context wrapped around TRL's construction (:func:`sara_trl.trainer.vllm_cpu.engine_context`): the CPU-only
        adjustments of a colocated vLLM engine, a no-op elsewhere."""
        return engine_context(args)

    def _sara_setup(self, plan: CollectionPlan, rollout_func: Any = None) -> None:
        """After TRL's construction: SARA's run state ``self.sara`` (:func:`sara_trl.trainer.prepare.setup`) with the
        ``plan`` :meth:`_sara_prepare` returned; a round calls ``rollout_func`` (the user's, or None)."""
        self.sara = setup(self, plan, rollout_func)

    def _sara_request_engine(self, tag: str):
        """The engine a streaming step (or rounds with ``overlap_round_scoring``) adds its requests to: TRL's
        colocated vLLM engine, one request per turn (:func:`sara_trl.trainer.collect.request_engine`)."""
        return request_engine(self, tag)

    # ------------------------------------------------------------------------------------------ data access
    def _sara_row(self, prompt_id: int) -> dict:
        """Dataset row ``prompt_id`` as a dict (cached for the current step); of an iterable dataset, the row its
        prompt stream holds (``prompt_id`` is the row's position in a pass)."""
        rows = self.sara.rows
        row = rows.get(prompt_id)
        if row is None:
            if isinstance(self.sara.stream, IterablePromptStream):
                row = dict(self.sara.stream.row(int(prompt_id)))
            else:
                row = dict(self.train_dataset[int(prompt_id)])
            rows[prompt_id] = row
        return row

    def get_train_dataloader(self):
        """TRL's dataloader; with an iterable ``train_dataset``, over an endless placeholder
        (:func:`~sara_trl.trainer.iterable.step_counter_dataset`: its batches only count steps), so the data are read
        by SARA's stream alone and a resumed run does not re-read them to skip the dataloader's batches."""
        dataset = self.train_dataset
        if not isinstance(dataset, IterableDataset):
            return super().get_train_dataloader()
        self.train_dataset = step_counter_dataset()
        try:
            return super().get_train_dataloader()
        finally:
            self.train_dataset = dataset

    # ------------------------------------------------------------------------------------------ one generation batch
    def _sara_generation_batch(self, trl_pipeline):
        """One training generation batch: collect with the allocator, then replay the committed rows through TRL's
        unchanged pipeline (see the module doc). The dataloader's batch is not used: prompts come from SARA's stream.

        Parameters
        ----------
        trl_pipeline : callable
            TRL's own ``_generate_and_score_completions`` (rows -> batch dict), handed in by the port.

        Returns
        -------
        dict
            TRL's batch dict for this process's rows (padding rows masked, :data:`PADDING_KEY` added when there are
            padding rows).

        Raises
        ------
        RuntimeError
            TRL did not take the replay's cached answers exactly once each (the replay guard of
            :func:`~sara_trl.trainer.replay.replaying`).
        """
        run = self.sara
        run.rows = {}
        step = collect_step(self)  # 1. collect B groups (rounds or streaming)
        layout = lay_out(self, step.result, step.cache)  # 2. lay out B*k rows; this process takes its share
        with replaying(self, layout.replay):  # 3. replay through TRL's unchanged pipeline, answered from the cache
            output = trl_pipeline(layout.rows)
        if isinstance(run.stream, IterablePromptStream):  # the step's rows are done with, but the carried ones
            run.stream.release(keep=run.allocator.carried_prompt_ids)
        if layout.is_padding.any():  # 4. mask padding rows, repair what TRL logged over them (every process)
            mask_padding_rows(self, output, layout, step.cache, step.result.stats)
        log_sampling_difference_by_origin(self, output, layout, step.cache)  # carry_over on vLLM: policy lag apart
        log_collected_step(self, step)
        return output

    def _sara_replayed_rollout_func(self, prompts, trainer):
        """Stands in for the user's ``rollout_func`` on TRL's side (``self.rollout_func``): during the replay it
        returns what the user's function returned for these rows (from the cache); otherwise (evaluation) it calls
        the user's function."""
        replay = active_replay(self)
        if replay is None:
            return self.sara.rollout_func(prompts, trainer)
        return replay.rollout_output(prompts)

    # ------------------------------------------------------------------------------------------ metrics
    def log(self, logs: dict, start_time: float | None = None) -> None:
        """TRL's ``log``, with every metric a number: one with no valid value in the window is logged as NaN, where
        TRL logs None (e.g. ``reward`` when no group was committed), so callbacks can do arithmetic on any value."""
        mode = "train" if self.model.training else "eval"
        numeric_logs(port.metrics(self, mode), logs, prefix="eval_" if mode == "eval" else "")
        super().log(logs, start_time)

    def _sara_loss(self, inputs, trl_loss):
        """TRL's loss (``trl_loss(batch)``), unchanged; for a micro-batch of a generation batch with padding rows
        (marked by :data:`PADDING_KEY`, removed before TRL sees the batch) the per-token and per-row metrics it
        appended are made to exclude them (:func:`sara_trl.trainer.metric_repair.loss_with_real_row_metrics`)."""
        padding = inputs.get(PADDING_KEY) if isinstance(inputs, dict) else None
        if padding is None:
            return trl_loss(inputs)
        inputs = {key: value for key, value in inputs.items() if key != PADDING_KEY}
        return loss_with_real_row_metrics(self, trl_loss, inputs, padding)

    # ------------------------------------------------------------------------------------------ checkpoints
    def _sara_save_state(self, trial) -> None:
        """Write SARA's state (``sara_state.json``, :func:`sara_trl.trainer.checkpoint.save_sara_state`) into the
        checkpoint folder TRL is about to save."""
        save_sara_state(self, trial)

    def _sara_load_state(self, checkpoint, trl_load) -> None:
        """TRL's restore of optimizer and scheduler (``trl_load(checkpoint)``), then SARA's state
        (:func:`sara_trl.trainer.checkpoint.load_sara_state`, which documents the errors; a checkpoint without
        ``sara_state.json`` starts a fresh stream, with a warning). On several CPU processes the optimizer state
        loads onto ``"cpu"`` (:func:`~sara_trl.trainer.checkpoint.optimizer_state_onto_cpu`)."""
        with optimizer_state_onto_cpu(self):
            trl_load(checkpoint)
        load_sara_state(self, checkpoint)
