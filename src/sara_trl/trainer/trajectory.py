"""Multi-turn rollouts (``tools=``, ``environment_factory``): one request chain per rollout, the one multi-turn path
of every schedule.

Each rollout is a chain of engine requests, and the collector sees only the whole trajectory.
:class:`TrajectoryEngine` is a :class:`~sara_trl.allocation.event_loop.StreamingEngine` over a turn-level engine
(streaming: the colocated vLLM engine, :class:`~sara_trl.trainer.streaming.VLLMStreamingEngine`; rounds: the batch
engine, :class:`~sara_trl.trainer.round_engine.GenerateEngine`, whose step generates every queued turn in one TRL
generation call, as TRL's batch tool loop regenerates every rollout still calling tools) that does, per rollout,
what TRL's ``GRPOTrainer`` does per batch:

1. **Start** (``add_prompt``): with ``environment_factory``, lease an instance of the row's environment from TRL's
   pool (the port's ``environment_pool``; the pool grows by one factory call when every instance is leased), call
   ``reset(**row)`` and append the observation to the prompt (as TRL's ``_generate_and_score_completions``); then
   TRL's ``_tokenize_prompts`` renders the prompt with the rollout's tool schema, and the first turn is one request.
2. **A turn ends**: the first turn is decoded as TRL's ``_generate`` decodes it (``parse_response``). If the last
   turn called tools and fewer than ``max_tool_calling_iterations`` tool turns have run, TRL's own
   ``_tool_call_loop`` runs the calls (its tool execution, error messages, tool-response suffix ids and its overlong
   rule, with a rollback of an over-long tool response): its regeneration call is intercepted, and the ids it would
   generate from (prompt + completion + tool suffix) become the next request, limited to what is left of
   ``max_completion_length``. The post-tool turn is merged as TRL's loop merges it: ``tool_mask`` 0 over the tool
   suffix, log-prob 0.0 there, ``parse_response`` with the prompt-and-trajectory prefix.
3. **The trajectory ends** (no tool call, the iteration limit, or an over-long tool response): the engine reports one
   :class:`~sara_trl.allocation.event_loop.Finished` for the rollout, with every turn's ids and log-probs and a
   :class:`ChainRecord` (the :class:`~sara_trl.trainer.rollout.Trajectory` the cache keeps, the prompt the reward
   functions receive, the environment instance they receive).
4. **Abort** (the collector gave the rollout up): the request in flight is aborted; the trajectory's tokens so far
   (model turns and tool output) and its tool calls are surplus, its remaining turns never run, and its environment
   instance goes back to the pool at once.

An environment instance is leased from its reset until its rollout's reward pass is over (the reward functions read
it, e.g. ``get_reward``): :meth:`TrajectoryEngine.release` returns it to the pool, and :meth:`TrajectoryEngine.close`
returns every instance still leased when the step ends. Instances are reused (reset again), as TRL reuses them from
batch to batch; none is created beyond the most rollouts in flight at once.

Everything a chain generated is accounted for: a trajectory the collector records goes to the rollout cache whole;
one aborted, or finished but given up before its reward pass, adds its model tokens, tool tokens and tool calls to
:attr:`TrajectoryEngine.uncached` (surplus), so the tool accounting's invariant holds
(:func:`sara_trl.trainer.metrics.tool_accounting`).

Not here: prefix-shared (tree) rollouts, which would break the independence of a group's rollouts that SARA's Beta
posterior assumes; every chain is its own sequence of requests from the prompt.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sara_trl.allocation.event_loop import Finished
from sara_trl.trainer.environment import (
    append_observation,
    check_environment_names,
    environment_methods,
    environment_name,
    uses_environments,
)
from sara_trl.trainer.metrics import TOOL_UNITS
from sara_trl.trainer.rollout import Trajectory, uses_tools
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["ChainRecord", "TrajectoryEngine", "streams_trajectories"]


def streams_trajectories(trainer: SaraTrainerBase) -> bool:
    """Whether each rollout runs as a request chain (``tools=`` or ``environment_factory``)."""
    return uses_tools(trainer) or uses_environments(trainer)



class _CountingTools(dict):
    """One rollout's synchronous tool dict for TRL's loop, counting its tool calls and failures as TRL counts them.

    TRL's ``_tool_call_loop`` counts every call of type ``function`` and tests ``name in`` this dict exactly once
    for each; a call fails when its tool raises or its name is in neither dict (TRL's "Tool ... not found").
    """

    def __init__(self, counter: _ToolCallCounter, index: int, tools: dict, async_names: set):
        super().__init__(tools)
        self._counter, self._index, self._async_names = counter, index, async_names

    def __contains__(self, name) -> bool:
        found = super().__contains__(name)
        self._counter.calls[self._index] += 1
        if not found and name not in self._async_names:
            self._counter.failures[self._index] += 1
        return found


class _ToolCallCounter:
    """Per-rollout tool dicts for one round of TRL's tool loop, with the tool calls and failures of each rollout
    (TRL's loop returns only the batch's totals; SARA replays subsets of the rollouts)."""

    def __init__(self, tools: list[list[Callable]]):
        self.n, self.tools = len(tools), [list(t) for t in tools]
        self.calls, self.failures = [0] * self.n, [0] * self.n

    def _counted(self, tool: Callable, index: int) -> Callable:
        failures = self.failures
        if inspect.iscoroutinefunction(tool):
            async def call_async(**kwargs):
                try:
                    return await tool(**kwargs)
                except Exception:
                    failures[index] += 1
                    raise

            return call_async

        def call(**kwargs):
            try:
                return tool(**kwargs)
            except Exception:
                failures[index] += 1
                raise

        return call

    def tool_dicts(self) -> tuple[list[dict], list[dict]]:
        """``(sync, async)``: one ``{name: tool}`` dict per rollout each, as TRL's ``_sync_tool_dicts`` /
        ``_async_tool_dicts`` (built as ``_generate_and_score_completions`` builds them: each rollout's standalone
        tools, then its environment's methods)."""
        sync_dicts, async_dicts = [], []
        for i, tools in enumerate(self.tools):
            async_names = {tool.__name__ for tool in tools if inspect.iscoroutinefunction(tool)}
            sync = {tool.__name__: self._counted(tool, i) for tool in tools if not inspect.iscoroutinefunction(tool)}
            async_dicts.append({tool.__name__: self._counted(tool, i) for tool in tools
                                if inspect.iscoroutinefunction(tool)})
            sync_dicts.append(_CountingTools(self, i, sync, async_names))
        return sync_dicts, async_dicts


@dataclass
class ChainRecord:
    """What a finished rollout hands the scorer besides its ids and log-probs (a chain's, or a round's on the batch
    engine, :class:`~sara_trl.trainer.round_engine.GenerateEngine`).

    Attributes
    ----------
    trajectory : Trajectory or None
        What the rollout cache keeps beyond the completion: a chain's prompt ids, ``tool_mask`` as ``env_mask``,
        first-turn ids, messages, tool call and failure counts and the environment's observation; a ``rollout_func``'s
        prompt ids, ``env_mask`` and extra fields; None for a plain completion.
    prompt : list
        The prompt the rollout was generated from (the observation appended), what the reward functions receive.
    completion : list
        The completion as the reward functions receive it: the assistant turns and tool messages (TRL's tool loop),
        or the one decoded turn without ``tools``.
    environment : object or None
        The rollout's environment instance (leased until :meth:`TrajectoryEngine.release`), None without
        ``environment_factory``.
    """

    trajectory: Trajectory | None
    prompt: list
    completion: list
    environment: Any = None


@dataclass
class _Chain:
    """One rollout in flight: its prompt, the turns so far, the request generating the current turn."""

    prompt_id: int
    prompt: list  # TRL's loop appends each assistant turn that called tools and the tool messages to it
    prompt_ids: list[int]
    environment: Any
    observation: Any
    counter: _ToolCallCounter
    tools: list
    environment_name: Any = None  # the row's environment (a dict environment_factory's key; None: TRL's single one)
    request: int = -1  # the inner engine's request id of the turn in flight
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list | None = None
    tool_mask: list[int] = field(default_factory=list)
    messages: list = field(default_factory=list)
    turn_ids: list[int] | None = None
    iterations: int = 0  # tool turns run
    context_ids: list[int] | None = None  # prompt + completion + tool suffix of the post-tool turn in flight

    def units(self, partial: int = 0) -> dict[str, int]:
        """Model tokens, tool tokens and tool calls so far (``partial`` model tokens of an aborted turn)."""
        suffix = 0 if self.context_ids is None else (
            len(self.context_ids) - len(self.prompt_ids) - len(self.completion_ids))
        tool = len(self.tool_mask) - sum(self.tool_mask) + suffix
        return {"model_tokens": sum(self.tool_mask) + partial, "tool_tokens": tool,
                "tool_calls": self.counter.calls[0]}


class TrajectoryEngine:
    """A :class:`~sara_trl.allocation.event_loop.StreamingEngine` whose requests are whole multi-turn rollouts.

    Parameters
    ----------
    trainer : SaraGRPOTrainer
        The trainer (``tools`` and/or ``environment_factory``; GRPO: TRL's ``_tool_call_loop``).
    inner : object
        The request-level engine: ``add(rid, prompt_ids, max_tokens=None)``, ``step()``, ``abort(rids)``,
        ``pending`` (:class:`~sara_trl.trainer.streaming.VLLMStreamingEngine`, or a scripted stand-in).

    Attributes
    ----------
    env_resets : int
        ``reset`` calls (one per rollout started).
    uncached : dict of str to int
        ``model_tokens``, ``tool_tokens``, ``tool_calls`` of the rollouts that will not reach the rollout cache:
        aborted ones, and finished ones :meth:`forget` was told of (surplus all).
    """

    def __init__(self, trainer: SaraTrainerBase, inner: Any):
        self._trainer, self._inner = trainer, inner
        self._chains: dict[int, _Chain] = {}  # rollouts in flight, by the collector's request id
        self._rollout_of: dict[int, int] = {}  # inner request id -> rollout
        self._next_request = 0
        self._finished: dict[int, _Chain] = {}  # finished, not yet kept, forgotten or released
        self._rendered: dict[int, list[int]] = {}  # prompt -> its ids (without environments: no observation)
        self._environments = uses_environments(trainer)
        self._tools = uses_tools(trainer)  # TRL runs its tool loop only when there are tools
        self.env_resets = 0
        self.uncached = dict.fromkeys(TOOL_UNITS, 0)

    needs_prompt_id = True  # the event loop calls add_prompt(rid, prompt_id): a chain starts from the dataset row

    @property
    def pending(self) -> int:
        """Rollouts started and neither finished nor aborted."""
        return len(self._chains)

    # ---------------------------------------------------------------------------------------------- start
    def add(self, rid: int, prompt_ids: list[int]) -> None:
        """Not used: a chain starts from its dataset row (:meth:`add_prompt`).

        Raises
        ------
        TypeError
            Always.
        """
        raise TypeError("TrajectoryEngine starts a rollout from its dataset row: call add_prompt(rid, prompt_id)")

    def add_prompt(self, rid: int, prompt_id: int) -> None:
        """Start rollout ``rid`` of dataset prompt ``prompt_id``: lease and reset its environment (if any), render
        the prompt with its tools, and queue the first turn.

        Raises
        ------
        ValueError
            ``rid`` is in flight, or the row names an environment ``environment_factory`` does not have.
        """
        if rid in self._chains or rid in self._finished:
            raise ValueError(f"rollout {rid} is already in the engine")
        trainer = self._trainer
        row = trainer._sara_row(int(prompt_id))
        prompt, environment, observation = copy.deepcopy(row["prompt"]), None, None
        name = None
        if self._environments:
            name = environment_name(trainer, row)
            check_environment_names(trainer, [name])
            environment = self._lease(rid, name)
            kwargs = {k: v for k, v in row.items() if k != "environment"} if port.multi_environment(trainer) else row
            observation = environment.reset(**kwargs)
            self.env_resets += 1
            prompt = append_observation(prompt, observation)
            port.set_batch_environments(trainer, [name])  # TRL's tokenization renders the rollout's tool schema
        if environment is None and prompt_id in self._rendered:  # tools only: every rollout of a prompt alike
            prompt_ids = self._rendered[prompt_id]
        else:
            prompt_ids = list(port.tokenize_prompts(trainer, [prompt])[0][0])
            if environment is None:
                self._rendered[prompt_id] = prompt_ids
        tools = port.standalone_tools(trainer) + ([] if environment is None else environment_methods(environment))
        schema = port.env_tools(trainer, name) if self._environments else trainer.tools
        chain = _Chain(int(prompt_id), prompt, list(prompt_ids), environment, observation,
                       _ToolCallCounter([tools]), schema, name)
        self._chains[rid] = chain
        self._submit(rid, chain, chain.prompt_ids, None)

    def _lease(self, rid: int, name: Any) -> Any:
        """An instance of environment ``name`` that no rollout holds (the pool grows by one when none is free)."""
        trainer = self._trainer
        pool = port.environment_pool(trainer, name)
        held = {id(chain.environment) for chain in (*self._chains.values(), *self._finished.values())}
        free = next((env for env in pool if id(env) not in held), None)
        if free is None:
            free = trainer.environment_factories[name]()
            pool.append(free)
        return free

    def _submit(self, rid: int, chain: _Chain, ids: list[int], max_tokens: int | None) -> None:
        request = self._next_request
        self._next_request += 1
        chain.request = request
        self._rollout_of[request] = rid
        self._inner.add(request, ids, max_tokens=max_tokens)

    # ---------------------------------------------------------------------------------------------- turns
    def step(self) -> list[Finished]:
        """One step of the inner engine; the rollouts whose last turn ended in it (their next turns are queued)."""
        done = []
        for out in self._inner.step():
            rid = self._rollout_of.pop(out.rid, None)
            if rid is None:  # pragma: no cover - an output for a request aborted earlier
                continue
            chain = self._chains[rid]
            if self._merge_turn(rid, chain, list(out.completion_ids), out.logprobs):
                del self._chains[rid]
                self._finished[rid] = chain
                done.append(Finished(rid, list(chain.completion_ids), chain.logprobs,
                                     ChainRecord(self._trajectory(chain), chain.prompt,
                                                 copy.deepcopy(chain.messages), chain.environment)))
        return done

    def _merge_turn(self, rid: int, chain: _Chain, ids: list[int], logprobs: list | None) -> bool:
        """Merge a finished turn into the chain as TRL's tool loop does, queue the next turn; True when the
        trajectory has ended."""
        trainer = self._trainer
        if chain.context_ids is None:  # the first turn, decoded as TRL's _generate decodes it
            chain.turn_ids, chain.completion_ids = list(ids), list(ids)
            chain.logprobs = None if logprobs is None else list(logprobs)
            chain.tool_mask = [1] * len(ids)
            if self._environments:
                port.set_batch_environments(trainer, [chain.environment_name])
            chain.messages = trainer._sara_decode([chain.prompt], [chain.prompt_ids], [ids])[0]
            last = chain.messages[0] if chain.messages and isinstance(chain.messages[0], dict) else {}
        else:  # a post-tool turn (TRL's _tool_call_loop, after _generate_single_turn)
            context, prompt_length = chain.context_ids, len(chain.prompt_ids)
            excess = len(context) - prompt_length + len(ids) - trainer.max_completion_length
            if excess > 0:
                ids = ids[: len(ids) - excess]
                logprobs = None if logprobs is None else logprobs[: len(ids)]
            tool_length = len(context) - prompt_length - len(chain.completion_ids)
            chain.tool_mask += [0] * tool_length + [1] * len(ids)
            if chain.logprobs is not None:
                chain.logprobs += [0.0] * tool_length + list(logprobs or [])
            chain.completion_ids = context[prompt_length:] + ids
            last = port.parse_turn(trainer, ids, context, chain.tools) if ids else {}
            if last:
                chain.messages.append(last)
            chain.context_ids = None
            chain.iterations += 1
        if (not self._tools or not last.get("tool_calls")
                or chain.iterations >= trainer.max_tool_calling_iterations):
            return True
        context = self._run_tools(chain, last)
        if context is None:  # TRL rolled the over-long tool response back: the trajectory ends as it is
            return True
        chain.context_ids = context
        left = trainer.max_completion_length - (len(context) - len(chain.prompt_ids))
        if left <= 0:  # TRL would generate, then truncate to nothing: merge an empty turn at once
            return self._merge_turn(rid, chain, [], [] if chain.logprobs is not None else None)
        self._submit(rid, chain, context, left)
        return False

    def _run_tools(self, chain: _Chain, last: dict) -> list[int] | None:
        """One iteration of TRL's ``_tool_call_loop`` for this rollout, up to its regeneration call: run the tool
        calls of ``last``, append the assistant turn and the tool messages, build the ids to generate from. Returns
        those ids, or None when TRL found them over-long (and rolled the tool messages back)."""
        view = [last]  # TRL reads the calls of completion[0] and appends the tool messages after it
        ids = port.tool_turn(self._trainer, chain.counter.tool_dicts(), chain.prompt, chain.prompt_ids,
                             chain.completion_ids, view, chain.logprobs)
        if ids is not None:
            chain.messages.extend(view[1:])
        return ids

    def _trajectory(self, chain: _Chain) -> Trajectory:
        """The cache's record: with tools, what TRL's tool loop leaves (``tool_mask``, first-turn ids, messages, tool
        call and failure counts); else only the prompt ids and the environment's observation."""
        if not self._tools:
            return Trajectory(prompt_ids=list(chain.prompt_ids), observation=copy.deepcopy(chain.observation))
        return Trajectory(prompt_ids=list(chain.prompt_ids), env_mask=list(chain.tool_mask), turn_ids=chain.turn_ids,
                          messages=copy.deepcopy(chain.messages), tool_calls=chain.counter.calls[0],
                          tool_failures=chain.counter.failures[0], observation=copy.deepcopy(chain.observation))

    # ---------------------------------------------------------------------------------------------- end
    def abort(self, rids: list[int]) -> list[int]:
        """Abort rollouts: the turn in flight is aborted and no further turn runs; returns each one's completion
        tokens so far (every turn's, tool output included; 0 for an id not in flight). Their model tokens, tool tokens
        and tool calls join :attr:`uncached`; their environment instances go back to the pool."""
        live = [rid for rid in rids if rid in self._chains]
        partial = dict(zip(live, self._inner.abort([self._chains[rid].request for rid in live]))) if live else {}
        tokens = {}
        for rid in live:
            chain = self._chains.pop(rid)
            self._rollout_of.pop(chain.request, None)
            units = chain.units(partial[rid])
            for unit in TOOL_UNITS:
                self.uncached[unit] += units[unit]
            tokens[rid] = units["model_tokens"] + units["tool_tokens"]
        return [tokens.get(rid, 0) for rid in rids]

    def forget(self, rid: int) -> None:
        """A finished rollout that will not reach the cache (given up before its reward pass, or scored and not
        recorded): its units join :attr:`uncached`, its environment goes back to the pool."""
        chain = self._finished.pop(rid, None)
        if chain is not None:
            for unit, value in chain.units().items():
                self.uncached[unit] += value

    def release(self, rid: int) -> None:
        """A finished rollout whose reward pass is over and that the cache holds: its environment goes back to the
        pool."""
        self._finished.pop(rid, None)

    def close(self) -> None:
        """End of the step: every finished rollout not released was never kept (surplus, :meth:`forget`); every
        instance goes back to the pool. Rollouts still in flight (only after an error: the event loop aborts them
        and raises when the engine keeps any) are dropped with their leases."""
        for rid in list(self._finished):
            self.forget(rid)
        self._chains.clear()
        self._rollout_of.clear()

    @property
    def leased(self) -> int:
        """Environment instances held by rollouts (reset and not yet returned)."""
        return sum(chain.environment is not None for chain in (*self._chains.values(), *self._finished.values()))

