"""Choose the quickstart's task shares on the replay bank of real SmolLM2 outcomes.

For each candidate mix of the bank's task components (easy_add / add / hard_mul), replay 4 steps of B groups of
k = 8 with SARA (paper defaults, and with ``carry_over``) and with dynamic sampling, over 30 seeds (each seed
resamples 512 prompts from the bank's prompts of each component, with replacement), and print the mean rollouts,
tokens and rounds and SARA / DS ratios. Result and choice: QUICKSTART_TASK.md (this folder), section "Shares".

    python -m benchmarks.quickstart_task.quickstart_mix
"""

from __future__ import annotations

import numpy as np

from benchmarks.replay import DEFAULT_BANK, ReplaySource, load_bank
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream

MIXES = ((0.30, 0.30, 0.40), (0.15, 0.20, 0.65), (0.10, 0.15, 0.75), (0.20, 0.15, 0.65))
COMPONENTS = ("easy_add", "add", "hard_mul")


def replay_cost(shares, num_groups: int, allocator: str, carry_over: bool = False, k: int = 8, steps: int = 4,
                seeds: int = 30, num_prompts: int = 512) -> np.ndarray:
    """Mean (rollouts, tokens, rounds per step) over ``seeds`` replays of ``steps`` steps."""
    success, tokens, meta = load_bank(DEFAULT_BANK)
    with np.load(DEFAULT_BANK) as bank:
        task = bank["task"]
    totals = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        rows = np.concatenate([
            rng.choice(np.flatnonzero(task == meta["task_names"].index(name)), size=round(share * num_prompts))
            for name, share in zip(COMPONENTS, shares)])
        rng.shuffle(rows)
        source = ReplaySource(success[rows], tokens[rows], seed=seed)
        allocator_ = Allocator(AllocationConfig(k=k, allocator=allocator, carry_over=carry_over))
        stream = PromptStream(len(rows), seed=seed)
        rollouts = toks = rounds = 0
        for _ in range(steps):
            source.start_step()
            stats = allocator_.collect(source, stream, num_groups).stats
            rollouts, toks, rounds = rollouts + stats.rollouts_generated, toks + stats.tokens_generated, \
                rounds + stats.rounds
        totals.append((rollouts, toks, rounds / steps))
    return np.mean(totals, axis=0)


def main() -> None:
    print("| easy_add / add / hard_mul | B | SARA rollouts | DS rollouts | SARA/DS rollouts | SARA/DS tokens | "
          "+carry_over rollouts | +carry_over tokens | rounds SARA / DS |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for shares in MIXES:
        for num_groups in (4, 8):
            sara = replay_cost(shares, num_groups, "sara")
            ds = replay_cost(shares, num_groups, "dynamic_sampling")
            carry = replay_cost(shares, num_groups, "sara", carry_over=True)
            print(f"| {' / '.join(f'{s:.2f}' for s in shares)} | {num_groups} | {sara[0]:.0f} | {ds[0]:.0f} | "
                  f"{sara[0] / ds[0]:.2f} | {sara[1] / ds[1]:.2f} | {carry[0] / ds[0]:.2f} | {carry[1] / ds[1]:.2f} | "
                  f"{sara[2]:.1f} / {ds[2]:.1f} |")


if __name__ == "__main__":
    main()
