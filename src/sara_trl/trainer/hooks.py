"""The seam between SARA and a TRL trainer base: what a trainer class must provide, declared as two Protocols.

:class:`RoundTrainer` is what the batch engine and the scorer (:mod:`sara_trl.trainer.round_engine`,
:class:`~sara_trl.trainer.streaming.TrainerScorer`) use to run one generation round;
:class:`SaraTrainerBase` adds what :class:`sara_trl.trainer.mixin.SaraTrainerMixin` uses to replay the committed rows
through TRL and to keep TRL's metrics free of padding rows. Each member is marked *TRL* (a public member of the TRL
trainer base), *mixin* or *hook* (written in the SARA trainer file, e.g. :mod:`sara_trl.trainer.grpo`). TRL's private
members are not listed here: only the port (:mod:`sara_trl.trainer.trl`) names them, and
:func:`check_trainer_class` checks the port's list (``TRL_MEMBERS``) and the hooks at construction, so a TRL version
that renamed an internal fails with a message naming it instead of an ``AttributeError`` in the middle of a step.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import torch

from sara_trl.trainer.trl import port

__all__ = ["HOOKS", "RoundTrainer", "SaraTrainerBase", "check_trainer_class"]


class RoundTrainer(Protocol):
    """What one generation round needs from a trainer (the batch engine,
    :class:`~sara_trl.trainer.round_engine.GenerateEngine`, and the scorer).

    Attributes
    ----------
    accelerator : accelerate.Accelerator
        *TRL.* ``num_processes``, ``process_index``, ``device`` and ``gather``.
    args : SaraConfig or SaraRLOOConfig
        *TRL.* Reads ``success_reward_func``, ``success_threshold`` and ``ds_filter`` (absent: ``"success"``).
    reward_funcs : list
        *TRL.* The reward functions, F of them.
    reward_func_names : list of str
        *TRL.* Their names, ``(F,)``.
    reward_weights : torch.Tensor
        *TRL.* ``(F,)`` weights of the weighted reward sum.
    sara : sara_trl.trainer.state.SaraRun
        *Mixin.* SARA's run state (set in ``_sara_setup``): its ``success_rule`` turns scores into success labels and
        checks their scale on the first step (a stand-in trainer without ``sara`` labels at ``args.success_threshold``
        without the check); its ``rollout_func``, when set, is called by a round instead of TRL's tokenization and
        ``_sara_generate_round`` (:func:`sara_trl.trainer.rollout.call_rollout_func`).
    _sara_accepts_env_mask : bool
        *Hook* (optional class attribute, default False). Whether the base's loss masks a ``rollout_func``'s
        ``env_mask`` (GRPO: as its ``tool_mask``); without it an ``env_mask`` raises.
    tools
        *TRL* (optional; GRPO). Every tool: with a tool, each rollout runs TRL's tool loop, one rollout at a time
        through the port (:class:`sara_trl.trainer.trajectory.TrajectoryEngine`).
    environment_factories, environments
        *TRL* (optional; GRPO with ``environment_factory``). The factories by name and the instances the reward
        functions receive: each rollout leases and resets one from TRL's pool (:mod:`sara_trl.trainer.environment`).
    """

    accelerator: Any
    args: Any
    reward_funcs: list
    reward_func_names: list[str]
    reward_weights: torch.Tensor
    sara: Any

    def _sara_row(self, prompt_id: int) -> dict:
        """*Mixin.* Dataset row ``prompt_id`` as a dict (it has a ``"prompt"`` key and the reward columns)."""
        ...

    def _sara_generate_round(
        self, prompt_ids: list[list[int]], images: Any, multimodal_fields: dict
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """*Hook.* ONE batched generation call through the base's backend, one completion per entry.

        Wraps the base's ``_generate_single_turn`` (vLLM colocate or server, transformers ``generate`` or continuous
        batching) with one generation per entry: SARA's request list is already expanded prompt-major.

        Parameters
        ----------
        prompt_ids : list of list of int
            ``(R,)`` prompt token ids, a prompt repeated once per requested rollout.
        images, multimodal_fields
            As returned by :meth:`_tokenize_prompts`.

        Returns
        -------
        completion_ids : list of list of int
            ``(R,)`` completion token ids.
        logprobs : list of list of float or None
            ``(R,)`` lists of the sampled tokens' log-probs (one per completion token) when the backend returns them
            (vLLM under GRPO), else None.
        """
        ...

    def _sara_decode(self, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list:
        """*Hook.* Decode completions exactly as the base's ``_generate`` does: what reward functions receive.

        Parameters
        ----------
        prompts : list
            ``(R,)`` prompts.
        prompt_ids, completion_ids : list of list of int
            ``(R,)`` token ids.

        Returns
        -------
        list
            ``(R,)`` completions: strings, or ``[{"role": "assistant", "content": ...}]`` for conversational prompts.
        """
        ...



class SaraTrainerBase(RoundTrainer, Protocol):
    """Everything a SARA trainer class needs from its TRL base and from its own file.

    :class:`~sara_trl.trainer.mixin.SaraTrainerMixin` drives TRL through these members and the port
    (:mod:`sara_trl.trainer.trl`), whose ``TrlHooks`` override TRL's generation batch (collect, then replay), its
    generation and reward hooks (answer the replay from the cache), its forward pass (record the replay's log-probs),
    its loss (padding-free metrics) and its checkpoint methods.

    Checklist for a third TRL trainer base ``XTrainer`` (one new file, ``sara_trl/trainer/x.py``, plus what the port
    must say about ``XTrainer``):

    1. ``@dataclass class SaraXConfig(<allocation arguments of sara_trl.trainer.config>, XConfig)``, as
       :class:`~sara_trl.trainer.config.SaraRLOOConfig` is built from ``RLOOConfig``.
    2. ``class SaraXTrainer(SaraTrainerMixin, XTrainer)`` (mixin first) with ``_name``, ``_tag_names`` and
       ``_paper = sara_paper(port.trl_paper(XTrainer))``.
    3. ``__init__``: ``args, plan = self._sara_prepare(model, args, SaraXConfig, train_dataset, processing_class,
       unsupported, reward_funcs=reward_funcs)`` before ``super().__init__``, and
       ``self._sara_setup(plan, rollout_func)`` after it.
    4. The hooks: ``_sara_returns_logprobs``, ``_sara_generate_round``, ``_sara_decode``, ``_sara_row_metrics`` and
       ``_sara_fix_replay_metrics``, documented below.
    5. Check that ``XTrainer`` has every member of the port's ``TRL_MEMBERS`` with the same meaning
       (:func:`check_trainer_class` checks that they exist) and calls the replay's hooks (the replay guard checks
       that at every step), that it builds groups as ``view(-1, num_generations)`` over contiguous rows, and that
       a NaN reward row leaves the group statistics and gets a zero advantage.
    6. A test like ``tests/test_trainer_padding.py`` for the new class (hand-computed advantages, loss and metrics).

    Attributes
    ----------
    _sara_returns_logprobs : bool
        *Hook* (class attribute). Whether the base's ``_generate_single_turn`` returns ``(ids, logprobs)`` (GRPO)
        rather than ``ids`` alone (RLOO); the replay answers in the same form.
    num_generations : int
        *TRL.* Group size k.
    eos_token_ids : list of int
        *TRL.* Tokens that end a completion (a completion not ending in one of them or pad is truncated).
    state : transformers.TrainerState
        *TRL.* ``global_step`` and ``num_input_tokens_seen``.
    """

    _sara_returns_logprobs: ClassVar[bool]
    num_generations: int
    eos_token_ids: list[int]
    state: Any

    def _sara_row_metrics(self) -> tuple[str, ...]:
        """*Hook.* Names of the TRL metrics that ``_compute_loss`` averages over rows (sequences) without the
        completion mask, under the current settings.

        A padding row is in those averages; :func:`sara_trl.trainer.metric_repair.correct_loss_metrics` removes it
        (every name must be a key of :data:`sara_trl.trainer.metric_repair.ROW_METRIC_PADDING`). TRL: every
        ``clip_ratio/*`` of RLOO (one ratio per sequence); GRPO's ``clip_ratio/*`` with
        ``importance_sampling_level="sequence"`` and ``vespo/phi_seq_mean``. Token-level metrics are masked by TRL
        itself and are not listed.

        Returns
        -------
        tuple of str
            Metric names, possibly empty.
        """
        ...

    def _sara_fix_replay_metrics(self, output: dict, is_padding_local: torch.Tensor, replay_logps: list) -> None:
        """*Hook.* Recompute, over real rows only, the metrics the base logged during the replay from every row (the
        implementations live with the other metric corrections, in :mod:`sara_trl.trainer.metric_repair`).

        Called on every process after padding rows were masked out of ``output`` (its ``completion_mask`` is zero
        on them), only for a batch that holds padding rows. Replaces the last value of each such metric in TRL's
        train metrics (the port's ``metrics(trainer)``) by the value over real tokens (NaN when there is none):
        RLOO's ``kl`` (computed before any mask, in ``_generate_and_score_completions``); GRPO's ``sampling/*`` vLLM
        importance-sampling metrics.

        Parameters
        ----------
        output : dict
            TRL's batch dict for this process's ``(N, T)`` rows, padding rows already masked.
        is_padding_local : torch.Tensor
            ``(N,)`` bool, this process's padding rows.
        replay_logps : list of torch.Tensor
            The ``(N, T)`` per-token log-probs of every ``_get_per_token_logps_and_entropies`` call the replay made,
            in call order (RLOO: the policy's, then the reference model's when ``beta != 0``).
        """
        ...


HOOKS = ("_sara_returns_logprobs", "_sara_generate_round", "_sara_decode", "_sara_row_metrics",
         "_sara_fix_replay_metrics")


def check_trainer_class(cls: type) -> None:
    """Check that a SARA trainer class has every member of :class:`SaraTrainerBase` that lives on the class.

    Parameters
    ----------
    cls : type
        The SARA trainer class (e.g. ``SaraGRPOTrainer``).

    Raises
    ------
    TypeError
        A *TRL* member is missing (an incompatible TRL version) or a *hook* was not written in the SARA trainer's
        file; the message names each missing member.
    """
    missing_trl = [name for name in port.TRL_MEMBERS if not callable(getattr(cls, name, None))]
    missing_hooks = [name for name in HOOKS if getattr(cls, name, None) is None]
    if missing_trl:
        raise TypeError(
            f"{cls.__name__}: its TRL base lacks {missing_trl}, which SARA drives (the port for TRL "
            f"{port.TRL_LINE}, installed {port.TRL_VERSION}). Install a supported TRL, or adapt the port module "
            "(docs/trl-port.md)."
        )
    if missing_hooks:
        raise TypeError(
            f"{cls.__name__} does not define the SARA hooks {missing_hooks}; see "
            "sara_trl.trainer.hooks.SaraTrainerBase for what each must do."
        )
