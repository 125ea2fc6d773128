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

Fast answers. A config class may be named by a string (``"sara_trl:SaraConfig"``) instead of the class: the command
line is then checked first against a preview of its flags (:mod:`sara_trl._cli_preview`) that imports neither torch
nor TRL, so ``--help``, an unknown flag, a bad SARA value, a bad allocation setting and the script's own checks
(``preflight``) answer in about a second instead of after the 10-30 s of importing torch and TRL; the real class is
imported only for a command line that passed them. ``--help`` lists the script's flags first, then SARA's, then
TRL's and transformers' (one help group each).

Console commands (``[project.scripts]`` in ``pyproject.toml``): ``sara-quickstart`` (:func:`quickstart_command`) and
``sara-evaluate`` (:func:`evaluate_command`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from transformers import HfArgumentParser  # torch-free: transformers loads its trainer classes lazily

from sara_trl._cli_preview import PreviewUnavailable, field_groups, preview_for

__all__ = ["ArgumentParser", "evaluate_command", "parse_args", "plural", "quickstart_command", "suggest_flag"]

_HELP_HINT = "--help lists every flag"
_SHORT_USAGE_ABOVE = 40  # flags; a longer parser prints a one-line usage instead of every flag twice


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

    def _add_dataclass_arguments(self, dtype) -> None:
        """As transformers does, except that a config built on other packages' configs (``SaraConfig`` on TRL's
        ``GRPOConfig`` on transformers' ``TrainingArguments``) gets one help group per package, its own first."""
        groups = field_groups(dtype) if not hasattr(dtype, "_argument_group_name") else None
        if groups is None:
            super()._add_dataclass_arguments(dtype)
            return
        from typing import get_type_hints

        hints = get_type_hints(dtype)
        fields = {f.name: f for f in dataclasses.fields(dtype) if f.init}
        for title, names in groups:
            group = self.add_argument_group(title)
            for name in names:
                fields[name].type = hints[name]
                self._parse_dataclass_field(group, fields[name])

    def shorten_usage(self) -> None:
        """Use a one-line usage (``PROG [--flag VALUE ...]``) when the parser has many flags: argparse's default
        repeats every flag in the usage before the help lists them."""
        if len(self._actions) > _SHORT_USAGE_ABOVE:
            self.usage = "%(prog)s [--flag VALUE ...]"


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


def _console_prog(prog: str | None) -> str | None:
    """The name a console command was started as (``sara-evaluate``), which errors should show, else ``prog``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("sara-") else prog


def _resolve(dtype: Any) -> Any:
    """A dataclass, or the one a ``"module:Class"`` string names (imported here)."""
    if isinstance(dtype, str):
        module, _, name = dtype.partition(":")
        return getattr(importlib.import_module(module), name)
    return dtype


def _fold(err: BaseException) -> str:
    return " ".join(str(err).split())


def _instantiate(parser: ArgumentParser, dtype: type, values: dict[str, Any]) -> Any:
    keys = {f.name for f in dataclasses.fields(dtype) if f.init}
    try:
        return dtype(**{key: value for key, value in values.items() if key in keys})
    except ValueError as err:  # a config's own validation (__post_init__): its message is the answer
        parser.error(f"invalid configuration: {_fold(err)}")


def _run_preflight(parser: ArgumentParser, preflight: Callable[[Any], None], namespace: Any) -> None:
    try:
        preflight(namespace)
    except (ValueError, OSError, ImportError) as err:
        parser.error(_fold(err))


def _preview_check(types_: list, args: list[str], kwargs: dict, defaults: dict | None,
                   preflight: Callable[[Any], None] | None) -> bool:
    """Check ``args`` against the torch-free preview of the flags (help, unknown flags, bad values, the allocation
    rules, ``preflight``); exits on a mistake. Returns True when the command line passed, False when the preview is
    unavailable (the real parser then does every check)."""
    try:
        previews = [preview_for(dtype) if isinstance(dtype, str) else None for dtype in types_]
    except PreviewUnavailable:
        return False
    parser = ArgumentParser(None, **kwargs)
    for dtype, preview in zip(types_, previews):
        if preview is None:
            parser._add_dataclass_arguments(dtype)
        else:
            preview.add_arguments(parser)
    parser.shorten_usage()
    if defaults:
        parser.set_defaults(**defaults)
    namespace, remaining = parser.parse_known_args(args)  # --help and bad values end here, inside argparse
    if remaining:
        parser.error(_unknown_message(remaining, parser.long_flags()))
    values = vars(namespace)
    for dtype, preview in zip(types_, previews):
        if preview is None:
            _instantiate(parser, dtype, values)
        else:
            try:
                preview.validate(values)
            except ValueError as err:
                parser.error(f"invalid configuration: {_fold(err)}")
    if preflight is not None:
        _run_preflight(parser, preflight, namespace)
    return True


def parse_args(
    dataclass_types: Any,
    argv: Sequence[str] | None = None,
    defaults: dict[str, Any] | None = None,
    prog: str | None = None,
    description: str | None = None,
    preflight: Callable[[Any], None] | None = None,
) -> tuple:
    """Command line -> one instance of each dataclass, or a one-line error and exit status 2.

    Parameters
    ----------
    dataclass_types : type, str, or a sequence of them
        A dataclass or several (e.g. ``(ScriptArguments, SaraConfig)``); every field becomes a ``--flag``, with
        ``metadata={"help": ...}`` as its help text. ``"sara_trl:SaraConfig"`` / ``"sara_trl:SaraRLOOConfig"``
        name a SARA config without importing it: the command line is then checked first without torch and TRL
        (see the module docstring), and the class is imported afterwards.
    argv : sequence of str, optional
        The arguments without the program name; None reads ``sys.argv[1:]``.
    defaults : dict, optional
        Field name -> default that replaces the dataclass default (a flag still overrides it).
    prog, description : str, optional
        Shown by ``--help`` and in error lines (``prog`` defaults to the script name; a ``sara-*`` console command
        shows its own name).
    preflight : callable, optional
        Called with the parsed :class:`argparse.Namespace` (every flag, defaults applied) before the real config
        classes are imported, for checks that need no model: a missing file, an uninstalled package, the Hub
        offline. A ``ValueError``, ``OSError`` or ``ImportError`` it raises ends the command with its message on
        one line (name the flag in it). Without a preview (every config given as a class) it runs after the
        real parse, before the instances are built.

    Returns
    -------
    tuple
        One instance per dataclass type, in the order given.

    Raises
    ------
    SystemExit
        Status 0 after ``--help``; status 2 after an unknown flag, a bad value, a ``ValueError`` from a
        dataclass's ``__post_init__``, or a preflight failure (each reported on one stderr line).
    """
    types_ = list(dataclass_types) if isinstance(dataclass_types, (list, tuple)) else [dataclass_types]
    prog = _console_prog(prog)
    kwargs = {key: value for key, value in (("prog", prog), ("description", description)) if value is not None}
    args = list(sys.argv[1:] if argv is None else argv)
    checked = any(isinstance(dtype, str) for dtype in types_) and _preview_check(types_, args, kwargs, defaults,
                                                                                 preflight)
    parser = ArgumentParser([_resolve(dtype) for dtype in types_], **kwargs)
    parser.shorten_usage()
    if defaults:
        parser.set_defaults(**defaults)
    namespace, remaining = parser.parse_known_args(args)  # bad values and --help end here, inside argparse
    if remaining:
        parser.error(_unknown_message(remaining, parser.long_flags()))
    if preflight is not None and not checked:
        _run_preflight(parser, preflight, namespace)
    try:
        return tuple(parser.parse_args_into_dataclasses(args=args, look_for_args_file=False))
    except ValueError as err:  # a config's own validation (__post_init__): its message is the answer
        parser.error(f"invalid configuration: {_fold(err)}")


def quickstart_command() -> int:
    """``sara-quickstart``: the offline CPU quickstart (:func:`sara_trl.quickstart.main`); exit status 0."""
    from sara_trl.quickstart import main

    main(sys.argv[1:])
    return 0


def evaluate_command() -> int:
    """``sara-evaluate``: ``python -m sara_trl.evaluate`` (:func:`sara_trl.evaluate.main`); exit status 0."""
    from sara_trl.evaluate import main

    main(sys.argv[1:])
    return 0


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
