"""Entry points: `diagnose()`, the command line, and the audit store every run is written to."""
