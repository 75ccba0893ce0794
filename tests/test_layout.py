"""The layout keeps its shape: layers that import only downwards, no import cycles, short modules, few top-level
entries, and inside each package no module importing one listed after it."""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT

MAX_MODULE_LINES = 500  # the developers' guide: ~400 lines per module, 500 at most
MAX_TOP_LEVEL_ENTRIES = 10  # drgrpo/: a handful of stages, not a flat folder of modules
PACKAGES = ("drgrpo", "rewards")
# Names that are a role each package has (its own keys, its printed report), the same on purpose; any other module
# name used twice is two ideas under one name (`family.py` for the keys and for their cost, once).
ROLE_NAMES = {"__init__.py", "arguments.py", "settings.py", "report.py"}


def layer_order() -> list[str]:
    """The layers, bottom first, as docs/architecture.md writes them once (`Layers, bottom first: a < b < ...`)."""
    match = re.search(r"Layers, bottom first: (.+)", (ROOT / "docs" / "architecture.md").read_text())
    assert match, "docs/architecture.md must state the layer order as 'Layers, bottom first: a < b < ...'"
    return [name.strip() for name in match.group(1).split("<")]


def module_files() -> dict[str, Path]:
    """Every module of drgrpo/ and rewards/ by dotted name (a package by its own name)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that `name` imports anywhere: at module level, inside functions, under TYPE_CHECKING."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" for alias in node.names]
            found.update(t if t in modules else base for t in targets)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    ours = set()
    for target in found:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            ours.add(target)
    return ours


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> str:
    """`rewards` for the reward library, else the subpackage of drgrpo/ (`drgrpo.algorithm.kl` -> `algorithm`)."""
    parts = module.split(".")
    return parts[0] if parts[0] == "rewards" else (parts[1] if len(parts) > 1 else "drgrpo")


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), each as a closed path."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_layer_order_names_every_subpackage_once():
    order = layer_order()
    subpackages = sorted(p.name for p in (ROOT / "drgrpo").iterdir() if (p / "__init__.py").is_file())
    assert sorted(order) == sorted([*subpackages, "rewards"]), (
        f"docs/architecture.md's layer line must name each drgrpo/ subpackage and rewards once: {order} vs "
        f"{subpackages}"
    )


def test_no_import_runs_up_a_layer():
    order = layer_order()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(module) in order
        and layer_of(target) in order
        and order.index(layer_of(target)) > order.index(layer_of(module))
    )
    assert not upward, f"Imports from a lower layer to a higher one ({' < '.join(order)}): {upward}"


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, f"Import cycles (modules importing each other, directly or through others): {cycles}"


def test_the_checks_find_what_they_look_for():
    # The two checks above pass only if they can fail: a cycle and an upward import made up here are both found.
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "drgrpo.core.errors" in graph["rewards.registry"]  # lazy and module-level imports are both seen
    assert "drgrpo.recipe.cli" in graph["drgrpo.recipe.preflight"]
    assert layer_of("drgrpo.algorithm.kl") == "algorithm" and layer_of("rewards.code.sandbox") == "rewards"


def test_the_tool_rollout_sits_below_the_rest_of_the_algorithm():
    """The multi-turn rollout (drgrpo/algorithm/rollout/) reads the sandbox's tool (rewards) and the metric names
    (observe), nothing else of the algorithm; the config and the trainer, the run and the evaluator read it."""
    order = layer_order()
    assert order.index("observe") < order.index("algorithm")
    graph = import_graph()
    rollout = {name: deps for name, deps in graph.items() if name.startswith("drgrpo.algorithm.rollout")}
    assert rollout, "drgrpo/algorithm/rollout/ has no modules"
    for name, deps in rollout.items():
        others = {d for d in deps if d.startswith("drgrpo.algorithm") and not d.startswith("drgrpo.algorithm.rollout")}
        assert not others, f"{name} imports {sorted(others)}: the rollout sits below the rest of the algorithm"
    assert "rewards.code.tool" in graph["drgrpo.algorithm.rollout.python_tool"]
    assert "drgrpo.algorithm.rollout.trl_rollout" in graph["drgrpo.algorithm.trainer"]
    assert "drgrpo.algorithm.rollout.arguments" in graph["drgrpo.algorithm.config"]
    assert "drgrpo.algorithm.rollout.trl_rollout" in graph["drgrpo.run.training"]


def test_drgrpo_has_few_top_level_entries_and_no_confusing_names():
    entries = [p.name for p in (ROOT / "drgrpo").iterdir() if p.name not in ("__init__.py", "__pycache__")]
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, f"drgrpo/ has {len(entries)} top-level entries: {sorted(entries)}"
    names = Counter(path.name for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    repeated = sorted(name for name, count in names.items() if count > 1 and name not in ROLE_NAMES)
    assert not repeated, f"Module names used twice in drgrpo/ and rewards/ (one name, one idea): {repeated}"


def test_no_module_is_too_long():
    long = {
        str(path.relative_to(ROOT)): n
        for folder in PACKAGES
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"Split these modules (one idea per module, at most {MAX_MODULE_LINES} lines): {long}"


def module_order(package: str) -> list[str]:
    """The package's modules in the order its `__init__` docstring lists them (`- `name`: ...` lines)."""
    return re.findall(r"^- `(\w+)`", importlib.import_module(package).__doc__ or "", flags=re.M)


def documented_packages() -> list[str]:
    """Every subpackage of drgrpo/ (and their subpackages): each lists its modules in import order."""
    return sorted(
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "drgrpo").rglob("__init__.py")
        if path.parent != ROOT / "drgrpo"
    )


@pytest.mark.parametrize("package", documented_packages())
def test_package_modules_import_only_earlier_ones(package):
    folder = ROOT / package.replace(".", "/")
    assert importlib.import_module(package).__doc__, f"{package}/__init__.py needs a docstring: what it holds"
    order = module_order(package)
    members = sorted(
        p.stem if p.is_file() else p.name
        for p in folder.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )
    assert sorted(order) == members, f"{package}.__init__ must list every module once, in import order: {members}"
    graph = import_graph()
    upward = {}
    for i, member in enumerate(order):
        later = {f"{package}.{m}" for m in order[i:]}
        imported = {
            f"{package}.{t[len(package) + 1 :].split('.')[0]}"
            for name, targets in graph.items()
            if name == f"{package}.{member}" or name.startswith(f"{package}.{member}.")
            for t in targets
            if t.startswith(package + ".")
        }
        if found := sorted(imported & later - {f"{package}.{member}"}):
            upward[member] = found
    assert not upward, f"In {package}, these modules import ones listed at or after them: {upward}"


def test_public_entry_points_import():
    from drgrpo.data import DataArguments, load_prompt_dataset, preview_prompts  # noqa: F401
    from drgrpo.evaluation import EvalArguments, pass_at_k, run_evaluation  # noqa: F401
    from drgrpo.planning import format_report, plan_recipe  # noqa: F401

    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
