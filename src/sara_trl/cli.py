"""Command-line parsing shared by every entry point: dataclass fields as flags, mistakes answered in one line.

Every script of the project (``examples/*.py``, ``python -m sara_trl.evaluate``) reads its flags with
:func:`parse_args`, a thin layer over :class:`transformers.HfArgumentParser` that changes only what happens on a
mistake:

* an unknown flag (``--alocator dynamic_sampling``) ends with one line naming it and the closest valid flag
  (``difflib``), not a Python traceback;
* a flag is never matched by its prefix (``--max_step 1`` is rejected, not read as ``--max_steps``): argparse's
  ``allow_abbrev=False``;
* a bad value (``--allocator foo``, ``--max_steps x``) prints the error line only, without the full usage (several
  hundred lines for a TRL config); ``--help`` still lists every flag;
* a value the config's own validation rejects (a ``ValueError`` raised in a dataclass ``__post_init__``, e.g.
  ``--num_generations 0``) ends with its message on one line.

Each of these exits with status 2 (argparse's status for a usage error) and writes to stderr.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from transformers import HfArgumentParser

__all__ = ["ArgumentParser", "parse_args", "plural", "suggest_flag"]

_HELP_HINT = "--help lists every flag"


class ArgumentParser(HfArgumentParser):
    """:class:`transformers.HfArgumentParser` with prefix matching off and one-line errors (no usage dump).

    Parameters
    ----------
    dataclass_types : type or sequence of types, optional
        The dataclasses whose fields become flags (as for ``HfArgumentParser``).
    **kwargs
        Passed to :class:`argparse.ArgumentParser` (``prog``, ``description``, ...); ``allow_abbrev`` is always
        False.
    """

    def __init__(self, dataclass_types: Any = None, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(dataclass_types, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (--help lists every flag)`` to stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} ({_HELP_HINT})\n")

    def long_flags(self) -> list[str]:
        """Every ``--flag`` this parser accepts (both spellings, ``--max_steps`` and ``--max-steps``)."""
        return [flag for action in self._actions for flag in action.option_strings if flag.startswith("--")]


def suggest_flag(flag: str, valid: Iterable[str]) -> str | None:
    """The valid flag closest to ``flag`` (``difflib`` similarity >= 0.6), or None when nothing is close.

    Parameters
    ----------
    flag : str
        What the user typed; ``--name=value`` is compared by its ``--name`` part.
    valid : iterable of str
        The flags the parser accepts.

    Returns
    -------
    str or None
        E.g. ``suggest_flag("--alocator", ["--allocator", "--n0"])`` is ``"--allocator"``.
    """
    name = flag.split("=", 1)[0]
    matches = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_message(remaining: Sequence[str], valid: list[str]) -> str:
    flags = [token for token in remaining if token.startswith("-")]
    if not flags:  # only stray values, e.g. a value given twice
        return f"unexpected argument(s) {' '.join(remaining)!s}"
    parts = []
    for flag in flags:
        close = suggest_flag(flag, valid)
        name = flag.split("=", 1)[0]
        parts.append(f"{name} (did you mean {close}?)" if close else name)
    noun = "unknown flag" if len(parts) == 1 else "unknown flags"
    return f"{noun} {', '.join(parts)}"


def parse_args(
    dataclass_types: Any,
    argv: Sequence[str] | None = None,
    defaults: dict[str, Any] | None = None,
    prog: str | None = None,
    description: str | None = None,
) -> tuple:
    """Command line -> one instance of each dataclass, or a one-line error and exit status 2.

    Parameters
    ----------
    dataclass_types : type or sequence of types
        A dataclass or several (e.g. ``(ScriptArguments, SaraConfig)``); every field becomes a ``--flag``, with
        ``metadata={"help": ...}`` as its help text.
    argv : sequence of str, optional
        The arguments without the program name; None reads ``sys.argv[1:]``.
    defaults : dict, optional
        Field name -> default that replaces the dataclass default (a flag still overrides it).
    prog, description : str, optional
        Shown by ``--help`` and in error lines (``prog`` defaults to the script name).

    Returns
    -------
    tuple
        One instance per dataclass type, in the order given.

    Raises
    ------
    SystemExit
        Status 0 after ``--help``; status 2 after an unknown flag, a bad value, or a ``ValueError`` from a
        dataclass's ``__post_init__`` (each reported on one stderr line).
    """
    kwargs = {key: value for key, value in (("prog", prog), ("description", description)) if value is not None}
    parser = ArgumentParser(dataclass_types, **kwargs)
    if defaults:
        parser.set_defaults(**defaults)
    args = list(sys.argv[1:] if argv is None else argv)
    _, remaining = parser.parse_known_args(args)  # bad values and --help end here, inside argparse
    if remaining:
        parser.error(_unknown_message(remaining, parser.long_flags()))
    try:
        return tuple(parser.parse_args_into_dataclasses(args=args, look_for_args_file=False))
    except ValueError as err:  # a config's own validation (__post_init__): its message is the answer
        message = " ".join(str(err).split())
        parser.error(f"invalid configuration: {message}")


def plural(count: int | float, noun: str, plural_form: str | None = None) -> str:
    """``count`` with its noun in the right number, for messages.

    Parameters
    ----------
    count : int or float
        The number shown.
    noun : str
        The singular, e.g. ``"step"``.
    plural_form : str, optional
        The plural when it is not ``noun + "s"`` (e.g. ``"batches"``).

    Returns
    -------
    str
        ``plural(1, "step")`` is ``"1 step"``, ``plural(4, "step")`` is ``"4 steps"``.
    """
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"
