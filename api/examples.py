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
    "job_details": {"type": "http", "url": "https://example.com/hooks/report", "method": "POST"},
    "next_run_at": "2026-12-01T09:00:00Z",
    "last_run": {"execution_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
                 "status": "COMPLETED", "scheduled_at": "2026-11-30T09:00:00Z"},
    "run_count": 12, "success_count": 12, "failure_count": 0, "skipped_count": 0,
    "consecutive_failures": 0, "created_at": "2026-11-18T08:12:40Z", "updated_at": "2026-11-30T09:00:01Z",
}

EXECUTION_EXAMPLE: dict[str, Any] = {
    "id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "scheduled_at": "2026-11-30T09:00:00Z",
    "trigger": "schedule", "status": "COMPLETED", "reason": None, "attempts": 1,
    "started_at": "2026-11-30T09:00:00.004Z", "finished_at": "2026-11-30T09:00:00.210Z",
    "http_status": 200, "response_snippet": "{\"ok\": true}", "error": None,
    "instant": "2026-11-30T09:00:00.000Z", "jitter_ms": 0.0,
    "lateness_ms": 4.0, "drifted": False, "dead_letter": None,
}
