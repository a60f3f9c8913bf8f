"""The README's settings table is the settings' own: names, defaults and descriptions."""

from __future__ import annotations

from cli.settings_table import README, table, with_table


def test_the_readme_table_is_generated_from_the_settings() -> None:
    text = README.read_text()
    assert with_table(text) == text, "the settings table is stale: run `python -m cli.settings_table`"


def test_the_table_lists_the_key_settings_with_their_defaults() -> None:
    rows = table().splitlines()[2:]
    assert "| `SCHEDULER_TEMPORAL_ADDRESS` | `127.0.0.1:7233` | every process |" in "\n".join(rows)
    assert 8 <= len(rows) <= 18  # the settings that matter, on one screen


def test_the_table_says_which_process_reads_a_setting() -> None:
    rows = {row.split(" | ")[0].strip("| `"): row.split(" | ")[2] for row in table().splitlines()[2:]}
    assert rows["SCHEDULER_DISPATCH_LEAD_SECONDS"] == "workflows worker"
    assert rows["SCHEDULER_QUOTA_MAX_ACTIVE_TASKS"] == "API"
    assert all(rows.values())
