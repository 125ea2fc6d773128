"""ARCHITECTURE.md's dependency table, enforced: every ``import`` of every module in ``src/sara_trl`` (read with
``ast``, module level and inside functions alike) stays within what its package's row allows; no two modules import
each other in a circle at import time; and each module imports cleanly as the first ``sara_trl`` module of a fresh
interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "sara_trl"

# ARCHITECTURE.md, "imports from sara_trl": the sara_trl packages each package may import (besides itself).
ALLOWED = {
    "sara_trl.allocation": set(),
    "sara_trl.rewards": set(),
    "sara_trl.data": {"sara_trl.rewards"},
    "sara_trl.trainer": {"sara_trl.allocation", "sara_trl.utils"},
    "sara_trl.evaluate": {"sara_trl.data", "sara_trl.rewards", "sara_trl.utils", "sara_trl.cli"},
    "sara_trl.utils": set(),
}
# ARCHITECTURE.md, "must not import" beyond sara_trl: the allocation core is torch-free (numpy, scipy only).
ALLOCATION_THIRD_PARTY = {"numpy", "scipy"}


@dataclass(frozen=True)
class Import:
    """One import statement of a module: what it names, where, and whether it runs when the module is imported."""

    module: str  # the importing module
    target: str  # the imported module (a submodule when ``from package import submodule``)
    line: int
    at_import: bool  # module level (not inside a function, not under ``if TYPE_CHECKING``)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, at_import: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, False)
        elif isinstance(child, ast.If) and _is_type_checking(child):
            yield from _walk(child, False)
        else:
            yield child, at_import
            yield from _walk(child, at_import)


def imports_of(module: str) -> list[Import]:
    """Every import of ``module``, relative imports resolved; ``from package import name`` names the submodule
    ``package.name`` when there is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node, at_import in _walk(ast.parse(path.read_text(encoding="utf-8")), True):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno, at_import) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append(Import(module, sub if sub in MODULES else source, node.lineno, at_import))
    return found


def owner(module: str) -> str | None:
    """The row of the table a ``sara_trl`` module falls under (None: ``sara_trl`` itself, ``cli``, ``quickstart``, the
    CLI preview, which may import everything)."""
    for package in ALLOWED:
        if module == package or module.startswith(package + "."):
            return package
    return None


def test_the_scan_sees_every_package_and_relative_imports():
    assert {owner(m) for m in MODULES} >= set(ALLOWED)
    targets = {i.target for i in imports_of("sara_trl.rewards.math_verifier")}
    assert {"sara_trl.rewards.pool", "sara_trl.rewards.extract"} <= targets


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_its_row_allows(package):
    bad = []
    for module in (m for m in MODULES if owner(m) == package):
        for imp in imports_of(module):
            if not imp.target.startswith("sara_trl"):
                continue
            target = owner(imp.target) or imp.target
            if target != package and target not in ALLOWED[package]:
                bad.append(f"{module}:{imp.line} imports {imp.target}")
    assert not bad, (f"{package} may import {sorted(ALLOWED[package]) or 'no other sara_trl package'}:\n"
                     + "\n".join(sorted(set(bad))))


def test_allocation_imports_numpy_scipy_and_the_standard_library_only():
    bad = []
    for module in (m for m in MODULES if owner(m) == "sara_trl.allocation"):
        for imp in imports_of(module):
            top = imp.target.partition(".")[0]
            if top != "sara_trl" and top not in sys.stdlib_module_names and top not in ALLOCATION_THIRD_PARTY:
                bad.append(f"{module}:{imp.line} imports {imp.target}")
    assert not bad, "sara_trl.allocation is torch-free (numpy, scipy only):\n" + "\n".join(sorted(set(bad)))


def _import_graph() -> dict[str, set[str]]:
    """Import-time edges between sara_trl modules. The allocation package counts as one node: the circle inside it
    (config <-> strategies <-> streaming) is another change's to break."""

    def node(module: str) -> str:
        return "sara_trl.allocation" if owner(module) == "sara_trl.allocation" else module

    graph: dict[str, set[str]] = {}
    for module in MODULES:
        edges = graph.setdefault(node(module), set())
        for imp in imports_of(module):
            if imp.at_import and imp.target in MODULES and node(imp.target) != node(module):
                edges.add(node(imp.target))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_two_modules_import_each_other_in_a_circle():
    graph = _import_graph()
    assert graph["sara_trl.trainer.mixin"] >= {"sara_trl.trainer.collect", "sara_trl.trainer.replay"}  # edges seen
    # a package's __init__ importing its own submodules is the one legitimate way round (they never import it back)
    cycles = _cycles(graph)
    assert not cycles, f"import circles: {cycles}"


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each sara_trl module (of the allocation core: the package) as the first sara_trl module imported: a circle
    would fail for the module entered first. One subprocess; torch, TRL and the other libraries are imported once, and
    every sara_trl module is dropped from ``sys.modules`` before the next one is imported."""
    names = sorted(m for m in MODULES if owner(m) != "sara_trl.allocation" or m == "sara_trl.allocation")
    script = f"""
import importlib, sys, traceback
for lib in ("numpy", "scipy", "torch", "transformers", "datasets", "accelerate", "trl", "tqdm"):
    try:
        importlib.import_module(lib)
    except ImportError:
        pass
failed = []
for name in {names!r}:
    for loaded in [m for m in sys.modules if m == "sara_trl" or m.startswith("sara_trl.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ":\\n" + traceback.format_exc(limit=3))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def test_importing_the_trainer_installs_no_warnings_filter():
    """No import-time global side effect: the filter for TRL's calls of renamed transformers methods is installed when
    a SARA trainer is constructed, not when sara_trl.trainer is imported."""
    script = ("import warnings, sara_trl.trainer; print(sum('gradient_checkpointing' in getattr(f[1], 'pattern', '')"
              " for f in warnings.filters))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "0"


# ------------------------------------------------------------------------------------------------ the port to TRL
PORT = PACKAGE / "trainer" / "trl"


def trl_private_members() -> set[str]:
    """Every private member of TRL's trainers: the ``_x`` names their classes have (TRL's and transformers'
    ``Trainer`` methods and class attributes), the ``self._x`` attributes their sources assign (instance state
    such as ``_metrics``), and those of TRL's vLLM generation helper."""
    import inspect

    import transformers
    from trl import GRPOTrainer, RLOOTrainer
    from trl.generation import vllm_generation
    from trl.trainer import base_trainer

    names = {name for cls in (GRPOTrainer, RLOOTrainer) for name in dir(cls)
             if name.startswith("_") and not name.startswith("__")}
    sources = [inspect.getfile(GRPOTrainer), inspect.getfile(RLOOTrainer), inspect.getfile(transformers.Trainer),
               base_trainer.__file__, vllm_generation.__file__]
    for source in sources:
        for node in ast.walk(ast.parse(Path(source).read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                names.add(node.attr)
    return names


def private_trl_uses(path: Path, names: set[str]) -> list[str]:
    """``line: name`` of every attribute access (``x._tokenizer``) and every ``getattr``/``setattr``/``hasattr`` by
    name (``getattr(x, "_is_vlm")``) of a name in ``names`` in the file at ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{node.lineno}: {node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            found.append(f"{node.lineno}: {node.args[1].value}")
    return found


def test_only_the_port_names_a_private_trl_member():
    """ARCHITECTURE.md, "The port to TRL": outside ``sara_trl/trainer/trl/`` no module reaches a private member of
    TRL's trainers; what SARA needs of them is an operation of the port."""
    names = trl_private_members()
    assert {"_tokenizer", "_metrics", "_generate_single_turn", "_calculate_rewards", "_tool_call_loop",
            "_environment_pool", "_last_loaded_step", "_get_output_dir"} <= names  # the scan sees TRL's insides
    offenders = {str(path.relative_to(SRC)): uses for path in sorted(PACKAGE.rglob("*.py"))
                 if PORT not in path.parents and (uses := private_trl_uses(path, names))}
    assert offenders == {}
    assert private_trl_uses(PORT / "v1_16.py", names)  # the rule would see them there
