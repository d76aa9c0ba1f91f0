"""The commands of `benchc`, one module per group: build (check, plan, compile, targets),
results (run, runs, show, export, ingest, report) and cluster (submit, status, cancel).

Each module adds its parsers with `add_parsers(commands, variant_options)` and names its
commands in `COMMANDS`; cli.py imports a module only when one of its commands runs.
"""
