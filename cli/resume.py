"""What resuming a paused task now would do, in words, as ``tasks show`` prints it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from cli.terminal import shown


def resume_lines(on_resume: dict[str, Any], limit: int) -> str:
    """Each choice of ``--missed`` summed up, then the newest ``limit`` fires under policy."""
    lines = [f"if resumed now ({shown(on_resume['as_of'])}), the fires of the pause:"]
    for missed in ("skip", "policy"):
        choice = on_resume[missed]
        lines.append(f"  --missed {missed + ':':8}{_sum(choice)}")
    policy = on_resume["policy"]
    listed = policy["fires"][-limit:]
    lines += [f"    {shown(f['scheduled_at'])}  {shown(_what(f))}" for f in listed]
    older = policy["more"] + len(policy["fires"]) - len(listed)
    if older:
        lines.append(f"    ({older} older not listed)")
    return "\n".join(lines)


def _what(fire: dict[str, Any]) -> str:
    return f"runs ({fire['trigger']})" if fire["runs"] else f"skipped: {fire['skipped']}"


def _sum(choice: dict[str, Any]) -> str:
    total = choice["runs"] + choice["skipped"]
    if not total:
        return "none came due"
    kinds = Counter(_what(f) for f in choice["fires"])
    parts = ", ".join(f"{count} {shown(kind)}" for kind, count in sorted(kinds.items()))
    more = f" and {choice['more']} older" if choice["more"] else ""
    if not choice.get("complete", True):
        more += " (the pause holds more fires than a preview decides: the newest are not shown)"
    return f"{choice['runs']} run, {choice['skipped']} skipped: {parts}{more}"
