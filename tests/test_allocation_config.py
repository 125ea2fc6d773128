"""AllocationConfig's one spelling per concept: ``stopping_rule`` and ``continue_to_decision``, the old spellings
(``tau_low="auto"``, ``round_increment="to_decision"``) accepted with a FutureWarning until sara_trl 0.3, and the
allocator names read from the strategy registry."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask
from benchmarks.simulator.simulate import u_shaped_gammas
from sara_trl.allocation import ALLOCATORS, STRATEGIES, AllocationConfig, Allocator, PromptStream
from sara_trl.allocation.config import PAPER_TAU_LOW, ROUND_TO_DECISION, STOPPING_RULES, AllocationConfigError


def _new(**kwargs) -> AllocationConfig:
    """A config built without any warning (a warning here would be an error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return AllocationConfig(**kwargs)


def test_new_fields_and_their_defaults():
    cfg = _new()
    assert (cfg.stopping_rule, cfg.tau_low, cfg.continue_to_decision, cfg.round_increment) == (
        "threshold", PAPER_TAU_LOW, None, 1)
    assert (cfg.to_decision, cfg.refill_margin, cfg.margin) == (False, None, 0.5)  # rounds: the paper's increments
    assert STOPPING_RULES == ("threshold", "bayes_optimal")
    meta = {f.name: f.metadata for f in dataclasses.fields(AllocationConfig)}
    assert meta["stopping_rule"]["choices"] == ["threshold", "bayes_optimal"] and meta["stopping_rule"]["help"]
    assert "continue_to_decision" in meta and meta["continue_to_decision"]["help"]
    hints = {f.name: f.type for f in dataclasses.fields(AllocationConfig)}
    assert (hints["tau_low"], hints["round_increment"]) == ("float", "int")  # one type each, no 'auto' string


def test_tau_low_auto_warns_and_becomes_bayes_optimal():
    with pytest.warns(FutureWarning, match=r"AllocationConfig: tau_low='auto' is deprecated and will be removed in "
                                           r"sara_trl 0\.3; use stopping_rule='bayes_optimal'") as record:
        cfg = AllocationConfig(tau_low="auto")
    assert record[0].filename == __file__  # the warning points at the line that built the config
    assert cfg == _new(stopping_rule="bayes_optimal")
    assert (cfg.stopping_rule, cfg.tau_low) == ("bayes_optimal", PAPER_TAU_LOW)
    assert dataclasses.replace(cfg, k=4) == _new(stopping_rule="bayes_optimal", k=4)  # the new fields carry over


def test_round_increment_to_decision_warns_and_becomes_continue_to_decision():
    with pytest.warns(FutureWarning, match=r"AllocationConfig: round_increment='to_decision' is deprecated and will be "
                                           r"removed in sara_trl 0\.3; use continue_to_decision=True"):
        cfg = AllocationConfig(round_increment=ROUND_TO_DECISION)
    assert cfg == _new(continue_to_decision=True)
    assert (cfg.continue_to_decision, cfg.round_increment) == (True, 1)


def test_both_old_spellings_at_once_give_two_warnings():
    with pytest.warns(FutureWarning) as record:
        cfg = AllocationConfig(tau_low="auto", round_increment="to_decision", k=4)
    assert sorted(str(w.message).split(" is deprecated")[0] for w in record) == [
        "AllocationConfig: round_increment='to_decision'", "AllocationConfig: tau_low='auto'"]
    assert cfg == _new(stopping_rule="bayes_optimal", continue_to_decision=True, k=4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(stopping_rule="auto"), r"stopping_rule='auto' must be one of \('threshold', 'bayes_optimal'\)"),
    (dict(stopping_rule="bayes_optimal", tau_low=0.3),
     r"tau_low \(0.3\) is not used with stopping_rule='bayes_optimal' \(its burn-in runs the paper's rule at 0.45\)"),
    (dict(tau_low="sometimes"), r"tau_low='sometimes' must be a number in \[0, 1\)"),
    (dict(tau_low=1.0), r"tau_low=1.0 must lie in \[0, 1\): .*abandon every prompt"),
    (dict(round_increment="fast"), r"round_increment='fast' must be an integer >= 1"),
    (dict(continue_to_decision=True, round_increment=2), r"round_increment \(2\) is not used with "
                                                          r"continue_to_decision=True"),
    (dict(continue_to_decision="yes"), r"continue_to_decision='yes' must be True, False or None"),
    (dict(cost_unit="tokens"), r"cost_unit='tokens' needs stopping_rule='bayes_optimal'"),
    (dict(allocator="uniform", stopping_rule="bayes_optimal"), r"stopping_rule='bayes_optimal' is a SARA stopping "
                                                               r"rule; allocator='uniform'"),
])
def test_checks_of_the_new_fields(kwargs, match):
    with pytest.raises(ValueError, match=rf"^AllocationConfig: {match}"):
        AllocationConfig(**kwargs)


def _run(cfg: AllocationConfig, steps: int = 6, B: int = 16, seed: int = 3):
    gammas = u_shaped_gammas(4000, seed=seed)
    task, stream, alloc = SimulatedTask(gammas, seed=seed), PromptStream(len(gammas), seed=seed), Allocator(cfg)
    results = [alloc.collect(task, stream, B) for _ in range(steps)]
    return results, alloc


@pytest.mark.parametrize("old, new", [
    (dict(tau_low="auto", auto_min_prompts=16), dict(stopping_rule="bayes_optimal", auto_min_prompts=16)),
    (dict(round_increment="to_decision"), dict(continue_to_decision=True)),
    (dict(tau_low="auto", round_increment="to_decision", auto_min_prompts=16),
     dict(stopping_rule="bayes_optimal", continue_to_decision=True, auto_min_prompts=16)),
])
def test_old_and_new_spellings_decide_identically(old, new):
    with pytest.warns(FutureWarning):
        old_cfg = AllocationConfig(k=8, **old)
    old_results, old_alloc = _run(old_cfg)
    new_results, new_alloc = _run(_new(k=8, **new))
    assert [r.stats for r in old_results] == [r.stats for r in new_results]
    for a, b in zip(old_results, new_results):
        assert a.prompt_table.keys() == b.prompt_table.keys()
        for name in a.prompt_table:
            np.testing.assert_array_equal(a.prompt_table[name], b.prompt_table[name])
    assert old_alloc.diagnostics() == pytest.approx(new_alloc.diagnostics(), nan_ok=True)
    # and the option changes the decisions at all (the run is not one where it cannot matter)
    plain_results, _ = _run(_new(k=8))
    assert [r.stats for r in plain_results] != [r.stats for r in new_results]


def test_allocator_names_are_read_from_the_registry(monkeypatch):
    assert ALLOCATORS == tuple(STRATEGIES) == ("sara", "dynamic_sampling", "uniform")
    choices = next(f for f in dataclasses.fields(AllocationConfig) if f.name == "allocator").metadata["choices"]
    assert choices is ALLOCATORS
    with pytest.raises(ValueError, match=r"allocator must be one of \('sara', 'dynamic_sampling', 'uniform'\), got "
                                         r"'first_b'"):
        AllocationConfig(allocator="first_b")
    monkeypatch.setitem(STRATEGIES, "first_b", STRATEGIES["uniform"])  # registered after import
    assert "first_b" in ALLOCATORS and list(choices) == ["sara", "dynamic_sampling", "uniform", "first_b"]
    assert AllocationConfig(allocator="first_b").allocator == "first_b"
    monkeypatch.delitem(STRATEGIES, "first_b")
    assert "first_b" not in ALLOCATORS and len(ALLOCATORS) == 3


def test_a_config_saved_with_the_old_spellings_still_loads():
    """``sara_state.json`` records ``to_allocation_config().__dict__``: one written by sara_trl 0.1 has
    ``tau_low: "auto"`` / ``round_increment: "to_decision"`` and neither new field; it still builds the same config."""
    import json

    saved = {f.name: getattr(_new(k=4), f.name) for f in dataclasses.fields(AllocationConfig)
             if f.name not in ("stopping_rule", "continue_to_decision")}
    saved.update(tau_low="auto", round_increment="to_decision")
    with pytest.warns(FutureWarning):
        cfg = AllocationConfig(**json.loads(json.dumps(saved)))
    assert cfg == _new(k=4, stopping_rule="bayes_optimal", continue_to_decision=True)
    # and the allocator state an old run saved loads into an allocator built from it
    alloc = Allocator(cfg)
    alloc.collect(SimulatedTask(u_shaped_gammas(500, seed=0), seed=0), PromptStream(500, seed=0), 8)
    state = alloc.state_dict()
    assert state["extensions"]["table"] is not None  # the Bayes-optimal rule's outcome table is saved
    fresh = Allocator(_new(k=4, stopping_rule="bayes_optimal", continue_to_decision=True))
    fresh.load_state_dict(state)
    assert fresh.diagnostics() == pytest.approx(alloc.diagnostics(), nan_ok=True)


@pytest.mark.parametrize("kwargs, to_decision, margin", [
    (dict(), False, 0.5),  # rounds: one rollout per round (paper Alg. 1), half a standard deviation of margin
    (dict(collection="streaming"), True, 2.0),  # streaming: no serial wait per continuation, a wider reserve
    (dict(collection="streaming", round_increment=2), False, 2.0),  # an explicit increment is kept
    (dict(collection="streaming", continue_to_decision=False, refill_margin=0.5), False, 0.5),  # explicit values win
    (dict(continue_to_decision=True, refill_margin=0.0), True, 0.0),
    (dict(allocator="dynamic_sampling", collection="streaming"), True, 2.0),
])
def test_collection_defaults_resolve(kwargs, to_decision, margin):
    cfg = AllocationConfig(**kwargs)
    assert (cfg.to_decision, cfg.margin) == (to_decision, margin)
    assert isinstance(cfg.margin, float)


@pytest.mark.parametrize("value", [True, -0.1, float("nan"), "2"])
def test_refill_margin_rejects_non_numbers(value):
    with pytest.raises(AllocationConfigError, match=r"refill_margin=.* must be None \(the collection's default\) or a "
                                                     r"finite number >= 0"):
        AllocationConfig(refill_margin=value)


def test_streaming_refuses_a_rule_that_abandons_every_prompt_at_its_first_outcome():
    """k = 2, uniform prior: p_eff after one outcome is 1/3 (Eq. 2: the other rollout must differ, E[1 - gamma] under
    Beta(2, 1)), below the paper's tau_low = 0.45, so streaming (a decision after every completion) would abandon every
    prompt before it could be mixed. Refused with the bound; a tau_low below it, k = 3 (p_eff 1/2), rounds, and the
    Bayes-optimal rule are accepted."""
    from sara_trl.allocation.config import streaming_abandons_every_prompt

    with pytest.raises(AllocationConfigError, match=r"at most 0\.333 \(Eq\. 2\), below tau_low=0\.45"):
        AllocationConfig(k=2, collection="streaming")
    assert streaming_abandons_every_prompt(AllocationConfig(k=2)) == pytest.approx(1 / 3)
    assert streaming_abandons_every_prompt(AllocationConfig(k=3)) is None  # p_eff(1, s, 3) = 1/2 >= 0.45
    # Beta(1, 3): after a success Beta(2, 3), the other rollout fails with 3/5 >= 0.45; only a first failure (1/5)
    # falls below: the rule can still commit, so nothing is refused.
    assert streaming_abandons_every_prompt(AllocationConfig(k=2, prior_alpha=1.0, prior_beta=3.0)) is None
    assert streaming_abandons_every_prompt(AllocationConfig(k=2, prior_alpha=1.0, prior_beta=3.0, tau_low=0.7)) == \
        pytest.approx(3 / 5)
    AllocationConfig(k=2, collection="streaming", tau_low=0.3)
    AllocationConfig(k=3, collection="streaming")
    AllocationConfig(k=2, collection="streaming", stopping_rule="bayes_optimal")
