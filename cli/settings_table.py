"""The README's settings table, made from the settings' own descriptions.

``python -m cli.settings_table`` rewrites the table in README.md; a test fails when it is stale."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from config.settings import EVERY, setting_fields

BEGIN = "<!-- settings table: python -m cli.settings_table -->"
END = "<!-- end of settings table -->"
README = Path(__file__).resolve().parents[1] / "README.md"


def _default(field: FieldInfo) -> str:
    value: Any = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def table() -> str:
    """The settings marked with ``key(...)``, one row each, with the processes that read it."""
    rows = ["| setting | default | read by | what |", "|---|---|---|---|"]
    for path, env, field in setting_fields():
        extra = _extra(field)
        if not extra.get("key"):
            continue
        readers = extra.get("read_by")
        if not isinstance(readers, list) or not readers:
            raise ValueError(f"{path}: name the processes that read it, key(API, ...)")
        who = "every process" if set(readers) == set(EVERY) else ", ".join(readers)
        what = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{env}` | {_default(field)} | {who} | {what} |")
    return "\n".join(rows)


def with_table(readme: str) -> str:
    """The README text with its settings table replaced by the current one."""
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"README.md has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    README.write_text(with_table(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
