"""The Dockerfile and .dockerignore: the image the compose services run."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib

from tests.deploy.dockerfile import REPO, dockerfile_instructions, dockerfile_user


def test_dockerfile_final_stage_runs_as_a_numeric_non_root_user() -> None:
    uid = dockerfile_user().split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_dockerfile_uses_a_pinned_python_3_11_slim_base() -> None:
    args = dict(
        a.split("=", 1) for word, a in dockerfile_instructions() if word == "ARG" and "=" in a
    )
    froms = [a.split()[0] for word, a in dockerfile_instructions() if word == "FROM"]
    for base in froms:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image


def test_dockerfile_installs_every_package_and_runs_the_console_script() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    top_level = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    instructions = dockerfile_instructions()
    copied = {shlex.split(a)[0].rstrip("/") for word, a in instructions if word == "COPY"
              if not a.startswith("--")}
    assert top_level | {"pyproject.toml"} <= copied, top_level - copied
    assert ("RUN", "/opt/venv/bin/pip install .") in instructions
    entry = next(json.loads(a) for word, a in instructions if word == "ENTRYPOINT")
    assert entry == ["task-scheduler"] and "task-scheduler" in project["project"]["scripts"]

    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, ".dockerignore should be an allow-list"
    for path in top_level | {"pyproject.toml"}:
        assert f"!{path}/" in ignore or f"!{path}" in ignore, f"{path} is excluded from the context"


def test_the_image_gets_every_data_file_the_packages_read() -> None:
    """`pip install .` copies only .py files unless pyproject declares package data: a template
    missing from the wheel works in the source tree and breaks in the container."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = sorted(setuptools["packages"], key=len, reverse=True)
    declared = setuptools.get("package-data", {})
    missing = []
    for root in {p.split(".")[0] for p in packages}:
        for path in sorted((REPO / root).rglob("*")):
            if not path.is_file() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
                continue
            if path.name == "script.py.mako":  # Alembic's template for new revisions: dev only
                continue
            relative = path.relative_to(REPO)
            package = next(p for p in packages if relative.parts[:len(p.split("."))] == tuple(
                p.split(".")))
            inside = relative.relative_to(*package.split(".")).as_posix()
            patterns = [*declared.get(package, []), *declared.get("*", [])]
            if not any(fnmatch.fnmatch(inside, pattern) for pattern in patterns):
                missing.append(f"{relative} (package {package})")
    assert not missing, "not in the wheel, add [tool.setuptools.package-data]: " + ", ".join(missing)
