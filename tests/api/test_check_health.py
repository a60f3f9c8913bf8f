"""What /checkHealth says about workers, from what Temporal reports."""

from __future__ import annotations

from api.routes.health import _workers_check


def test_workers_are_judged_by_their_heartbeats() -> None:
    temporal = {"workers": {"q": 2, "q-jobs": 0},
                "pollers": {"workflow": 5, "activity": 5, "jobs": 5}}  # pollers linger: ignored
    assert _workers_check(temporal) == "down: no live worker on q-jobs"
    temporal["workers"] = {"q": 2, "q-jobs": 1}
    assert _workers_check(temporal) == "up: 2 on q, 1 on q-jobs"


def test_without_heartbeats_the_pollers_stand_in_and_the_answer_says_so() -> None:
    temporal = {"workers": None, "pollers": {"workflow": 1, "activity": 1, "jobs": 0}}
    assert _workers_check(temporal) == "down: no worker polled the jobs queue in the last minute"
    temporal["pollers"] = {"workflow": 1, "activity": 1, "jobs": 1}
    answer = _workers_check(temporal)
    assert answer.startswith("up: ") and "seen in the last minute" in answer
