# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Write ``docs/configuration.md``, the reference of SARA's options, from the field metadata of ``SaraConfig``.

    python scripts/make_config_reference.py            # rewrite docs/configuration.md
    python scripts/make_config_reference.py --check    # exit 1 if docs/configuration.md is stale

Every row comes from a dataclass field of the trainer configs (``sara_trl.trainer.config``: the allocation options
derived from :class:`sara_trl.allocation.AllocationConfig`, plus the trainer's own): its name, type, default, choices
and ``help`` text, the same text ``--help`` prints. The fields are read torch-free, through the preview the command
line uses (:mod:`sara_trl._cli_preview`), or from the real module when the preview is unavailable. Only the grouping
into sections is written here; a field no section names is listed under "Other options", so a new field is never
left out. ``tests/test_docs.py`` fails when the committed page differs from what this script writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"

#: (section title, anchor text under it, field names in the order shown)
SECTIONS = (
    ("The paper's options", "Paper §3, Alg. 1; defaults from App. D. With these at their defaults (and every option "
     "of the next sections at its default, with `collection=\"rounds\"`) the allocator is the paper's SARA, decision "
     "for decision; the default `collection=\"auto\"` streams SARA on colocated vLLM.",
     ("allocator", "n0", "tau_low", "commit_min", "prior_alpha", "prior_beta", "budget_cap", "max_rounds",
      "round_increment", "continue_to_decision", "max_rollouts_per_round", "yield_decay", "refill_margin")),
    ("Success labels and the prompt stream", "How a rollout's rewards become the binary success SARA decides from "
     "([rewards.md](rewards.md)), how dynamic sampling keeps a group, and the seed of the fresh-prompt stream.",
     ("success_threshold", "success_reward_func", "ds_filter", "stream_seed")),
    ("Collection: rounds, streaming, carry-over", "How a step's rollouts reach the allocator "
     "([collection-modes.md](collection-modes.md)). The default `\"auto\"` picks the collection measured faster: "
     "streaming (beyond the paper) for SARA on colocated vLLM at tensor parallel size 1, the paper's rounds elsewhere.",
     ("collection", "streaming_max_in_flight", "streaming_reward_lag", "overlap_round_scoring", "streaming_speculate",
      "carry_over")),
    ("Beyond the paper: stopping rule, history, selection", "Off by default "
     "([allocation.md](allocation.md#beyond-the-paper); measured in "
     "[BEYOND_PAPER.md](../benchmarks/beyond_paper/BEYOND_PAPER.md)).",
     ("stopping_rule", "auto_prior", "auto_prior_decay", "auto_min_prompts", "auto_loss_cap", "cost_unit",
      "history_decay", "selection", "selection_pool", "selection_floor", "selection_seed")),
)


def sara_fields() -> type:
    """The dataclass of SARA's trainer fields, torch-free when the preview works."""
    try:
        from sara_trl._cli_preview import PreviewUnavailable, _sara_config_module

        try:
            ns = _sara_config_module()
            return ns["_SaraFields"]
        except PreviewUnavailable:
            pass
    except ImportError:  # pragma: no cover - the preview module is part of the package
        pass
    from sara_trl.trainer import config  # imports TRL and torch

    return config._SaraFields


def _type_name(tp) -> str:
    args = typing.get_args(tp)
    if args:
        return " or ".join("None" if a is type(None) else getattr(a, "__name__", str(a)) for a in args)
    return getattr(tp, "__name__", str(tp))


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _row(f: dataclasses.Field, hints: dict) -> str:
    kind = _type_name(hints[f.name])
    choices = f.metadata.get("choices")
    if choices:
        kind += ": " + ", ".join(f"`{c!r}`" for c in choices)
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    return f"| `{f.name}` | {kind} | `{default!r}` | {_cell(f.metadata.get('help', ''))} |"


def render() -> str:
    """The text of ``docs/configuration.md``."""
    cls = sara_fields()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    placed = [name for _, _, names in SECTIONS for name in names]
    unknown = [name for name in placed if name not in fields]
    if unknown:
        raise SystemExit(f"make_config_reference.py names fields SaraConfig does not have: {unknown}")
    sections = [(title, intro, [n for n in names if n in fields]) for title, intro, names in SECTIONS]
    rest = [name for name in fields if name not in placed]
    if rest:
        sections.append(("Other options", "Fields no section of `scripts/make_config_reference.py` names yet.", rest))
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python scripts/make_config_reference.py` from the field metadata of SaraConfig; do not "
        "edit by hand (tests/test_docs.py fails when this page is stale). -->",
        "",
        "`SaraConfig` (GRPO) and `SaraRLOOConfig` (RLOO) are TRL's `GRPOConfig` and `RLOOConfig` with the fields "
        "below added; every TRL field keeps its name, default and check. Each field is also a command-line flag of "
        "the examples and of `sara-quickstart` (`--n0 4`, `--collection streaming`), parsed by "
        "`transformers.HfArgumentParser`, and `--help` prints the same text as the *meaning* column. An invalid value "
        "or combination raises a `ValueError` naming the rule it breaks, when the config is built.",
        "",
        "B, the number of groups per generation batch, is `generation_batch_size / num_generations`, and k, the "
        "group size, is TRL's `num_generations` (`k` in the allocation core, `sara_trl.allocation.AllocationConfig`, "
        "whose other options have the names and values below).",
        "",
        "Contents: " + " · ".join(f"[{title}](#{_anchor(title)})" for title, _, _ in sections) + ". What the "
        "options cost and save, measured: [allocation.md](allocation.md) and [collection-modes.md]"
        "(collection-modes.md); rewards and thresholds: [rewards.md](rewards.md); the training loop around them: "
        "[training.md](training.md).",
        "",
    ]
    for title, intro, names in sections:
        lines += [f"## {title}", "", intro, "", "| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        lines += [_row(fields[name], hints) for name in names]
        lines.append("")
    return "\n".join(lines)


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return keep.replace(" ", "-")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check that docs/configuration.md is current")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            print(f"{args.out} is stale: run python scripts/make_config_reference.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
