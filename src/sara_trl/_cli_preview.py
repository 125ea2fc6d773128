"""The flags of ``SaraConfig`` / ``SaraRLOOConfig`` without importing torch, TRL or transformers' trainer.

:func:`sara_trl.cli.parse_args` answers ``--help`` and flag mistakes from this preview first, in about a second, and
imports the real config classes (torch and TRL, 10-30 s) only once the command line is known to be valid.

Two sources, neither of which imports torch:

* SARA's own fields: the module :mod:`sara_trl.trainer.config` is executed with a stand-in ``trl`` whose
  ``GRPOConfig`` and ``RLOOConfig`` are empty dataclasses, so its ``_SaraFields`` (every allocation option, derived
  from the torch-free :class:`sara_trl.allocation.AllocationConfig`, plus the trainer's own fields) and its checks
  are the real ones: nothing is copied. The module may import only ``trl``'s two config names, the standard library
  and torch-free ``sara_trl`` code; if it imports anything else the preview is skipped (the command still works,
  only slower).
* TRL's and transformers' fields (``GRPOConfig``/``RLOOConfig``, TRL's ``_BaseConfig``, ``TrainingArguments``):
  read from their source files with :mod:`ast` (name, annotation, literal default and help text), then turned into
  flags by the same :meth:`transformers.HfArgumentParser._parse_dataclass_field` the real parser uses. Annotations
  naming a class the reader does not know (``IntervalStrategy``, ``SchedulerType``) become ``str``: such values are
  checked by the real parser afterwards. When a source file or class is not where the supported TRL / transformers keep
  it, the preview is skipped.

The flags of the preview equal the real parser's (``tests/test_newcomer.py`` checks both configs).
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import enum
import functools
import importlib.util
import inspect
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Union

__all__ = ["PreviewUnavailable", "SaraPreview", "field_groups", "group_title", "preview_for"]

_PACKAGE_LABELS = {"sara_trl": "SARA", "trl": "TRL"}

# The config classes the preview can describe: SARA class -> (TRL base name, its source chain, base first). Each
# entry of a chain: (top-level package, file inside it, class name, the base class name it must declare).
_TRL_CHAINS = {
    "GRPOConfig": (("transformers", "training_args.py", "TrainingArguments", None),
                   ("trl", "trainer/base_config.py", "_BaseConfig", "TrainingArguments"),
                   ("trl", "trainer/grpo_config.py", "GRPOConfig", "_BaseConfig")),
    "RLOOConfig": (("transformers", "training_args.py", "TrainingArguments", None),
                   ("trl", "trainer/base_config.py", "_BaseConfig", "TrainingArguments"),
                   ("trl", "trainer/rloo_config.py", "RLOOConfig", "_BaseConfig")),
}
_SARA_CLASSES = {"SaraConfig": "GRPOConfig", "SaraRLOOConfig": "RLOOConfig"}


class PreviewUnavailable(Exception):
    """The preview cannot describe these flags exactly (the caller then parses with the real classes only)."""


# ---------------------------------------------------------------------------------------------------------------
# Help groups: shared by the preview and the real parser, so both list the flags in the same order.
# ---------------------------------------------------------------------------------------------------------------


def group_title(package: str, class_name: str) -> str:
    """Title of a help group: ``"SARA options (SaraConfig)"``, ``"TRL options (GRPOConfig)"``,
    ``"transformers options (TrainingArguments)"``."""
    return f"{_PACKAGE_LABELS.get(package, package)} options ({class_name})"


def _own_annotations(cls: type) -> dict:
    try:
        return inspect.get_annotations(cls)
    except Exception:  # pragma: no cover - a class without readable annotations declares no field
        return {}


def field_groups(dtype: type) -> list[tuple[str, list[str]]] | None:
    """The fields of dataclass ``dtype`` grouped by the package that declares them, most derived package first.

    A field belongs to the most derived class that declares it (so a TRL field overriding a transformers one is
    TRL's). For ``SaraConfig``: SARA's fields, then TRL's (``GRPOConfig``, ``_BaseConfig``), then transformers'
    (``TrainingArguments``). Within a group the fields keep their dataclass order.

    Returns
    -------
    list of (title, field names), or None
        None when every field comes from one package (the parser then lists them as transformers does).
    """
    mro = [cls for cls in dtype.__mro__ if dataclasses.is_dataclass(cls)]
    owners: dict[str, type] = {}
    for f in dataclasses.fields(dtype):
        if f.init:
            owners[f.name] = next((cls for cls in mro if f.name in _own_annotations(cls)), dtype)
    packages = []
    for cls in mro:
        package = cls.__module__.split(".")[0]
        if package not in packages and any(owner.__module__.split(".")[0] == package for owner in owners.values()):
            packages.append(package)
    if len(packages) < 2:
        return None
    groups = []
    for package in packages:
        public = next((cls.__name__ for cls in mro if cls.__module__.split(".")[0] == package
                       and not cls.__name__.startswith("_")), package)
        names = [name for name, owner in owners.items() if owner.__module__.split(".")[0] == package]
        groups.append((group_title(package, public), names))
    return groups


# ---------------------------------------------------------------------------------------------------------------
# SARA's fields: trainer/config.py executed against a stand-in `trl`.
# ---------------------------------------------------------------------------------------------------------------

_HEAVY = ("torch", "transformers", "trl", "vllm", "accelerate", "deepspeed", "peft")


def _stand_in_trl() -> types.ModuleType:
    trl = types.ModuleType("trl")
    trl.GRPOConfig = dataclasses.make_dataclass("GRPOConfig", [])
    trl.RLOOConfig = dataclasses.make_dataclass("RLOOConfig", [])
    return trl


@functools.lru_cache(maxsize=1)
def _sara_config_module() -> dict:
    """The namespace of ``sara_trl/trainer/config.py`` run with the stand-in ``trl`` (cached).

    Raises
    ------
    PreviewUnavailable
        The module imports something heavy besides ``from trl import GRPOConfig, RLOOConfig``, or fails to run.
    """
    import sara_trl

    path = Path(sara_trl.__file__).parent / "trainer" / "config.py"
    trl = _stand_in_trl()

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.split(".")[0]
        if level == 0 and name == "trl":
            return trl
        if level == 0 and top in _HEAVY:
            raise PreviewUnavailable(f"{path.name} imports {name}")
        return builtins.__import__(name, globals, locals, fromlist, level)

    # The module is loaded under a name of its own (never sara_trl.trainer.config, which stays the real one), with
    # builtins whose __import__ hands it the stand-in trl.
    spec = importlib.util.spec_from_file_location("sara_trl.trainer._config_preview", path)
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = dict(vars(builtins), __import__=guarded_import)
    namespace = vars(module)
    try:
        spec.loader.exec_module(module)
    except PreviewUnavailable:
        raise
    except Exception as err:  # an ImportError for another trl name, a refactored module, ...
        raise PreviewUnavailable(f"{path.name}: {type(err).__name__}: {err}") from None
    if not dataclasses.is_dataclass(namespace.get("_SaraFields")) or "_SaraArguments" not in namespace:
        raise PreviewUnavailable(f"{path.name} defines no _SaraFields / _SaraArguments")
    return namespace


# ---------------------------------------------------------------------------------------------------------------
# TRL's and transformers' fields: read from their source with `ast`.
# ---------------------------------------------------------------------------------------------------------------


class _Source(str):
    """A default the reader could not evaluate (``default=default_optim``): shown in ``--help`` as its source."""


class _TypeNames(dict):
    """Names an annotation may use; any other name (an enum, a config class) reads as ``str``."""

    def __missing__(self, key):
        return str


_TYPE_NAMES = {"Optional": Optional, "Union": Union, "Literal": Literal, "Any": Any, "list": list, "dict": dict,
               "tuple": tuple, "set": set, "int": int, "float": float, "bool": bool, "str": str, "None": None,
               "typing": typing}


def _type_of(node: ast.expr, names: dict) -> Any:
    """The value of an annotation's syntax tree: names looked up in ``names``, attributes, subscripts
    (``Optional[int]``, ``Literal["a", "b"]``), ``X | Y``, constants, tuples and lists; nothing is run as code.

    Raises
    ------
    ValueError
        Any other syntax (a call, an operator other than ``|``).
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_type_of(node.value, names), node.attr)
    if isinstance(node, ast.Subscript):
        index = node.slice
        args = (tuple(_type_of(e, names) for e in index.elts) if isinstance(index, ast.Tuple)
                else _type_of(index, names))
        return _type_of(node.value, names)[args]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_of(node.left, names) | _type_of(node.right, names)
    if isinstance(node, (ast.Tuple, ast.List)):
        values = [_type_of(e, names) for e in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    raise ValueError(f"unsupported annotation syntax: {ast.unparse(node)}")


def _annotation(node: ast.expr, names: dict) -> Any:
    try:
        value = _type_of(node, _TypeNames({**_TYPE_NAMES, **names}))
    except Exception:
        return str
    return value if value is not None else str


def _literal(node: ast.expr, constants: dict | None = None) -> Any:
    if constants and isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _Source(ast.unparse(node))


def _metadata(node: ast.expr) -> dict:
    """The literal entries of a ``metadata={...}`` dict (``help``, ``choices`` when literal, ...)."""
    if not isinstance(node, ast.Dict):
        return {}
    out = {}
    for key, value in zip(node.keys, node.values):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            item = _literal(value)
            if not isinstance(item, _Source):
                out[key.value] = item
    return out


def _factory(node: ast.expr):
    if isinstance(node, ast.Name) and node.id in ("list", "dict"):
        return list if node.id == "list" else dict
    if isinstance(node, ast.Lambda):
        value = _literal(node.body)
        if not isinstance(value, _Source):
            return lambda: value
    return None


def _static_field(node: ast.AnnAssign, names: dict, constants: dict) -> dataclasses.Field | None:
    """One ``name: type = field(...)`` line as a :class:`dataclasses.Field` (None for a ``ClassVar``, ``init=False``).

    ``names``: the enums the annotation may use; ``constants``: literal class attributes a default may name
    (TrainingArguments' ``default=default_optim``).
    """
    annotation = ast.unparse(node.annotation)
    if "ClassVar" in annotation or "InitVar" in annotation:
        return None
    default: Any = dataclasses.MISSING
    factory = None
    metadata: dict = {}
    value = node.value
    if value is None:
        pass
    elif (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))
          and (value.func.id if isinstance(value.func, ast.Name) else value.func.attr) == "field"):
        for keyword in value.keywords:
            if keyword.arg == "default":
                default = _literal(keyword.value, constants)
            elif keyword.arg == "default_factory":
                factory = _factory(keyword.value)
                if factory is None:
                    default = _Source(ast.unparse(keyword.value) + "()")
            elif keyword.arg == "metadata":
                metadata = _metadata(keyword.value)
            elif keyword.arg == "init" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False:
                return None
    else:
        default = _literal(value, constants)
    if factory is not None:
        result = dataclasses.field(default_factory=factory, metadata=metadata)
    else:
        result = dataclasses.field(default=default, metadata=metadata)
    result.name = node.target.id
    result.type = _annotation(node.annotation, names)
    return result


def _enum_class(node: ast.ClassDef) -> type | None:
    """``class X(ExplicitEnum): A = "a"`` as an :class:`enum.Enum` with the same values (None if not an enum)."""
    if not any(ast.unparse(base).endswith("Enum") for base in node.bases):
        return None
    members = [(target.id, statement.value.value) for statement in node.body if isinstance(statement, ast.Assign)
               for target in statement.targets if isinstance(target, ast.Name)
               and isinstance(statement.value, ast.Constant)]
    return enum.Enum(node.name, members) if members else None


def _class_constants(node: ast.ClassDef) -> dict:
    """Literal ``name = value`` assignments of a class body (inside ``if`` blocks too; the last one wins)."""
    constants = {}
    pending = list(node.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, ast.If):
            pending[:0] = statement.body + statement.orelse
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            value = _literal(statement.value)
            if not isinstance(value, _Source):
                constants[statement.targets[0].id] = value
    return constants


def _module_file(path: Path, level: int, module: str | None) -> Path | None:
    """The file a ``from <.module> import ...`` in ``path`` reads (relative imports only)."""
    if level == 0:
        return None
    base = path.parent
    for _ in range(level - 1):
        base = base.parent
    target = base.joinpath(*(module.split(".") if module else []))
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _enums(tree: ast.Module, path: Path, used: set[str]) -> dict:
    """The enums among ``used`` (names in the annotations) that a source file defines or imports (one
    relative-import hop): name -> :class:`enum.Enum`."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in used and (value := _enum_class(node)) is not None:
            found[node.name] = value
        elif isinstance(node, ast.ImportFrom) and any((a.asname or a.name) in used for a in node.names) \
                and (source := _module_file(path, node.level, node.module)):
            wanted = {alias.name: alias.asname or alias.name for alias in node.names if (alias.asname or alias.name)
                      in used}
            try:
                imported = ast.parse(source.read_text())
            except (OSError, SyntaxError):
                continue
            for other in imported.body:
                if isinstance(other, ast.ClassDef) and other.name in wanted \
                        and (value := _enum_class(other)) is not None:
                    found[wanted[other.name]] = value
    return found


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # a top-level name: finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise PreviewUnavailable(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _static_chain(base_name: str) -> tuple[tuple[str, str, dataclasses.Field], ...]:
    """``(package, public class, field)`` for every field of TRL's ``base_name`` config, in dataclass order.

    Raises
    ------
    PreviewUnavailable
        A source file or class is not where the chain expects it, or declares another base class.
    """
    merged: dict[str, tuple[str, str, dataclasses.Field]] = {}
    public = {}
    for package, relative, class_name, base in _TRL_CHAINS[base_name]:
        path = _package_dir(package) / relative
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError) as err:
            raise PreviewUnavailable(f"cannot read {path}: {err}") from None
        node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        if node is None:
            raise PreviewUnavailable(f"{path} defines no class {class_name}")
        bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
        if (base is None and bases) or (base is not None and bases != [base]):
            raise PreviewUnavailable(f"{class_name} derives from {bases}, expected {base or 'nothing'}")
        if not class_name.startswith("_"):
            public[package] = class_name
        used = {name.id for statement in node.body if isinstance(statement, ast.AnnAssign)
                for name in ast.walk(statement.annotation) if isinstance(name, ast.Name)}
        names, constants = _enums(tree, path, used - set(_TYPE_NAMES)), _class_constants(node)
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                f = _static_field(statement, names, constants)
                if f is not None:
                    merged[f.name] = (package, class_name, f)  # a redefinition keeps its place, as dataclasses do
    return tuple((package, public.get(package, name), f) for package, name, f in merged.values())


# ---------------------------------------------------------------------------------------------------------------
# The preview of one SARA config class.
# ---------------------------------------------------------------------------------------------------------------


class SaraPreview:
    """``SaraConfig`` or ``SaraRLOOConfig`` as flags, without importing torch or TRL.

    Parameters
    ----------
    class_name : {"SaraConfig", "SaraRLOOConfig"}
        The config the preview describes.

    Raises
    ------
    PreviewUnavailable
        The preview cannot describe that class exactly (see the module docstring).
    """

    def __init__(self, class_name: str):
        self.class_name = class_name
        self.namespace = _sara_config_module()
        self.sara_fields = self.namespace["_SaraFields"]
        self.trl_fields = _static_chain(_SARA_CLASSES[class_name])

    def add_arguments(self, parser) -> None:
        """Add every flag of the class to ``parser`` (a :class:`sara_trl.cli.ArgumentParser`), in help groups."""
        hints = typing.get_type_hints(self.sara_fields)
        group = parser.add_argument_group(group_title("sara_trl", self.class_name))
        for f in dataclasses.fields(self.sara_fields):
            f = copy.copy(f)  # the parser narrows f.type in place; the cached classes stay as they are
            f.type = hints[f.name]
            parser._parse_dataclass_field(group, f)
        titles: dict[str, str] = {}
        for package, public, _ in self.trl_fields:
            titles.setdefault(package, group_title(package, public))
        for package in reversed(titles):  # the most derived package's group first, as the real parser has it
            group = parser.add_argument_group(titles[package])
            for owner, _, f in self.trl_fields:
                if owner == package:
                    parser._parse_dataclass_field(group, copy.copy(f))

    def validate(self, values: dict) -> None:
        """Run the allocation checks of the real config on the parsed ``values`` (field name -> value).

        Only the checks that need no TRL code run here: the group size (``num_generations``), the ``collection``
        choice, and every :class:`~sara_trl.allocation.AllocationConfig` rule, each with the message
        the real config gives.

        Raises
        ------
        ValueError
            An invalid allocation setting (the real config would reject it with the same message).
        """
        namespace = self.namespace
        arguments = namespace["_SaraArguments"]
        error = namespace["AllocationConfigError"]
        config = type(self.class_name, (), {})()  # messages name the class as the real config does
        vars(config).update(values)
        try:
            arguments._check_group_size(config)
            arguments._check_collection(config)
            arguments._checked_allocation_config(config)  # the real config's message, for this class
        except error:
            raise
        except Exception:  # anything else (a value only the real config converts): left to the real config
            return


def preview_for(spec: str) -> SaraPreview:
    """The preview of a lazily named config (``"sara_trl:SaraConfig"``, ``"sara_trl.trainer:SaraRLOOConfig"``).

    Raises
    ------
    PreviewUnavailable
        ``spec`` names another class, or its preview cannot be built.
    """
    module, _, name = spec.partition(":")
    if module.split(".")[0] != "sara_trl" or name not in _SARA_CLASSES:
        raise PreviewUnavailable(f"no preview for {spec}")
    return SaraPreview(name)
