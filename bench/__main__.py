"""`python -m bench` runs every workload; `--only herd,steady` picks some."""

from bench import create, every_minute, herd, outage, reminders, scale, steady, sustained
from bench.cli import main

main({"herd": herd, "steady": steady, "create": create, "scale": scale,
      "every_minute": every_minute, "reminders": reminders,
      "sustained": sustained, "outage": outage})
