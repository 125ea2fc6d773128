"""Streaming collection (decide per completion) and the decode-step latency model."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from benchmarks.simulator.latency import DecodeCost, DecodeEngine, call_cost
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import AllocationConfig, AllocationConfigError, Allocator, PromptStream, StreamingCollector
from sara_trl.allocation.streaming import StreamActions
from sara_trl.allocation.types import ABANDON, CONTINUE, RoundOutcome


# ------------------------------------------------------------------------------------------------ latency model
def _hand_time(lengths, cap, a, b, c):
    """Step by step: admit FIFO up to cap, pay a + b * running per decode step, decrement."""
    waiting, running, t = list(lengths), [], c
    while waiting or running:
        while waiting and len(running) < cap:
            running.append(waiting.pop(0))
        t += a + b * len(running)
        running = [r - 1 for r in running if r > 1]
    return t


@pytest.mark.parametrize("cap", [None, 1, 2, 3])
def test_call_cost_equals_the_hand_sum(cap):
    lengths = [3, 5, 2, 7, 1]
    tally = call_cost(lengths, cap)
    cost = DecodeCost("t", a=0.01, b=0.001, c=0.2)
    assert tally.sequence_steps == sum(lengths)  # every token decoded once
    expected_steps = {None: 7, 1: 18, 2: 12, 3: 9}[cap]  # FIFO admission, worked by hand
    assert tally.steps == expected_steps
    assert cost.seconds(tally) == pytest.approx(_hand_time(lengths, cap or len(lengths), 0.01, 0.001, 0.2))
    # no cap: c + a * max + b * sum
    assert cost.seconds(call_cost(lengths)) == pytest.approx(0.2 + 0.01 * 7 + 0.001 * 18)


def test_engine_abort_returns_decoded_tokens_and_frees_the_slot():
    eng = DecodeEngine(max_running=1)
    eng.submit(0, 10)
    eng.submit(1, 4)  # waits for the slot
    eng.submit(2, 3)
    assert eng.abort(2) == 0  # still waiting
    assert eng.run_to_next_finish() == [(0, 10)]
    assert eng.tally.steps == 10
    eng.submit(3, 8)
    assert eng.run_to_next_finish() == [(1, 4)]
    assert eng.tally.steps == 14
    assert eng.run_to_next_finish() == [(3, 8)]
    assert (eng.tally.steps, eng.tally.sequence_steps) == (22, 22)
    eng.submit(4, 5)
    eng.submit(5, 9)
    assert eng.run_to_next_finish() == [(4, 5)]
    assert eng.abort(5) == 0  # admitted at step 27, aborted at once
    with pytest.raises(KeyError):
        eng.abort(5)
    eng.submit(6, 3)
    with pytest.raises(ValueError, match="already in flight"):
        eng.submit(6, 3)
    with pytest.raises(ValueError, match="max_running"):
        DecodeEngine(0)
    with pytest.raises(ValueError, match="DecodeCost.b"):
        DecodeCost("x", a=0.0, b=-1.0, c=0.0)


# ------------------------------------------------------------------------------------------------ scripted prompts
class Scripted:
    """Prompt p's j-th rollout succeeds iff script[p][j] == 1, whatever the order of calls; 10 + p % 7 tokens."""

    def __init__(self, script):
        self.script = script
        self.seen = np.zeros(len(script), np.int64)

    def __call__(self, prompt_ids, counts):
        succ, tok = [], []
        for p, c in zip(np.asarray(prompt_ids).tolist(), np.asarray(counts).tolist()):
            for _ in range(c):
                succ.append(float(self.script[p][self.seen[p]]))
                tok.append(10 + p % 7)
                self.seen[p] += 1
        return RoundOutcome(np.array(succ), np.array(tok, np.int64))


def _script(num, k, seed):
    g = u_shaped_gammas(num, seed=seed)
    return (np.random.default_rng(seed).random((num, k)) < g[:, None]).astype(int)


def _decisions(result):
    return {r.prompt_id: (r.fate in ("trained", "surplus"), r.n) for r in result.records if r.fate != "active"}


@pytest.mark.parametrize("continue_to_decision", [False, True])
def test_streaming_decisions_equal_the_round_rule(continue_to_decision):
    k, B = 8, 16
    script = _script(2000, k, seed=3)
    rounds = Allocator(AllocationConfig(k=k, continue_to_decision=continue_to_decision)).collect(
        Scripted(script), PromptStream(2000, seed=1), B)
    cfg = AllocationConfig(k=k, continue_to_decision=continue_to_decision, collection="streaming")
    coll = Allocator(cfg).streaming(PromptStream(2000, seed=1), B, max_in_flight=64)
    stream = run_streaming_step(coll, Scripted(script), DecodeEngine(64))
    r, s = _decisions(rounds), _decisions(stream)
    both = set(r) & set(s)
    assert len(both) > 30
    assert {p: r[p] for p in both} == {p: s[p] for p in both}
    # the rule itself, by hand: an all-fail run is abandoned at n_a = 8 - floor(0.45 * 9) = 4, a mixed one at k
    for p in both:
        mixes_by_4 = 0 < script[p][:4].sum() < 4
        assert s[p] == ((True, k) if mixes_by_4 else (False, 4))


def test_streaming_with_auto_threshold_feeds_the_prior_and_decides_on_its_boundary():
    """stopping_rule='bayes_optimal': a streaming step feeds the (n, s) of every prompt without an
    aborted request to the prior's outcome table, and with the same fitted prior streaming decides every prompt it
    shares with the round allocator
    (round_increment=1: a decision after each rollout) exactly as rounds do, on the Bayes-optimal boundary rather
    than the paper's threshold."""
    k, B = 8, 16
    script = _script(4000, k, seed=3)
    kw = dict(k=k, stopping_rule="bayes_optimal", auto_min_prompts=32, round_increment=1)
    streaming = Allocator(AllocationConfig(**kw, collection="streaming"))
    collector = streaming.streaming(PromptStream(4000, seed=1), B, max_in_flight=64)
    first = run_streaming_step(collector, Scripted(script), DecodeEngine(64))
    # prompts with an aborted request are left out (their finished completions are a length-biased sample)
    cut = collector.truncated
    assert cut.any() and (~cut).sum() >= 32
    table = np.zeros((k + 1, k + 1))
    np.add.at(table, (first.prompt_table["n"][~cut], first.prompt_table["s"][~cut]), 1.0)  # no unscorable rollouts
    np.testing.assert_array_equal(streaming.state_dict()["extensions"]["table"]["counts"], table)

    rounds = Allocator(AllocationConfig(**kw))
    rounds.load_state_dict(streaming.state_dict())
    r = rounds.collect(Scripted(script), PromptStream(4000, seed=5), B)
    s = run_streaming_step(streaming.streaming(PromptStream(4000, seed=5), B, max_in_flight=64), Scripted(script),
                           DecodeEngine(64))
    fitted = ("prior_w0", "prior_w1", "prior_a", "prior_b", "lam", "abandon_at_fail", "abandon_at_pass")
    assert [streaming.diagnostics()[key] for key in fitted] == [rounds.diagnostics()[key] for key in fitted]
    dr, ds = _decisions(r), _decisions(s)
    both = set(dr) & set(ds)
    assert len(both) > 30
    assert {p: dr[p] for p in both} == {p: ds[p] for p in both}
    # every abandoned prompt stops at the fitted boundary's abandon point for its outcomes (all failed / all
    # passed), which here is not the paper's: tau_low=0.45 with a Beta(1, 1) prior abandons both after 4
    at = {0: streaming.diagnostics()["abandon_at_fail"], 1: streaming.diagnostics()["abandon_at_pass"]}
    assert at != {0: 4.0, 1: 4.0}
    abandoned = [(int(script[p][0]), n) for p, (kept, n) in ds.items() if not kept]
    assert {outcome for outcome, _ in abandoned} == {0, 1}
    assert all(n == at[outcome] for outcome, n in abandoned)


def test_streaming_records_every_decided_prompt_in_the_history_and_fits_the_prior_without_truncated_ones():
    """history_decay with the Bayes-optimal rule, streaming: after a step, the history holds every prompt of the step
    at decay x (successes, failures) of its finished rollouts, those with an aborted request included (their only
    evidence: left out, the selector would draw an abandoned prompt again as unseen); the prior fit's records (the
    predictive buffer's anchors, columns s, f) are exactly the prompts without an aborted request."""
    k, B, decay = 8, 16, 0.5
    script = _script(4000, k, seed=3)
    alloc = Allocator(AllocationConfig(k=k, stopping_rule="bayes_optimal", auto_min_prompts=32, round_increment=1,
                                       history_decay=decay, collection="streaming"))
    collector = alloc.streaming(PromptStream(4000, seed=1), B, max_in_flight=64)
    table = run_streaming_step(collector, Scripted(script), DecodeEngine(64)).prompt_table
    cut = collector.truncated
    assert ((table["n"] > 0) & cut).sum() >= 5  # truncated prompts with finished rollouts: the case at stake
    state = alloc.state_dict()["extensions"]
    history = state["history"]
    succ = np.asarray(history["succ"]) * history["scale"]
    fail = np.asarray(history["fail"]) * history["scale"]
    np.testing.assert_allclose(succ[table["prompt_id"]], decay * table["s"], rtol=1e-12)
    np.testing.assert_allclose(fail[table["prompt_id"]], decay * (table["n"] - table["s"]), rtol=1e-12)
    anchors = sorted(map(tuple, np.asarray(state["buffer"]["anchors"]).tolist()))
    assert anchors == sorted(zip(table["s"][~cut].astype(float), (table["n"] - table["s"])[~cut].astype(float)))


def test_streaming_sara_accounting_with_aborts_and_exactly_B_groups():
    k, B = 8, 64
    cfg = AllocationConfig(k=k, collection="streaming")
    alloc = Allocator(cfg)
    stream = PromptStream(8192, seed=0)
    task = SimulatedTask(u_shaped_gammas(8192, seed=0), tokens_pass=300, tokens_fail=600, seed=0)
    for _ in range(3):
        eng = DecodeEngine(128)
        coll = alloc.streaming(stream, B, 128)
        res = run_streaming_step(coll, task, eng, max_tokens=1000)
        st = res.stats
        assert st.stop_reason == "filled" and len(res.groups) == B and not any(g.is_fill for g in res.groups)
        assert st.committed == B and st.effective_in_batch == B and st.rounds == 0
        assert all(g.size == k for g in res.groups)
        assert coll.aborted_rollouts > 0
        # every decoded token has one fate: generated (aborted partial tokens included) == what the engine decoded
        assert st.tokens_generated == eng.tally.sequence_steps
        assert st.rollouts_generated == coll.submitted
        assert st.rollouts_surplus >= coll.aborted_rollouts
        assert (st.rollouts_aborted, st.tokens_aborted) == (coll.aborted_rollouts, coll.aborted_tokens)
        assert 0 < st.tokens_aborted <= st.tokens_surplus
        st.check()
        ids = np.concatenate([g.rollout_ids for g in res.groups])
        assert len(np.unique(ids)) == len(ids)
    assert alloc.steps == 3


def test_streaming_dynamic_sampling_keeps_mixed_full_groups():
    cfg = AllocationConfig(allocator="dynamic_sampling", k=8, collection="streaming")
    task = SimulatedTask(u_shaped_gammas(4096, seed=1), tokens_pass=100, tokens_fail=200, seed=1)
    coll = Allocator(cfg).streaming(PromptStream(4096, seed=1), 32, 256)
    res = run_streaming_step(coll, task, DecodeEngine(256))
    decided = [r for r in res.records if r.fate != "active"]
    assert all(r.n == 8 for r in decided)
    assert all((0 < r.s < 8) == (r.fate in ("trained", "surplus")) for r in decided)
    assert res.stats.committed == 32 and res.stats.effective_in_batch == 32


def test_wide_engine_keeps_budget_for_top_ups():
    """k=4, B=16, 256 requests in flight (a wide engine): fresh probes must leave the budget the undecided prompts
    are expected to need, or mixed groups cannot be topped up and steps end unfilled. Over 40 seeded steps of the
    U-shaped pool, streaming fills as often as rounds do (within 3 steps; it left 28 of 40 unfilled, against 18 for
    rounds, before the reserve), with the rounds' margin and increments. Streaming's own defaults (margin 2.0,
    continue_to_decision) spend the budget on fresh probes sooner and leave more of these budget-bound steps
    unfilled: a known cost of the defaults (docs/collection-modes.md, "Streaming defaults")."""
    gammas = u_shaped_gammas(4000, seed=0)

    def unfilled(collection: str, **options) -> int:
        options = options or {"refill_margin": 0.5, "continue_to_decision": False}
        count = 0
        for step in range(40):
            alloc = Allocator(AllocationConfig(k=4, collection=collection, **options))
            task, stream = SimulatedTask(gammas, seed=step), PromptStream(len(gammas), seed=step)
            if collection == "rounds":
                res = alloc.collect(task, stream, 16)
            else:
                res = run_streaming_step(alloc.streaming(stream, 16, 256), task, DecodeEngine(256))
            res.stats.check()
            count += res.stats.unfilled > 0
        return count

    rounds, streaming = unfilled("rounds"), unfilled("streaming")
    assert rounds > 0 and streaming <= rounds + 3
    defaults = unfilled("streaming", refill_margin=None, continue_to_decision=None)
    assert (rounds, streaming, defaults) == (18, 21, 28)  # of 40 seeded steps, as docs/collection-modes.md says


def test_streaming_default_continues_to_the_next_abandon_point():
    """The default streaming collector (continue_to_decision=None -> True) gives an unmixed prompt whose requests
    are all in every rollout up to its next abandon point at once: k=4, n0=2, tau_low=0.1, a prompt with 2 of 2
    successes is abandoned at n_a = k - floor(tau_low (k + 1)) = 4 unanimous outcomes, so it gets 2 more requests,
    not 1."""
    cfg = AllocationConfig(k=4, n0=2, tau_low=0.1, collection="streaming", refill_margin=0.0)
    coll = StreamingCollector(cfg, 2, PromptStream(100, seed=0).take, max_in_flight=8)
    sub = coll.start().submit
    a, b = sub[0].prompt_id, sub[2].prompt_id
    coll.complete(sub[2].rid, 1.0, 7)
    coll.complete(sub[0].rid, 1.0, 5)
    assert [r.prompt_id for r in coll.complete(sub[1].rid, 0.0, 6).submit] == [a, a]  # a mixed: top-up to 4
    after_b = coll.complete(sub[3].rid, 1.0, 8)
    assert [r.prompt_id for r in after_b.submit] == [b, b] and after_b.abort == []


def test_budget_cap_stops_a_hopeless_step():
    cfg = AllocationConfig(k=8, collection="streaming", budget_cap=1.0)
    task = SimulatedTask(np.zeros(1000), seed=0)  # never solved: every prompt is abandoned
    coll = StreamingCollector(cfg, 4, PromptStream(1000, seed=0).take, max_in_flight=16)
    res = run_streaming_step(coll, task, DecodeEngine(16))
    assert res.stats.stop_reason == "budget" and coll.submitted <= 32
    assert all(g.is_fill for g in res.groups) and len(res.groups) == 4
    assert res.stats.abandoned == res.stats.prompts_drawn - res.stats.active_left


def test_no_request_is_scored_twice():
    cfg = AllocationConfig(k=4, collection="streaming")
    coll = StreamingCollector(cfg, 2, PromptStream(100, seed=0).take, max_in_flight=8)
    first = coll.start().submit
    # need 2 at prior rate p_eff(0, 0) = 0.6 plus 0.5 sd wants 5 prompts; the cap of 8 fits 4 probes of n0 = 2
    assert [r.rid for r in first] == list(range(8))
    assert [r.prompt_id for r in first[::2]] == [r.prompt_id for r in first[1::2]]
    coll.complete(0, 1.0, 5)
    with pytest.raises(ValueError, match="already finished"):
        coll.complete(0, 1.0, 5)
    with pytest.raises(ValueError, match="never submitted"):
        coll.complete(99, 0.0, 5)
    with pytest.raises(ValueError, match="success must be 0, 1 or NaN"):
        coll.complete(1, 0.5, 5)
    with pytest.raises(ValueError, match="was not asked to abort"):
        coll.aborted(1, 3)
    with pytest.raises(RuntimeError, match="before the step is done"):
        coll.finish()


def test_unreported_abort_blocks_finish():
    cfg = AllocationConfig(k=2, n0=2, tau_low=0.0, collection="streaming", refill_margin=0.0)
    coll = StreamingCollector(cfg, 1, PromptStream(100, seed=0).take, max_in_flight=8)
    sub = coll.start().submit
    by_prompt = {}
    for r in sub:
        by_prompt.setdefault(r.prompt_id, []).append(r.rid)
    assert len(by_prompt) >= 2  # the prior's p_eff(0, 0) = 2/3 < 1 draws more than one prompt
    a, b = list(by_prompt.values())[:2]
    coll.complete(a[0], 1.0, 3)
    acts = coll.complete(a[1], 0.0, 4)  # mixed at k = 2: committed, B = 1 is full
    assert coll.done and coll.stop_reason == "filled" and set(acts.abort) >= set(b)
    with pytest.raises(RuntimeError, match="not been reported"):
        coll.finish()
    coll.complete(acts.abort[0], 1.0, 7)  # finished in the same engine step as its abort: surplus
    for rid in acts.abort[1:]:
        coll.aborted(rid, 2)
    res = coll.finish()
    assert res.stats.rollouts_generated == len(sub) and res.stats.rollouts_trained == 2
    assert res.stats.tokens_generated == 3 + 4 + 7 + 2 * (len(acts.abort) - 1)
    assert res.stats.tokens_surplus == res.stats.tokens_generated - 7


def test_collection_config_is_validated():
    assert AllocationConfig().collection == "rounds"
    with pytest.raises(AllocationConfigError, match="collection='bogus' must be one of"):
        AllocationConfig(collection="bogus")
    with pytest.raises(AllocationConfigError, match="allocator='uniform' has nothing to decide"):
        AllocationConfig(allocator="uniform", collection="streaming")
    for options in ({"history_decay": 0.5}, {"history_decay": 0.5, "selection": "greedy"}):
        assert AllocationConfig(collection="streaming", **options).collection == "streaming"
    assert AllocationConfig(collection="streaming", carry_over=True).carry_over
    with pytest.raises(ValueError, match="carry_over=False"):
        StreamingCollector(AllocationConfig(collection="streaming"), 1, PromptStream(10).take, max_in_flight=8,
                           carry={})
    with pytest.raises(ValueError, match="collect\\(\\) runs rounds"):
        Allocator(AllocationConfig(collection="streaming")).collect(lambda p, c: None, PromptStream(10), 1)
    with pytest.raises(ValueError, match="needs collection='streaming'"):
        Allocator(AllocationConfig()).streaming(PromptStream(10), 1, 8)
    with pytest.raises(ValueError, match="max_in_flight=4 must be an integer >= k=8"):
        StreamingCollector(AllocationConfig(collection="streaming"), 1, PromptStream(10).take, max_in_flight=4)
    with pytest.raises(ValueError, match="build the collector with Allocator.streaming"):
        StreamingCollector(AllocationConfig(collection="streaming", stopping_rule="bayes_optimal"), 1,
                           PromptStream(10).take, max_in_flight=8)


@pytest.mark.parametrize("B", [1, 2])
def test_unmixed_prompts_are_held_once_mixed_ones_fill_the_batch(B):
    """k=4, n0=2, tau_low=0.1: prompts a and b are probed with 2 rollouts each. b's first completes (success), then
    a mixes (1, 0). With B=1, a alone completes the batch once topped up to 4, so b is held: its request still in
    flight is aborted (surplus), nothing more is submitted for it and no fresh prompt is drawn, and b ends the step
    undecided with its one recorded rollout. With B=2 the batch still needs b: nothing is aborted and b's second
    completion (unmixed, above the abandon threshold) gets its next rollout."""
    cfg = AllocationConfig(k=4, n0=2, tau_low=0.1, collection="streaming", refill_margin=0.0,
                           continue_to_decision=False)
    coll = StreamingCollector(cfg, B, PromptStream(100, seed=0).take, max_in_flight=8)
    sub = coll.start().submit
    a, b = sub[0].prompt_id, sub[2].prompt_id
    assert [r.prompt_id for r in sub[:4]] == [a, a, b, b] and len(sub) == 4 * B  # 1 / 0.6 -> 2 probes per group
    assert coll.complete(sub[2].rid, 1.0, 7).submit == []
    assert coll.complete(sub[0].rid, 1.0, 5).submit == []
    mixes = coll.complete(sub[1].rid, 0.0, 6)
    assert [r.prompt_id for r in mixes.submit] == [a, a]
    if B == 2:
        assert mixes.abort == []
        after_b = coll.complete(sub[3].rid, 1.0, 8)
        assert [r.prompt_id for r in after_b.submit] == [b] and after_b.abort == []
        return
    assert mixes.abort == [sub[3].rid] and coll.in_flight == 2
    coll.aborted(sub[3].rid, 4)
    assert coll.complete(mixes.submit[0].rid, 1.0, 9) == StreamActions()
    last = coll.complete(mixes.submit[1].rid, 0.0, 10)
    assert last == StreamActions() and coll.done and coll.stop_reason == "filled"
    res = coll.finish()
    fates = {r.prompt_id: (r.fate, r.n) for r in res.records}
    assert fates == {a: ("trained", 4), b: ("active", 1)}
    st = res.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_active_left, st.rollouts_surplus) == (6, 4, 1, 1)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_active_left, st.tokens_surplus) == (41, 30, 7, 4)
    assert (st.rollouts_aborted, st.tokens_aborted) == (1, 4)  # the surplus is b's aborted request
    st.check()


def test_slots_freed_by_holding_go_to_the_top_ups_at_once():
    """k=8, n0=2, cap 8, B=1, round_increment=6: b goes (1, 1) and gets 6 more rollouts, filling the cap with a's 2
    probes. When a mixes (1, 0), b is held and its 6 requests are aborted; the 6 freed slots take a's 6 top-ups to
    the floor (8) in the same event, not one per later completion."""
    cfg = AllocationConfig(k=8, n0=2, tau_low=0.1, round_increment=6, collection="streaming", refill_margin=0.0)
    coll = StreamingCollector(cfg, 1, PromptStream(100, seed=0).take, max_in_flight=8)
    sub = coll.start().submit
    a, b = sub[0].prompt_id, sub[2].prompt_id
    assert [r.prompt_id for r in sub] == [a, a, b, b]
    assert coll.complete(sub[2].rid, 1.0, 3) == StreamActions()
    cont = coll.complete(sub[3].rid, 1.0, 3)
    assert [r.prompt_id for r in cont.submit] == [b] * 6 and coll.in_flight == 8
    assert coll.complete(sub[0].rid, 1.0, 3) == StreamActions()
    mixes = coll.complete(sub[1].rid, 0.0, 3)
    assert sorted(mixes.abort) == sorted(r.rid for r in cont.submit)
    assert [r.prompt_id for r in mixes.submit] == [a] * 6 and coll.in_flight == 6


def _never_solved_share(options: dict, steps: int = 8) -> tuple[float, list]:
    """Streaming SARA over a pool whose first half is never solved: the share of never-solved prompts among the
    fresh prompts drawn in the last half of the steps, and the steps' results."""
    gammas = np.r_[np.zeros(40), np.full(40, 0.5)]
    task = SimulatedTask(gammas, seed=4)
    alloc = Allocator(AllocationConfig(k=8, collection="streaming", **options))
    stream = PromptStream(len(gammas), seed=4)
    drawn, results = [], []
    for step in range(steps):
        res = run_streaming_step(alloc.streaming(stream, 8, 64), task, DecodeEngine(64))
        res.stats.check()
        assert len(res.groups) == 8 and res.stats.unfilled == 0
        results.append(res)
        if step >= steps // 2:
            drawn.extend(res.prompt_table["prompt_id"].tolist())
    return float(np.mean(np.asarray(drawn) < 40)), results


def test_streaming_runs_history_and_selection():
    """History warm-start and greedy selection run in streaming: the selector draws through the streaming
    collector (its pool is logged), and it learns to avoid the prompts it has seen fail: in stream order about half
    the fresh prompts are never solved; with history and greedy selection far fewer are."""
    plain, _ = _never_solved_share({})
    assert 0.35 < plain < 0.65
    history, _ = _never_solved_share({"history_decay": 1.0})
    assert 0.35 < history < 0.65  # history alone changes the priors, not which prompts are drawn
    selected, results = _never_solved_share({"history_decay": 1.0, "selection": "greedy"})
    assert selected < 0.5 * plain
    again, results_again = _never_solved_share({"history_decay": 1.0, "selection": "greedy"})
    assert again == selected  # deterministic
    assert [r.prompt_table["prompt_id"].tolist() for r in results] == \
        [r.prompt_table["prompt_id"].tolist() for r in results_again]


def test_streaming_history_prior_changes_decisions():
    """With history, a prompt's prior carries its past outcomes, so the rule in streaming is the history rule:
    a prompt seen failing 16 times is abandoned after its first failed probe rollouts, where the paper's uniform
    prior would continue it."""
    alloc = Allocator(AllocationConfig(k=8, collection="streaming", history_decay=1.0))
    stream = PromptStream(10, seed=0)
    collector = alloc.streaming(stream, 1, 8)
    ext = alloc._ext
    ext.history.observe(np.array([3]), np.array([16]), np.array([0]))
    pids = np.array([3, 4])
    n = np.array([2, 2])
    dec, p = collector._decide(pids, n, n, np.array([0, 0]))
    paper = AllocationConfig(k=8)
    from sara_trl.allocation.rules import decide

    dec0, p0 = decide(n, n, np.array([0, 0]), k=8, tau_low=paper.tau_low, commit_min=paper.commit_floor)
    assert p[0] < p0[0] and p[1] == pytest.approx(p0[1])
    assert dec[0] == ABANDON and dec0[0] == CONTINUE  # abandoned with history, continued under the paper's prior


def test_streaming_history_and_selection_on_one_process_shard():
    """Several processes stream on disjoint shards (ShardStream draws dataset indices): the history table covers
    the dataset, and every prompt drawn belongs to the process's shard."""
    from sara_trl.allocation import ShardStream

    gammas = u_shaped_gammas(101, seed=2)
    task = SimulatedTask(gammas, seed=2)
    alloc = Allocator(AllocationConfig(k=8, collection="streaming", history_decay=0.5, selection="thompson"))
    stream = ShardStream(101, rank=1, world=2, seed=2)
    for _ in range(4):
        res = run_streaming_step(alloc.streaming(stream, 4, 32), task, DecodeEngine(32))
        res.stats.check()
        assert len(res.groups) == 4 and (res.prompt_table["prompt_id"] % 2 == 1).all()
    assert alloc._ext.history.num_prompts == 101 and alloc._ext.history.rows_with_history() > 0


def test_streaming_dynamic_sampling_decides_on_score_spread():
    """ds_filter='score' in streaming: a group's labels follow its scores' spread once all k are in, as in rounds
    (score_spread_labels): all-wrong answers whose format scores differ are kept; identical scores are not. Every
    recorded completion needs its score."""
    cfg = AllocationConfig(k=4, allocator="dynamic_sampling", ds_filter="score", collection="streaming")
    coll = StreamingCollector(cfg, 1, PromptStream(10, shuffle=False).take, max_in_flight=8,
                              mix_rate=lambda: np.full(5, 0.5))
    acts = coll.start()
    assert [r.prompt_id for r in acts.submit] == [0] * 4 + [1] * 4
    aborts = []
    for rid, score in zip(range(4), (0.0, 0.0, 0.0, 0.0)):  # prompt 0: unanimous wrong, same score
        aborts += coll.complete(rid, 0.0, 5, score).abort
    assert coll.ledger.status[0] == 2  # abandoned (and a fresh prompt refills its place)
    with pytest.raises(ValueError, match="ds_filter='score' needs each completion's score"):
        coll.complete(4, 0.0, 5)
    for rid, score in zip(range(4, 8), (0.1, 0.2, 0.1, float("nan"))):  # prompt 1: wrong, but the scores spread
        aborts += coll.complete(rid, 0.0 if rid < 7 else float("nan"), 5, score).abort
    assert coll.done and coll.committed == 1
    for rid in aborts:  # the refill's requests, aborted once the batch is full
        coll.aborted(rid, 0)
    res = coll.finish()
    assert [g.prompt_id for g in res.groups] == [1]
    np.testing.assert_array_equal(res.groups[0].success, [0.0, 1.0, 0.0, np.nan])  # labels of the spread
    res.stats.check()


def test_streaming_score_filter_through_the_event_loop_equals_labels_on_binary_scores():
    """Through the event loop (scores passed with the labels): on binary scores the spread is the labels' mix, so
    ds_filter='score' makes exactly the decisions of ds_filter='success'."""
    results = []
    for ds_filter in ("success", "score"):
        cfg = AllocationConfig(k=8, allocator="dynamic_sampling", ds_filter=ds_filter, collection="streaming")
        alloc, stream = Allocator(cfg), PromptStream(500, seed=6)
        task = SimulatedTask(u_shaped_gammas(500, seed=6), seed=6)
        results.append([run_streaming_step(alloc.streaming(stream, 8, 64), task, DecodeEngine(64))
                        for _ in range(3)])
    for a, b in zip(*results):
        b.stats.check()
        assert a.prompt_table["prompt_id"].tolist() == b.prompt_table["prompt_id"].tolist()
        assert a.stats == b.stats


# ------------------------------------------------------------------------------------------------ streaming_speculate
def _started(speculate: bool, in_flight: int = 16):
    cfg = AllocationConfig(k=4, collection="streaming", streaming_speculate=speculate, refill_margin=0.5,
                           continue_to_decision=False)  # n0 = 2, commit floor 4
    collector = Allocator(cfg).streaming(PromptStream(100, seed=0), 1, in_flight)
    return collector, collector.start()


def test_speculation_fills_free_slots_up_to_the_commit_floor():
    plain, first = _started(False)
    spec, first_spec = _started(True)
    probes = [r.prompt_id for r in first.submit]
    assert len(probes) == 6 and all(probes.count(p) == 2 for p in set(probes))  # three prompts, n0 = 2 each
    # the same three prompts, each given two speculative continuations: commit floor 4, 12 of the 16 slots
    assert [r.prompt_id for r in first_spec.submit[:6]] == probes
    assert sorted(r.prompt_id for r in first_spec.submit) == sorted(probes * 2) and spec.in_flight == 12
    # the first prompt mixes (a failure, then a success): the plain collector tops it up now, while the speculating
    # one has its top-up running already; both hold the other prompts (B = 1 is covered) and abort their requests
    for collector in (plain, spec):
        assert collector.complete(0, 0.0, 10).submit == []
    top_up = plain.complete(1, 1.0, 5)
    assert [r.prompt_id for r in top_up.submit] == [probes[0]] * 2 and sorted(top_up.abort) == [2, 3, 4, 5]
    held = spec.complete(1, 1.0, 5)
    assert held.submit == [] and sorted(held.abort) == [2, 3, 4, 5, 7, 8, 10, 11] and spec.in_flight == 2


def test_speculation_stays_within_the_budget_and_keeps_the_accounting():
    k, B = 8, 16
    cfg = AllocationConfig(k=k, collection="streaming", streaming_speculate=True, budget_cap=2.0)
    alloc, stream = Allocator(cfg), PromptStream(4096, seed=3)
    task = SimulatedTask(u_shaped_gammas(4096, seed=3), tokens_pass=40, tokens_fail=90, seed=3)
    for _ in range(3):
        eng = DecodeEngine(256)
        coll = alloc.streaming(stream, B, 256)
        res = run_streaming_step(coll, task, eng)
        st = res.stats
        st.check()
        assert coll.submitted <= 2 * B * k  # the budget cap (App. D) bounds speculative requests too
        assert st.tokens_generated == eng.tally.sequence_steps and st.rollouts_generated == coll.submitted
        assert all(g.size == k for g in res.groups if not g.is_fill)


def test_speculation_fills_the_engine_on_the_simulated_task():
    """The same prompts and outcomes: speculating keeps more requests running and finishes the step in fewer engine
    steps, for more generated tokens (the aborted speculative requests)."""
    out = {}
    for speculate in (False, True):
        cfg = AllocationConfig(k=8, collection="streaming", streaming_speculate=speculate)
        alloc, stream = Allocator(cfg), PromptStream(4096, seed=1)
        task = SimulatedTask(u_shaped_gammas(4096, seed=1), tokens_pass=40, tokens_fail=90, seed=1)
        steps = tokens = decoded = 0
        for _ in range(4):
            eng = DecodeEngine(64)
            res = run_streaming_step(alloc.streaming(stream, 8, 64), task, eng)
            steps, tokens = steps + eng.tally.steps, tokens + res.stats.tokens_generated
            decoded += eng.tally.sequence_steps
        out[speculate] = steps, tokens, decoded / steps  # mean sequences decoded per engine step
    assert out[True][0] < out[False][0] and out[True][1] > out[False][1] and out[True][2] > out[False][2]


@pytest.mark.parametrize("fields", [{"collection": "rounds"},
                                    {"collection": "streaming", "allocator": "dynamic_sampling"}])
def test_speculation_needs_streaming_sara(fields):
    with pytest.raises(AllocationConfigError, match="streaming_speculate=True .* needs collection='streaming' and "
                                                    "allocator='sara'"):
        AllocationConfig(k=8, streaming_speculate=True, **fields)
