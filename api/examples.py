"""Examples the OpenAPI document shows for request and response bodies."""

from __future__ import annotations

from typing import Any

CREATE_EXAMPLES: dict[str, Any] = {
    "cron-http": {
        "summary": "Every day at 10:00 Berlin time, call a webhook",
        "value": {
            "task_name": "daily-report",
            "job_details": {"type": "http", "url": "https://example.com/hooks/report",
                            "method": "POST", "body": {"report": "daily"}},
            "schedule_type": "cron",
            "cron": "0 10 * * *",
            "timezone": "Europe/Berlin",
        },
    },
    "once-handler": {
        "summary": "Once, at an instant, run a registered handler",
        "value": {
            "task_name": "send-welcome",
            "job_details": {"type": "handler", "name": "log", "args": {"user": 42}},
            "schedule_type": "once",
            "run_at": "2030-01-01T09:00:00Z",
        },
    },
    "interval-workflow": {
        "summary": "Every 15 minutes, start an existing Temporal workflow",
        "value": {
            "task_name": "sync-inventory",
            "job_details": {"type": "workflow", "workflow_type": "SyncInventory",
                            "task_queue": "inventory", "args": ["eu"]},
            "schedule_type": "interval",
            "interval_seconds": 900,
            "interval_mode": "fixed_delay",
        },
    },
    "cron-dst": {
        "summary": "At 02:30 Berlin time; no run on the day the clocks skip 02:30",
        "value": {
            "task_name": "nightly-export",
            "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron",
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
            "dst_policy": {"gap": "skip", "repeated": "first"},
        },
    },
    "dates-handler": {
        "summary": "At three explicit instants, run a registered handler; then complete",
        "value": {
            "task_name": "launch-reminders",
            "job_details": {"type": "handler", "name": "log", "args": {"campaign": "launch"}},
            "schedule_type": "dates",
            "dates": ["2030-01-06T09:00:00Z", "2030-01-13T09:00:00+01:00", "2030-02-01T12:30:00Z"],
        },
    },
    "cron-payroll-calendar": {
        "summary": "On the 15th, but on the next business day when the 15th is a holiday",
        "value": {
            "task_name": "payroll",
            "job_details": {"type": "http", "url": "https://example.com/hooks/payroll"},
            "schedule_type": "cron",
            "cron": "0 9 15 * *",
            "timezone": "Europe/Berlin",
            "exclude_calendars": [{"calendar_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "shift": True}],
        },
    },
}

TASK_EXAMPLE: dict[str, Any] = {
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "task_name": "daily-report", "tenant_id": "growth",
    "status": "PENDING", "status_reason": None, "schedule_type": "cron",
    "schedule": {"schedule_type": "cron", "cron": "0 10 * * *", "timezone": "Europe/Berlin",
                 "priority": "medium", "overlap_policy": "skip"},
    "description": "At 10:00, every day, in Europe/Berlin",
    "job_details": {"type": "http", "url": "https://example.com/hooks/report", "method": "POST"},
    "next_run_at": "2026-12-01T09:00:00Z",
    "last_run": {"execution_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
                 "status": "COMPLETED", "scheduled_at": "2026-11-30T09:00:00Z"},
    "run_count": 12, "success_count": 12, "failure_count": 0, "skipped_count": 0,
    "consecutive_failures": 0, "next_probe_at": None, "created_at": "2026-11-18T08:12:40Z", "updated_at": "2026-11-30T09:00:01Z",
    "spec_version": 2,
}

EXECUTION_EXAMPLE: dict[str, Any] = {
    "id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "scheduled_at": "2026-11-30T09:00:00Z",
    "trigger": "schedule", "status": "COMPLETED", "reason": None, "attempts": 1,
    "started_at": "2026-11-30T09:00:00.004Z", "finished_at": "2026-11-30T09:00:00.210Z",
    "http_status": 200, "response_snippet": "{\"ok\": true}", "error": None,
    "instant": "2026-11-30T09:00:00.000Z", "jitter_ms": 0.0,
    "lateness_ms": 4.0, "drifted": False, "dead_letter": None, "spec_version": 2,
}

EVENT_EXAMPLE: dict[str, Any] = {
    "id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:0194a2b7-6c1d-7c3e-9f7a-2b1c0d9e8f7a:00002",
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "at": "2026-11-20T14:03:11Z",
    "actor": "k_3f9a1c", "action": "update", "spec_version": 2,
    "spec": {"task_name": "daily-report", "schedule_type": "cron", "cron": "30 9 * * *",
             "timezone": "Europe/Berlin"},
    "detail": None,
}

VERSION_EXAMPLE: dict[str, Any] = {
    "version": 2, "at": "2026-11-20T14:03:11Z", "actor": "k_3f9a1c", "action": "update",
    "spec": {"task_name": "daily-report", "schedule_type": "cron", "cron": "30 9 * * *",
             "timezone": "Europe/Berlin"},
}

PREVIEW_EXAMPLE: dict[str, Any] = {
    "description": "At 02:30, every day, in Europe/Berlin",
    "fires": [
        {"scheduled_at": "2027-03-27T01:30:00Z", "instant": "2027-03-27T01:30:00Z",
         "local": "2027-03-27T02:30:00+01:00", "note": None, "skipped": None},
        {"scheduled_at": "2027-03-28T01:00:00Z", "instant": "2027-03-28T01:00:00Z",
         "local": "2027-03-28T03:00:00+02:00",
         "note": "02:30 does not exist on 2027-03-28 in Europe/Berlin: runs at 03:00",
         "skipped": None},
    ],
    "warnings": ["1 of these fires fall in a daylight saving change (see their note; "
                 "dst_policy decides what runs)"],
    "before": None,
}

PAUSED_UPCOMING_EXAMPLE: dict[str, Any] = {
    "description": "Every minute", "fires": [
        {"scheduled_at": "2026-12-05T09:04:00Z", "instant": "2026-12-05T09:04:00Z",
         "local": "2026-12-05T09:04:00+00:00", "note": None, "skipped": None}],
    "warnings": ["the task is paused: fires that fall before it is resumed do not run"],
    "before": None,
    "on_resume": {
        "as_of": "2026-12-05T09:03:10Z",
        "skip": {"missed": "skip", "runs": 0, "skipped": 3, "more": 0, "complete": True, "fires": [
            {"scheduled_at": f"2026-12-05T09:0{m}:00Z", "runs": False, "trigger": None,
             "skipped": "paused"} for m in (1, 2, 3)]},
        "policy": {"missed": "policy", "runs": 2, "skipped": 1, "more": 0, "complete": True, "fires": [
            {"scheduled_at": "2026-12-05T09:01:00Z", "runs": False, "trigger": None,
             "skipped": "catchup_cap"},
            {"scheduled_at": "2026-12-05T09:02:00Z", "runs": True, "trigger": "catchup",
             "skipped": None},
            {"scheduled_at": "2026-12-05T09:03:00Z", "runs": True, "trigger": "schedule",
             "skipped": None}]},
    },
}

BACKFILL_EXAMPLE: dict[str, Any] = {
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "mode": "failed",
    "start": "2026-11-29T00:00:00Z", "end": "2026-12-01T00:00:00Z", "dry_run": False, "to_run": 1,
    "instants": [
        {"scheduled_at": "2026-11-29T09:00:00Z",
         "execution_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-29T09:00:00.000Z",
         "current": "FAILED", "action": "run"},
        {"scheduled_at": "2026-11-30T09:00:00Z",
         "execution_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
         "current": "COMPLETED", "action": "keep"},
    ],
}
