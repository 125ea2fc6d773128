"""Rounds on the core's event loop: the batch engine, whose one step is one round (the plan's ``engine="generate"``).

The allocator's :class:`~sara_trl.allocation.rounds.RoundCollector` submits a round's rollouts as requests, prompt-major
(paper Alg. 1); :func:`~sara_trl.allocation.event_loop.drive_streaming_engine` adds them to a :class:`RoundEngine` and
steps it once; the scorer (:class:`~sara_trl.trainer.streaming.TrainerScorer`) runs ONE reward pass over the round and
the strategy decides. The same loop, collector and scorer run overlapped rounds and streaming on the request engine.

- :class:`GenerateEngine` is one process's engine: its step is ONE call of the trainer's TRL generation path over every
  queued request (``_sara_generate_round``: vLLM colocate or server, transformers; or the user's ``rollout_func``).
  With ``tools`` or ``environment_factory`` it runs inside a :class:`~sara_trl.trainer.trajectory.TrajectoryEngine`
  (the one multi-turn path): each further step generates the post-tool turns of every rollout still calling tools,
  in one call, as TRL's own tool loop does.
- :class:`RoundEngine` makes a round lock-step over the processes (:mod:`sara_trl.trainer.distributed`): every process
  holds the same request list, pads it to a multiple of the world size W and generates its own contiguous share
  (:func:`~sara_trl.trainer.distributed.split_round`); a failure on any process is raised on all at one exchange; one
  ``gather_object`` then gives every process every completion, in request order (so the round's rollouts take the
  prompt-major ids). The reward pass is the scorer's: each process scores its share (padding copies included) and
  TRL's ``_calculate_rewards`` gathers the rows.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
from accelerate.utils import gather_object

from sara_trl.allocation.event_loop import Finished
from sara_trl.trainer.distributed import raise_if_any_failed, split_round
from sara_trl.trainer.rollout import call_rollout_func
from sara_trl.trainer.trajectory import ChainRecord
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["GenerateEngine", "RoundEngine"]


class GenerateEngine:
    """One process's batch engine: :meth:`step` is ONE call of the trainer's TRL generation path over every request
    queued since the last step.

    A request starts from its dataset row (:meth:`add_prompt`: the round's prompts are tokenized together, as TRL's
    ``_tokenize_prompts``, or handed to the user's ``rollout_func``) or from token ids (:meth:`add`: a post-tool turn
    queued by :class:`~sara_trl.trainer.trajectory.TrajectoryEngine`, which also truncates it to what is left of
    ``max_completion_length``, as TRL's tool loop truncates its regenerations).

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (``_sara_row``, ``_sara_generate_round``, ``_sara_decode``; ``sara.rollout_func``).
    """

    needs_prompt_id = True  # the event loop calls add_prompt(rid, prompt_id)

    def __init__(self, trainer: SaraTrainerBase):
        self._trainer = trainer
        self._rollout_func = trainer.sara.rollout_func
        self._queue: list[tuple[int, int | None, list[int] | None]] = []  # (rid, prompt_id, token ids)

    @property
    def pending(self) -> int:
        """Requests queued and not yet generated."""
        return len(self._queue)

    def add_prompt(self, rid: int, prompt_id: int) -> None:
        """Queue one rollout of dataset prompt ``prompt_id``."""
        self._queue.append((rid, int(prompt_id), None))

    def add(self, rid: int, prompt_ids: list[int], max_tokens: int | None = None) -> None:
        """Queue one completion of token ids ``prompt_ids`` (a post-tool turn); ``max_tokens`` is not applied here:
        the caller truncates, as TRL's tool loop does.

        Raises
        ------
        ValueError
            With a ``rollout_func``, which generates whole rollouts from prompts only.
        """
        if self._rollout_func is not None:
            raise ValueError("a rollout_func generates whole rollouts from their prompts; it takes no token ids")
        self._queue.append((rid, None, list(prompt_ids)))

    def abort(self, rids: list[int]) -> list[int]:
        """Drop queued requests (nothing runs between steps, so nothing was generated: 0 tokens each)."""
        drop = set(rids)
        self._queue = [item for item in self._queue if item[0] not in drop]
        return [0] * len(rids)

    def step(self) -> list[Finished]:
        """ONE generation call over the queue; every queued request finishes, in queue order. A request queued by
        :meth:`add_prompt` carries a :class:`~sara_trl.trainer.trajectory.ChainRecord` with the prompt and the
        completion as the reward functions receive them (decoded as the base's ``_generate`` decodes it) and, with a
        ``rollout_func``, its :class:`~sara_trl.trainer.rollout.Trajectory` (prompt ids, ``env_mask``, extra fields).

        Raises
        ------
        ValueError
            A ``rollout_func`` broke its contract (:func:`~sara_trl.trainer.rollout.call_rollout_func`).
        Exception
            Whatever generation raises.
        """
        queue, self._queue = self._queue, []
        if not queue:
            return []
        trainer = self._trainer
        from_rows = queue[0][1] is not None
        if any((pid is not None) != from_rows for _, pid, _ in queue):
            raise ValueError("one step generates either rollouts from prompts or turns from token ids, not both")
        if not from_rows:
            completion_ids, logprobs = trainer._sara_generate_round([ids for _, _, ids in queue], None, {})
            logprobs = logprobs or [None] * len(queue)
            return [Finished(rid, list(ids), None if lps is None else list(lps))
                    for (rid, _, _), ids, lps in zip(queue, completion_ids, logprobs)]
        prompts = [trainer._sara_row(pid)["prompt"] for _, pid, _ in queue]
        trajectories = [None] * len(queue)
        if self._rollout_func is not None:
            prompt_ids, completion_ids, logprobs, trajectories = call_rollout_func(trainer, prompts)
        else:
            prompt_ids, images, fields = port.tokenize_prompts(trainer, prompts)
            completion_ids, logprobs = trainer._sara_generate_round(prompt_ids, images, fields)
        completion_ids = [list(ids) for ids in completion_ids]
        completions = trainer._sara_decode(prompts, prompt_ids, completion_ids)
        logprobs = logprobs or [None] * len(queue)
        return [Finished(rid, ids, None if lps is None else list(lps), ChainRecord(trajectory, prompt, completion))
                for (rid, _, _), ids, lps, trajectory, prompt, completion
                in zip(queue, completion_ids, logprobs, trajectories, prompts, completions)]


class RoundEngine:
    """The lock-step round: a :class:`~sara_trl.allocation.event_loop.StreamingEngine` whose one :meth:`step`
    generates every queued request (a whole round) on its process's engine, across the processes.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (its ``accelerator``).
    inner : object
        This process's engine: :class:`GenerateEngine`, or a :class:`~sara_trl.trainer.trajectory.TrajectoryEngine`
        over one (``add_prompt``, ``step``, ``pending``; a trajectory engine's ``env_resets`` and ``release``).

    Attributes
    ----------
    rounds : int
        Rounds generated (steps).
    local : list of (int, Finished)
        This process's share of the last round, padding copies included (``per_rank`` entries): each request's
        dataset prompt and what this process's engine finished for it (its record holds the prompt, completion
        and environment instance the reward functions receive). The scorer's rows in lock-step.
    per_rank : int
        Rows each process generated and scores in the last round, ``ceil(round size / W)``.
    env_resets : int
        ``environment_factory``: ``reset`` calls of every process (padding copies included), as TRL counts them.
    """

    needs_prompt_id = True  # the event loop calls add_prompt(rid, prompt_id)

    def __init__(self, trainer: SaraTrainerBase, inner: Any):
        self._trainer, self._inner = trainer, inner
        self._queue: list[tuple[int, int]] = []  # the round: (request id, prompt id), in request order
        self._next = 0  # the inner engine's next request id
        self.rounds = 0
        self.local: list[tuple[int, Finished]] = []
        self.per_rank = 0
        self.env_resets = 0

    @property
    def pending(self) -> int:
        """Requests of the round not yet generated."""
        return len(self._queue)

    def add_prompt(self, rid: int, prompt_id: int) -> None:
        """Queue one rollout of dataset prompt ``prompt_id`` for the next round."""
        self._queue.append((rid, int(prompt_id)))

    def abort(self, rids: list[int]) -> list[int]:
        """Rounds never abort; after an error the event loop drops what is queued (nothing was generated: 0 tokens)."""
        drop = set(rids)
        self._queue = [item for item in self._queue if item[0] not in drop]
        return [0] * len(rids)

    def step(self) -> list[Finished]:
        """Generate the round: this process's share on its engine, until every request of it has finished (several
        inner steps with tools), then one exchange of errors and one gather of the completions.

        Returns
        -------
        list of Finished
            Every request of the round, in request order, with every process's completion ids, log-probs and
            record (without its environment instance, which stays on its process).

        Raises
        ------
        Exception
            Generation's own error on the failing process; ``RuntimeError`` naming it on the others.
        """
        queue, self._queue = self._queue, []
        trainer, inner = self._trainer, self._inner
        accelerator = trainer.accelerator
        world = accelerator.num_processes
        self.rounds += 1
        self._release()  # the last round's reward pass is over: its environments go back to the pool
        local_prompts, per_rank = split_round(np.asarray([pid for _, pid in queue], np.int64), world,
                                              accelerator.process_index)
        error, local = None, []
        try:
            resets = getattr(inner, "env_resets", 0)
            first = self._next
            for pid in local_prompts.tolist():
                inner.add_prompt(self._next, pid)
                self._next += 1
            finished = {}
            while inner.pending:
                finished.update((done.rid, done) for done in inner.step())
            local = [(pid, finished[first + j]) for j, pid in enumerate(local_prompts.tolist())]
            self.env_resets += (getattr(inner, "env_resets", 0) - resets) * world
        except Exception as exc:  # a failure on one process must fail the round everywhere, not hang the others
            if world == 1:
                raise
            error = exc
        raise_if_any_failed(accelerator, error, f"SARA round {self.rounds} (generation)")
        self.local, self.per_rank = local, per_rank
        shared = [(done.completion_ids, done.logprobs, _portable(done.record)) for _, done in local]
        if world > 1:
            shared = gather_object(shared)
        return [Finished(rid, ids, lps, record) for (rid, _), (ids, lps, record) in zip(queue, shared)]

    def _release(self) -> None:
        """Hand the last round's environment instances back to the pool (a trajectory engine's ``release``)."""
        release = getattr(self._inner, "release", None)
        if release is not None:
            for _, done in self.local:
                release(done.rid)
        self.local = []

    def close(self) -> None:
        """End of the step: every environment instance back in the pool."""
        self._release()
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


def _portable(record: ChainRecord | None) -> ChainRecord | None:
    """A record as it travels to the other processes: without the environment instance (it stays on its process)."""
    return None if record is None else dataclasses.replace(record, environment=None)
