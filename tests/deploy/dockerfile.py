"""Reading the Dockerfile: its instructions and the user its final stage runs as."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    pairs = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def dockerfile_user() -> str:
    """The USER of the final stage."""
    final = dockerfile_instructions()
    last_from = max(i for i, (word, _) in enumerate(final) if word == "FROM")
    users = [args for word, args in final[last_from:] if word == "USER"]
    assert users, "the final stage sets no USER, so it runs as root"
    return users[-1]
