"""Where the tools read from: one interface per tool (interfaces.py), the sources that implement
them (the fixture world, a Prometheus server, a log directory, a runbook directory), and the
registry of settings that chooses among them (active.py)."""
