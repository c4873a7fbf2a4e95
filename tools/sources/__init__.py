"""Where the tools read from: the fixture world, a Prometheus server, a log directory, a runbook directory."""
