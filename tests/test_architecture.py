"""The house's import rules, read from the source with ``ast`` (nothing is imported).

1. Layers: ``train -> memgym_env -> membuilder``; an import never runs back up.
2. No cycle between modules; an import inside a function counts as much as one at the top.
3. No folder imports a folder that imports it back.
4. Our own modules and the standard library are imported at the top of a module. An import inside a
   function is for a heavy optional library (torch, transformers, vllm, ...), so that importing
   ``memgym_env`` or running ``memgym --help`` stays cheap.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("membuilder", "memgym_env", "train")  # a module may import its own layer and the ones before it

# (importing module, imported module) -> why it is imported inside a function.
IN_FUNCTION_ALLOWED: dict[tuple[str, str], str] = {
    ("memgym_env.serving.env_app", "memgym_env.serving.openenv_env"):
        "openenv_env subclasses openenv-core's types as it loads, and openenv-core is an optional extra",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "membuilder.llm.registry"
    path: Path  # its file, relative to the root
    line: int
    target: str  # ours: the deepest module of ours it names; otherwise the name as written
    in_function: bool

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.module})"


def module_files(root: Path) -> dict[str, Path]:
    """{dotted module name: file relative to root} for every module of the three layers."""
    out = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = rel
    return out


def _ours(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of ours that ``name`` names (``a.b.func`` -> ``a.b``), or None."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _function_nodes(tree: ast.AST) -> set[int]:
    """ids of the import statements that sit inside a function (at any depth)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(sub) for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom))}
    return inside


def read_imports(root: Path) -> tuple[dict[str, Path], list[Import]]:
    """Every import statement of every module, with relative imports and ``from pkg import submodule`` resolved."""
    modules = module_files(root)
    found = []
    for module, rel in modules.items():
        tree = ast.parse((root / rel).read_text(encoding="utf-8"), filename=str(rel))
        package = module if rel.name == "__init__.py" else module.rpartition(".")[0]
        inside = _function_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                # `from pkg import submodule` imports the submodule; `from module import name` the module
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for name in dict.fromkeys(names):
                found.append(Import(module, rel, node.lineno, _ours(name, modules) or name, id(node) in inside))
    return modules, sorted(found, key=lambda i: (i.path.as_posix(), i.line))


def _layer(name: str) -> int | None:
    top = name.partition(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def upward_imports(imports: list[Import]) -> list[str]:
    """Imports of a higher layer than the importer's own."""
    return [f"{i.where} imports {i.target}: {i.module.partition('.')[0]} may not import "
            f"{i.target.partition('.')[0]} (layers run {' -> '.join(reversed(LAYERS))})"
            for i in imports if _layer(i.target) is not None and _layer(i.target) > _layer(i.module)]


def _graph(imports: list[Import], modules: dict[str, Path]) -> dict[str, dict[str, Import]]:
    """module -> {imported module of ours -> the first import statement that imports it}."""
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for i in imports:
        if i.target in modules and i.target != i.module:
            graph[i.module].setdefault(i.target, i)
    return graph


def _strongly_connected(graph: dict[str, dict[str, Import]], nodes) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def _a_cycle(graph: dict[str, dict[str, Import]], component: list[str]) -> list[Import]:
    """One cycle through the component's first module, as the import statements that close it."""
    members, start = set(component), component[0]
    paths = {start: []}
    frontier = [start]
    while frontier:  # breadth first: the shortest way back to the start
        nxt = []
        for node in frontier:
            for target, imp in sorted(graph.get(node, {}).items()):
                if target == start:
                    return paths[node] + [imp]
                if target in members and target not in paths:
                    paths[target] = paths[node] + [imp]
                    nxt.append(target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {component}")


def module_cycles(imports: list[Import], modules: dict[str, Path]) -> list[str]:
    graph = _graph(imports, modules)
    out = []
    for component in _strongly_connected(graph, modules):
        steps = " -> ".join(f"{i.target} ({i.path}:{i.line})" for i in _a_cycle(graph, component))
        out.append(f"import cycle among {', '.join(component)}: {component[0]} -> {steps}")
    return out


def folder_circles(imports: list[Import], modules: dict[str, Path]) -> list[str]:
    """Pairs of folders (package directories) each of which imports the other."""
    def folder(module: str) -> str:
        return modules[module].parent.as_posix()

    between: dict[tuple[str, str], Import] = {}
    for i in imports:
        if i.target in modules and folder(i.module) != folder(i.target):
            between.setdefault((folder(i.module), folder(i.target)), i)
    return [f"folders {a}/ and {b}/ import each other: {i.where} imports {i.target}, "
            f"{back.where} imports {back.target}"
            for (a, b), i in sorted(between.items()) if a < b and (back := between.get((b, a)))]


def function_imports(imports: list[Import], allowed: dict[tuple[str, str], str]) -> list[str]:
    """Imports of our own modules or of the standard library inside a function, less the allowed ones."""
    def ours_or_stdlib(name: str) -> bool:
        top = name.partition(".")[0]
        return top in LAYERS or top in sys.stdlib_module_names

    return [f"{i.where} imports {i.target} inside a function; import it at the top of the module"
            for i in imports if i.in_function and ours_or_stdlib(i.target) and (i.module, i.target) not in allowed]


def _problems(found: list[str]) -> str:
    return f"{len(found)} found:\n" + "\n".join(found)


def test_no_import_runs_up_the_layers():
    _, imports = read_imports(ROOT)
    assert not (found := upward_imports(imports)), _problems(found)


def test_no_two_modules_import_each_other_in_a_circle():
    modules, imports = read_imports(ROOT)
    assert not (found := module_cycles(imports, modules)), _problems(found)


def test_no_folder_imports_a_folder_that_imports_it_back():
    modules, imports = read_imports(ROOT)
    assert not (found := folder_circles(imports, modules)), _problems(found)


def test_our_modules_and_the_standard_library_are_imported_at_the_top():
    _, imports = read_imports(ROOT)
    assert not (found := function_imports(imports, IN_FUNCTION_ALLOWED)), _problems(found)


def test_every_allowed_function_import_still_exists():
    _, imports = read_imports(ROOT)
    present = {(i.module, i.target) for i in imports if i.in_function}
    assert not (stale := sorted(set(IN_FUNCTION_ALLOWED) - present)), f"allowed but gone, drop them: {stale}"


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checks_find_what_is_planted_in_a_small_house(tmp_path):
    _plant(tmp_path, {
        "membuilder/__init__.py": "",
        "membuilder/llm/__init__.py": "",
        # a circle through a relative import and through `from pkg import submodule` inside a function
        "membuilder/llm/base.py": "from . import registry\n",
        "membuilder/llm/registry.py": "def load():\n    from membuilder.llm import base\n    import json\n",
        # the folders membuilder/llm and membuilder/memory import each other, the modules do not circle
        "membuilder/memory/__init__.py": "",
        "membuilder/memory/bank.py": "from membuilder.llm.base import X\n",
        "membuilder/llm/embed.py": "import membuilder.memory.store\n",
        "membuilder/memory/store.py": "",
        # a step up the layers
        "memgym_env/__init__.py": "",
        "memgym_env/env.py": "import membuilder.llm\n",
        "train/__init__.py": "",
        "membuilder/reward.py": "from train import sft\n",
        "train/sft.py": "def main():\n    import torch\n",
    })
    modules, imports = read_imports(tmp_path)

    assert module_cycles(imports, modules) == [
        "import cycle among membuilder.llm.base, membuilder.llm.registry: membuilder.llm.base -> "
        "membuilder.llm.registry (membuilder/llm/base.py:1) -> membuilder.llm.base (membuilder/llm/registry.py:2)"]
    assert upward_imports(imports) == [
        "membuilder/reward.py:1 (membuilder.reward) imports train.sft: membuilder may not import train "
        "(layers run train -> memgym_env -> membuilder)"]
    [circle] = folder_circles(imports, modules)
    assert circle.startswith("folders membuilder/llm/ and membuilder/memory/ import each other")
    assert function_imports(imports, {}) == [
        "membuilder/llm/registry.py:2 (membuilder.llm.registry) imports membuilder.llm.base inside a function; "
        "import it at the top of the module",
        "membuilder/llm/registry.py:3 (membuilder.llm.registry) imports json inside a function; "
        "import it at the top of the module"]  # torch, a heavy optional library, may wait for its function
    assert function_imports(imports, {("membuilder.llm.registry", "json"): "a reason"}) == [
        "membuilder/llm/registry.py:2 (membuilder.llm.registry) imports membuilder.llm.base inside a function; "
        "import it at the top of the module"]
