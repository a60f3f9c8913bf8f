"""Imports run one way: entry points, then workflows, activities, the jobs feature, the store
and the domain, with the process set-up (config) at the bottom."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each package may import only packages of a lower rank (and itself); api and worker are two
# entry points beside each other, and cli starts either.
RANK = {
    "cli": 7, "api": 6, "worker": 6, "workflows": 5, "activities": 4, "outbound": 3, "store": 2,
    "scheduling": 1, "config": 0,
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """Every project package the module imports (at the top or inside functions), with the line."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {(name.split(".")[0], node.lineno) for name in names if name.split(".")[0] in RANK}
    return found


def wrong_way_edges() -> list[str]:
    edges = []
    for package, rank in RANK.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for target, line in sorted(imported_packages(path)):
                if target != package and RANK[target] >= rank:
                    edges.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return edges


def test_every_import_runs_down_the_layers() -> None:
    assert wrong_way_edges() == []


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from api.app import create_app\n    import worker.run\n")
    assert imported_packages(module) == {("api", 2), ("worker", 3)}
