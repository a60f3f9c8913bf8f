"""Idempotency records on SQLite and on a real PostgreSQL cluster: per tenant, the first answer
kept, a refused request's key freed."""

from __future__ import annotations

from sqlalchemy import Engine

from store.idempotency import answer_key, claim_key, find_key, release_key


def test_a_key_holds_its_first_request_and_answer_per_tenant(any_engine: Engine) -> None:
    first = claim_key(any_engine, "t1", "k", "hash-a", "task-1")
    assert (first.request_hash, first.task_id, first.response) == ("hash-a", "task-1", None)
    # A later claim of the same key reads the first one; another tenant's key is its own.
    assert claim_key(any_engine, "t1", "k", "hash-b", "task-2").request_hash == "hash-a"
    assert claim_key(any_engine, "t2", "k", "hash-b", "task-2").request_hash == "hash-b"

    assert answer_key(any_engine, "t1", "k", {"status": "PAUSED"}) == {"status": "PAUSED"}
    # A concurrent try that answers later gets the kept answer, not its own.
    assert answer_key(any_engine, "t1", "k", {"status": "PENDING"}) == {"status": "PAUSED"}
    kept = find_key(any_engine, "t1", "k")
    assert kept is not None and kept.completed and kept.response == {"status": "PAUSED"}
    theirs = find_key(any_engine, "t2", "k")
    assert theirs is not None and theirs.response is None


def test_only_an_unanswered_claim_of_the_same_request_is_released(any_engine: Engine) -> None:
    claim_key(any_engine, "t1", "answered", "hash-a", "task-1")
    answer_key(any_engine, "t1", "answered", {"ok": True})
    release_key(any_engine, "t1", "answered", "hash-a")
    assert find_key(any_engine, "t1", "answered") is not None

    claim_key(any_engine, "t1", "refused", "hash-a", "task-1")
    release_key(any_engine, "t1", "refused", "hash-b")  # another request's hash: not its claim
    assert find_key(any_engine, "t1", "refused") is not None
    release_key(any_engine, "t2", "refused", "hash-a")  # another tenant's key: not its claim
    assert find_key(any_engine, "t1", "refused") is not None
    release_key(any_engine, "t1", "refused", "hash-a")
    assert find_key(any_engine, "t1", "refused") is None
    assert claim_key(any_engine, "t1", "refused", "hash-b", "task-2").request_hash == "hash-b"
