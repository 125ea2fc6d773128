# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Per-prompt accounting of a run from each step's prompt table: fresh draws, the outcomes each step added per prompt
id, and the share of draws spent on prompts that never mixed (issue 56).

A step's table (:func:`step_table`, from :attr:`sara_trl.allocation.StepResult.prompt_table`) has one row per prompt
of the step, carried-in prompts first: ``prompt_id``, ``n`` and ``s`` (outcomes and successes when the step ended,
a carried prompt's earlier outcomes included), ``fate`` (0 trained, 1 surplus, 2 abandoned, 3 active) and
``carried_in`` (how many leading rows came from the previous step, ``carry_over`` only).

Definitions used by the replay and the report:

* a **draw** is a row that is not carried in: one fresh draw of a prompt from the stream (or the selector);
* a row's **new outcomes** are its ``n, s`` less those of the same prompt's row in the previous step when it was
  carried in (:func:`new_outcomes`), so summing new outcomes over a run counts every scored rollout once;
* a prompt **never mixed** (:func:`never_mixed`) when its pooled outcomes over the run (or over a set of runs) are
  all successes or all failures, with at least one outcome; prompts never drawn are not classified;
* the **share of draws on never-mixing prompts** (:func:`draw_shares`): draws of such prompts / all draws, and the
  same for new outcomes (rollouts).
"""

from __future__ import annotations

import numpy as np

__all__ = ["FATES", "step_table", "new_outcomes", "pooled_outcomes", "never_mixed", "draw_shares",
           "trained_success", "draws_per_prompt"]

FATES = {0: "trained", 1: "surplus", 2: "abandoned", 3: "active"}


def step_table(prompt_table: dict, carried_in: int) -> dict:
    """A step's prompt table as JSON-ready lists.

    Parameters
    ----------
    prompt_table : dict of str to ndarray
        :attr:`~sara_trl.allocation.StepResult.prompt_table` (``(P,)`` arrays ``prompt_id``, ``n``, ``s``,
        ``fate``; other keys are dropped).
    carried_in : int
        ``StepStats.carried_in``: the leading rows carried in from the previous step.

    Raises
    ------
    ValueError
        ``carried_in`` outside ``[0, P]``.
    """
    out = {key: [int(v) for v in np.asarray(prompt_table[key]).tolist()] for key in ("prompt_id", "n", "s", "fate")}
    if not 0 <= int(carried_in) <= len(out["prompt_id"]):
        raise ValueError(f"carried_in={carried_in} but the step has {len(out['prompt_id'])} prompts")
    out["carried_in"] = int(carried_in)
    return out


def new_outcomes(tables: list[dict]) -> list[list[tuple[int, int, int, int, bool]]]:
    """Per step, per row: ``(prompt_id, new n, new s, fate, drawn)`` with a carried row's outcomes from the steps
    before subtracted (``drawn`` is False for a carried row).

    The carried-in rows of a step are the previous step's surplus and active rows (fates 1 and 3), in their order
    (``carry_over``); a prompt may have several rows in one step (streaming forgets a decided prompt, which can be
    drawn again in the same step, and a pool smaller than a step's draws repeats prompts), so rows are matched by
    position, not by id.

    Raises
    ------
    ValueError
        Carried rows that are not the previous step's surplus and active rows, or that end with fewer outcomes than
        they were carried with (the tables are not consecutive steps of one run).
    """
    out, prev = [], []
    for t in tables:
        c = t["carried_in"]
        if c > len(prev) or [r[0] for r in prev[:c]] != list(t["prompt_id"][:c]):
            raise ValueError(f"the {c} carried-in rows {list(t['prompt_id'][:c])} are not the previous step's "
                             f"surplus and active prompts {[r[0] for r in prev]}")
        rows = []
        for i, (pid, n, s, fate) in enumerate(zip(t["prompt_id"], t["n"], t["s"], t["fate"])):
            n0, s0 = (prev[i][1], prev[i][2]) if i < c else (0, 0)
            if n < n0 or s < s0:
                raise ValueError(f"prompt {pid} carried in with {n0} outcomes ({s0} successes) ends with {n} ({s})")
            rows.append((int(pid), int(n - n0), int(s - s0), int(fate), i >= c))
        out.append(rows)
        prev = [(pid, n, s) for pid, n, s, fate in zip(t["prompt_id"], t["n"], t["s"], t["fate"]) if fate in (1, 3)]
    return out


def pooled_outcomes(tables: list[dict]) -> dict[int, tuple[int, int]]:
    """``{prompt_id: (outcomes, successes)}`` summed over a run's steps (each scored rollout once)."""
    pooled: dict[int, list[int]] = {}
    for rows in new_outcomes(tables):
        for pid, n, s, _, _ in rows:
            acc = pooled.setdefault(pid, [0, 0])
            acc[0] += n
            acc[1] += s
    return {pid: (n, s) for pid, (n, s) in pooled.items()}


def never_mixed(pooled: dict[int, tuple[int, int]]) -> set[int]:
    """Prompt ids whose pooled outcomes (at least one) are all successes or all failures."""
    return {pid for pid, (n, s) in pooled.items() if n > 0 and (s == 0 or s == n)}


def draw_shares(tables: list[dict], never: set[int]) -> dict:
    """Draws and new outcomes of a run, and the shares of them on the prompts in ``never``.

    Returns
    -------
    dict
        ``draws``, ``draws_never``, ``draw_share`` (draws_never / draws, NaN without draws), ``outcomes``,
        ``outcomes_never``, ``outcome_share``.
    """
    d = dn = o = on = 0
    for rows in new_outcomes(tables):
        for pid, n, _, _, drawn in rows:
            hit = pid in never
            d += drawn
            dn += drawn and hit
            o += n
            on += n if hit else 0
    return {"draws": d, "draws_never": dn, "draw_share": dn / d if d else float("nan"),
            "outcomes": o, "outcomes_never": on, "outcome_share": on / o if o else float("nan")}


def trained_success(tables: list[dict]) -> dict:
    """The trained groups of a run (fate 0): how many, and the mean of their success rates ``s / n`` (a carried
    prompt's group counts its outcomes from every step it ran in). NaN without a trained group."""
    rates = [s / n for t in tables for n, s, f in zip(t["n"], t["s"], t["fate"]) if f == 0 and n > 0]
    return {"groups": len(rates), "success": float(np.mean(rates)) if rates else float("nan")}


def draws_per_prompt(tables: list[dict], num_prompts: int) -> np.ndarray:
    """``(num_prompts,)`` int: fresh draws of each prompt id over the run.

    Raises
    ------
    ValueError
        A prompt id outside ``[0, num_prompts)``.
    """
    counts = np.zeros(num_prompts, np.int64)
    for rows in new_outcomes(tables):
        for pid, _, _, _, drawn in rows:
            if not 0 <= pid < num_prompts:
                raise ValueError(f"prompt id {pid} outside the {num_prompts} prompts")
            counts[pid] += drawn
    return counts


def repeats_in_step(tables: list[dict]) -> int:
    """Draws (rows not carried in) of a prompt that already had a row earlier in the same step."""
    total = 0
    for t in tables:
        seen = set(t["prompt_id"][: t["carried_in"]])
        for pid in t["prompt_id"][t["carried_in"]:]:
            total += pid in seen
            seen.add(pid)
    return total
