"""Where runs are kept: the audit store (`program.store.audit`). It sits below the LM stages and
the entry points, which both write to it, and imports nothing of the project but the contracts."""
