"""The docs stay honest: every name they give (metric, SKIPPED reason, setting, REST path)
exists in the code, and what the code can write is documented."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import temporalio

from api.app import create_app
from api.routes.ui import router as ui_router
from config.settings import setting_fields

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DOC_FILES = sorted(DOCS.glob("*.md"))
METRIC_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
METRIC_FACTORIES = {
    "Counter", "Histogram", "Gauge", "Summary",
    "create_counter", "create_histogram", "create_histogram_float", "create_histogram_timedelta",
    "create_gauge", "create_gauge_float",
    "CounterMetricFamily", "GaugeMetricFamily", "HistogramMetricFamily",  # read at scrape time
}
API_ROOTS = ("/task", "/dead-letters", "/checkHealth", "/livez", "/readyz", "/metrics", "/ui",
             "/signing-secret")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _text(name: str) -> str:
    return (DOCS / name).read_text()


def _sources(*packages: str) -> Iterator[tuple[Path, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text(), filename=str(path))


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _strings(node: ast.AST) -> list[str]:
    """String constants of an expression: a literal, or the literals of an `a or "b"`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BoolOp):
        return [s for value in node.values for s in _strings(value)]
    return []


# ----------------------------------------------------------------- metrics
def defined_metrics() -> set[str]:
    """Names passed to a Prometheus or Temporal metric factory in the service's code."""
    names: set[str] = set()
    for _, tree in _sources("api", "worker", "activities", "workflows", "store"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in METRIC_FACTORIES and node.args:
                names.update(s for s in _strings(node.args[0]) if s.startswith("scheduler_"))
    return names


def _base(name: str) -> str:
    for suffix in METRIC_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_every_scheduler_metric_in_the_operations_guide_is_defined() -> None:
    defined = defined_metrics()
    assert {"scheduler_runs", "scheduler_fire_lateness", "scheduler_tasks"} <= defined
    mentioned = set(re.findall(r"\bscheduler_[a-z0-9_]*[a-z0-9]", _text("operations.md")))
    unknown = {m for m in mentioned if m not in defined and _base(m) not in defined}
    assert not unknown, f"docs/operations.md names metrics the code does not define: {unknown}"


def test_every_scheduler_metric_is_documented() -> None:
    text = _text("operations.md")
    missing = {m for m in defined_metrics() if not re.search(rf"`{m}(_total)?`", text)}
    assert not missing, f"metrics missing from docs/operations.md: {missing}"


def test_sdk_metrics_in_the_operations_guide_exist_in_the_sdk() -> None:
    # The SDK's worker metrics are named in its Rust core; the names are in the bridge library.
    bridge = next((Path(temporalio.__file__).parent / "bridge").glob("temporal_sdk_bridge*"), None)
    if bridge is None:
        pytest.skip("the Temporal SDK bridge library is not where it is expected")
    binary = bridge.read_bytes()
    mentioned = set(re.findall(r"\btemporal_[a-z0-9_]*[a-z0-9]", _text("operations.md")))
    assert mentioned, "the operations guide names no SDK metric"
    unknown = {m for m in mentioned if _base(m).removeprefix("temporal_").encode() not in binary}
    assert not unknown, f"docs/operations.md names SDK metrics the SDK does not have: {unknown}"


# ----------------------------------------------------------------- SKIPPED reasons
def skip_reasons() -> set[str]:
    """Every reason a SKIPPED execution can carry: the one enum of them."""
    from scheduling.status import SkipReason

    return {reason.value for reason in SkipReason}


def test_every_skipped_reason_the_code_writes_is_documented() -> None:
    reasons = skip_reasons()
    assert {"missed", "overlap", "paused", "outside_window", "rescheduled"} <= reasons
    text = _text("scheduling.md")
    missing = {r for r in reasons if f"`{r}`" not in text}
    assert not missing, f"SKIPPED reasons missing from docs/scheduling.md: {missing}"


def test_the_reason_table_lists_only_reasons_the_code_writes() -> None:
    text = _text("scheduling.md")
    table = text.split("### Every SKIPPED reason", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))
    assert listed == skip_reasons()


# ----------------------------------------------------------------- settings
def known_variables() -> set[str]:
    """SCHEDULER_* variables something reads: Settings fields, the operator CLI's own, and the
    Compose file's interpolations."""
    names = {env for _, env, _ in setting_fields()}
    names |= set(re.findall(r"os\.environ\.get\(\"(SCHEDULER_[A-Z0-9_]+)\"",
                            (ROOT / "cli" / "ops.py").read_text()))
    names |= set(re.findall(r"\$\{(SCHEDULER_[A-Z0-9_]+)", (ROOT / "docker-compose.yml").read_text()))
    return names


@pytest.mark.parametrize("doc", DOC_FILES, ids=[d.name for d in DOC_FILES])
def test_every_variable_in_the_docs_is_read_by_the_code(doc: Path) -> None:
    text = doc.read_text()
    named = set(re.findall(r"\bSCHEDULER_[A-Z0-9_]*[A-Z0-9]", text))
    # The upgrade notes' rename table names retired variables in its first column.
    retired = set(re.findall(r"^\| `(SCHEDULER_[A-Z0-9_]+)` \| `SCHEDULER_", text, flags=re.MULTILINE))
    unknown = named - known_variables() - retired
    assert not unknown, f"{doc.name} names variables no process reads: {unknown}"


# ----------------------------------------------------------------- REST paths
def _normal(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0]).rstrip("/") or "/"


def served_routes() -> dict[str, set[str]]:
    """Normalised path -> methods, from the OpenAPI document and the /ui router."""
    routes: dict[str, set[str]] = {}
    for path, operations in create_app().openapi()["paths"].items():
        routes.setdefault(_normal(path), set()).update(m.upper() for m in operations)
    for route in ui_router.routes:
        methods: set[str] = getattr(route, "methods", set())
        routes.setdefault(_normal(getattr(route, "path", "")), set()).update(methods)
    return routes


def mentioned_paths(text: str) -> set[tuple[str | None, str]]:
    """(method or None, path) for every API path a document names."""
    found: set[tuple[str | None, str]] = set()
    for method, path in re.findall(rf"\b({'|'.join(METHODS)}) (/[^\s`|,;)]*)", text):
        found.add((method, path))
    for path in re.findall(r"`(/[^`\s]*)`", text):
        if path.startswith(API_ROOTS):
            found.add((None, path))
    return {(m, p.rstrip(".:")) for m, p in found if p.startswith(API_ROOTS)}


@pytest.mark.parametrize("doc", DOC_FILES, ids=[d.name for d in DOC_FILES])
def test_every_rest_path_in_the_docs_is_served(doc: Path) -> None:
    routes = served_routes()
    wrong = []
    for method, path in sorted(mentioned_paths(doc.read_text()), key=str):
        methods = routes.get(_normal(path))
        if methods is None or (method is not None and method not in methods):
            wrong.append(f"{method or ''} {path}".strip())
    assert not wrong, f"{doc.name} names paths the app does not serve: {wrong}"


def test_the_path_check_sees_the_documented_endpoints() -> None:
    paths = {p for _, p in mentioned_paths(_text("scheduling.md") + _text("operations.md"))}
    assert {"/dead-letters", "/checkHealth", "/metrics", "/ui/login"} <= paths

