"""Benchmarks: the scheduler against bare Temporal, Temporal Schedules and APScheduler.

Each workload runs the real stack as processes (dev server with WAL pragmas, worker, API) and
its baselines on fresh servers in the same run; see bench/README.md.
"""
