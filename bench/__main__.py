"""`python -m bench` runs every workload; `--only herd,steady` picks some."""

from bench.cli import main

main()
