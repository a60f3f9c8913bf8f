"""Run the deployment's shell scripts here, against local servers, as their containers would."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

BIN = Path(sys.executable).parent


async def run_sh(args: list[str], env: Mapping[str, str], timeout: float = 180) -> str:
    """`sh ARGS` with the virtualenv's `temporal` CLI on PATH; fails the test on a non-zero exit."""
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    result = await asyncio.to_thread(
        subprocess.run, ["sh", *args], env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout
