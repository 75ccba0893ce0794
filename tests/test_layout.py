"""The layout keeps its shape: no long modules, and inside each package no module imports one listed after it."""

from __future__ import annotations

import ast
import importlib
import re

import pytest
from conftest import ROOT

MAX_MODULE_LINES = 500  # the developers' guide: ~400 lines per module, 500 at most
LAYERED_PACKAGES = ["drgrpo.evaluation", "drgrpo.planning", "drgrpo.data"]


def module_order(package: str) -> list[str]:
    """The package's modules in the order its `__init__` docstring lists them (`- `name`: ...` lines)."""
    return re.findall(r"^- `(\w+)`", importlib.import_module(package).__doc__ or "", flags=re.M)


def sibling_imports(package: str, module: str) -> set[str]:
    """The modules of `package` that `package.module` imports (at module level or inside functions)."""
    path = ROOT / package.replace(".", "/") / f"{module}.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
            found.add(node.module[len(package) + 1 :].split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(
                a.name[len(package) + 1 :].split(".")[0] for a in node.names if a.name.startswith(package + ".")
            )
    return found


def test_no_module_is_too_long():
    long = {
        str(path.relative_to(ROOT)): n
        for folder in ("drgrpo", "rewards")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"Split these modules (one idea per module, at most {MAX_MODULE_LINES} lines): {long}"


@pytest.mark.parametrize("package", LAYERED_PACKAGES)
def test_package_modules_import_only_earlier_ones(package):
    order = module_order(package)
    files = sorted(p.stem for p in (ROOT / package.replace(".", "/")).glob("*.py") if p.stem != "__init__")
    assert sorted(order) == files, f"{package}.__init__ must list every module once, in import order: {files}"
    upward = {
        module: sorted(later)
        for i, module in enumerate(order)
        if (later := sibling_imports(package, module) & set(order[i:]))
    }
    assert not upward, f"In {package}, these modules import ones listed at or after them: {upward}"


def test_old_import_paths_still_work():
    from drgrpo import planner, planning
    from drgrpo.data import DataArguments, load_prompt_dataset, preview_prompts  # noqa: F401
    from drgrpo.evaluation import EvalArguments, pass_at_k, run_evaluation  # noqa: F401

    assert planner.plan_recipe is planning.plan_recipe
    assert set(planner.__all__) == set(planning.__all__)
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
