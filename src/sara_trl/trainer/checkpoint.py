"""SARA's state in a checkpoint: the allocator and prompt stream (``sara_state.json``), written and restored.

Beside TRL's own files: ``sara_state.json`` (allocator, stream, allocation config; with streaming collection on
several processes every process's own allocator and stream shard under ``"ranks"``), ``sara_carry.pt`` (with
``carry_over``: the completions of the prompts carried into the next step; with streaming on several processes each
process carries its own, in ``sara_carry_rank<R>.pt``, written by that process as TRL writes ``rng_state_<R>.pth``)
and ``sara_stream_rows.pt`` (with an iterable ``train_dataset``: the rows its prompt stream holds, any Python
values).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from sara_trl.allocation import IterablePromptStream, ShardStream
from sara_trl.trainer.rollout import RolloutCache
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["SARA_CARRY_NAME", "SARA_ROWS_NAME", "SARA_STATE_NAME", "carry_file_name", "load_sara_state", "rank_states",
           "save_sara_state", "sara_state_dict"]

SARA_STATE_NAME = "sara_state.json"
SARA_CARRY_NAME = "sara_carry.pt"  # carry_over: completions of the prompts carried into the next step
SARA_ROWS_NAME = "sara_stream_rows.pt"  # iterable train set: the rows its prompt stream holds (buffer, carried)


def carry_file_name(rank: int | None) -> str:
    """The file of a checkpoint that holds carried completions: ``sara_carry_rank<R>.pt`` for process ``rank`` with
    streaming on several processes (each carries its own prompts); ``sara_carry.pt`` for ``rank=None`` (one process,
    or rounds, where every process carries the same prompts)."""
    return SARA_CARRY_NAME if rank is None else f"sara_carry_rank{int(rank)}.pt"


def _sharded(trainer: SaraTrainerBase) -> bool:
    """Whether each process runs its own allocator on its own prompt shard (streaming on several processes)."""
    stream = trainer.sara.stream
    return isinstance(stream, ShardStream) or (isinstance(stream, IterablePromptStream) and stream.world > 1)


def _stream_states(state: dict) -> list[dict]:
    """The prompt-stream states in a ``sara_state.json`` dict: the main one, then each process's (``"ranks"``)."""
    return [state["stream"], *(entry["stream"] for entry in state.get("ranks") or [])]


def _pop_stream_rows(state: dict) -> list | None:
    """Take the held rows out of an iterable stream's states (they go to ``sara_stream_rows.pt``, in the order of
    :func:`_stream_states`); None for a map-style stream, which holds none."""
    streams = _stream_states(state)
    if streams[0].get("kind") != "iterable":
        return None
    return [stream.pop("rows") for stream in streams]


def sara_state_dict(trainer: SaraTrainerBase, ranks: list[dict] | None = None) -> dict:
    """The allocator, stream and allocation config as JSON-ready data (written to ``sara_state.json``).

    ``ranks``: with streaming collection on several processes, every process's own allocator and stream shard
    (:func:`rank_states`), saved under ``"ranks"`` in process order.
    """
    state = {
        "version": 1,
        "allocator": trainer.sara.allocator.state_dict(),
        "stream": trainer.sara.stream.state_dict(),
        "allocation_config": trainer.sara.allocator.config.__dict__,
    }
    if ranks is not None:
        state["ranks"] = ranks
    return state


def rank_states(trainer: SaraTrainerBase) -> list[dict] | None:
    """Streaming collection on several processes: every process's allocator and stream shard (they differ per
    process), gathered on every process (a collective: call it on all of them). None otherwise."""
    if not _sharded(trainer):
        return None
    from accelerate.utils import gather_object

    return gather_object([{"allocator": trainer.sara.allocator.state_dict(),
                           "stream": trainer.sara.stream.state_dict()}])


def save_sara_state(trainer: SaraTrainerBase, trial: Any) -> None:
    """Write ``sara_state.json`` (and ``sara_carry.pt`` / ``sara_stream_rows.pt`` when needed) into the checkpoint
    folder TRL is about to save (call it on every process, before TRL's own save, so that a ``push_to_hub`` of the
    checkpoint includes it). With streaming on several processes every process writes its own carry
    (``sara_carry_rank<R>.pt``, :func:`carry_file_name`); otherwise the saving process writes the one carry."""
    ranks = rank_states(trainer)  # every process takes part
    folder = port.checkpoint_folder(trainer, trial)
    sharded = _sharded(trainer)
    if sharded and trainer.sara.carry is not None:  # this process's own carried completions
        os.makedirs(folder, exist_ok=True)
        torch.save(trainer.sara.carry.state(),
                   os.path.join(folder, carry_file_name(trainer.accelerator.process_index)))
    if not trainer.args.should_save:
        return
    os.makedirs(folder, exist_ok=True)
    state = sara_state_dict(trainer, ranks)
    rows = _pop_stream_rows(state)
    with open(os.path.join(folder, SARA_STATE_NAME), "w") as handle:
        json.dump(state, handle, indent=2)
    if rows is not None:
        torch.save(rows, os.path.join(folder, SARA_ROWS_NAME))
    if trainer.sara.carry is not None and not sharded:  # the carried prompts' completions, for the next step
        torch.save(trainer.sara.carry.state(), os.path.join(folder, carry_file_name(None)))


@contextmanager
def optimizer_state_onto_cpu(trainer: SaraTrainerBase) -> Iterator[None]:
    """While the block runs, a ``torch.load`` asked for ``map_location="cpu:<N>"`` loads onto ``"cpu"``, on CPU
    training with several processes only (elsewhere the block runs unchanged).

    Why: transformers 5.17's ``Trainer._load_optimizer_and_scheduler`` loads the optimizer state with
    ``map_location=args.device`` when ``world_size > 1``; on CPU processes that is ``cpu:0``, which torch cannot
    restore to (``RuntimeError: don't know how to restore data location``), so resuming a CPU run on several
    processes failed before SARA's state was read. The CPU has one memory, so ``"cpu"`` loads the same tensors.
    """
    device = getattr(trainer.args, "device", None)
    if getattr(device, "type", None) != "cpu" or trainer.args.world_size <= 1:
        yield
        return
    original = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        if str(kwargs.get("map_location", "")).startswith("cpu:"):
            kwargs["map_location"] = "cpu"
        return original(*args, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


def load_sara_state(trainer: SaraTrainerBase, checkpoint: str | None) -> None:
    """Restore the allocator and stream state :func:`save_sara_state` wrote into ``checkpoint`` (None: nothing).

    A checkpoint without ``sara_state.json`` (e.g. from a plain TRL run) starts a fresh stream, with a warning.

    Raises
    ------
    FileNotFoundError
        The state carries undecided prompts into the next step but their carry file (``sara_carry.pt``; with
        streaming on several processes this process's ``sara_carry_rank<R>.pt``) is missing, or was saved from an
        iterable dataset without its ``sara_stream_rows.pt``.
    ValueError
        The state was saved with another process count or collection mode than streaming needs to resume.
    """
    if checkpoint is None:
        return
    path = os.path.join(checkpoint, SARA_STATE_NAME)
    if not os.path.isfile(path):
        warnings.warn(
            f"{checkpoint} has no {SARA_STATE_NAME}; the SARA prompt stream and allocator restart from scratch.",
            stacklevel=3,  # the caller of the trainer's _load_optimizer_and_scheduler
        )
        return
    with open(path) as handle:
        state = json.load(handle)
    if _stream_states(state)[0].get("kind") == "iterable":
        rows_path = os.path.join(checkpoint, SARA_ROWS_NAME)
        if not os.path.isfile(rows_path):
            raise FileNotFoundError(f"{path} was saved from an iterable dataset but {rows_path} with the rows its "
                                    "prompt stream held is missing; restore the whole checkpoint folder.")
        for stream_state, rows in zip(_stream_states(state), torch.load(rows_path, weights_only=False)):
            stream_state["rows"] = rows
    world, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    sharded = _sharded(trainer)
    if sharded:  # streaming on several processes: this process's own state
        ranks = state.get("ranks")
        if ranks is None or len(ranks) != world:
            raise ValueError(
                f"{path} holds no per-process state for {world} processes (saved with "
                f"{'one process or rounds' if ranks is None else f'{len(ranks)} processes'}); streaming "
                "collection on several processes resumes only with the process count it was saved with."
            )
        state = {**state, **ranks[rank]}
    elif "ranks" in state:
        raise ValueError(f"{path} was saved by streaming collection on {len(state['ranks'])} processes; resume it "
                         f"with collection='streaming' on {len(state['ranks'])} processes.")
    trainer.sara.allocator.load_state_dict(state["allocator"])
    trainer.sara.stream.load_state_dict(state["stream"])
    trainer.sara.carry = None
    if trainer.sara.allocator.carried_rollouts:
        carry_path = os.path.join(checkpoint, carry_file_name(rank if sharded else None))
        if not os.path.isfile(carry_path):
            raise FileNotFoundError(
                f"{path} carries {trainer.sara.allocator.carried_prompts} undecided prompts into the next step "
                f"(carry_over) but {carry_path} with their completions is missing; restore the whole checkpoint "
                "folder."
            )
        trainer.sara.carry = RolloutCache.from_state(torch.load(carry_path, weights_only=False))
