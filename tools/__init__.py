"""Diagnosis tools, their fixture world, and the recorder that turns each call into evidence."""

from tools.functions import TOOLS, lookup_knowledge, query_logs, query_metrics

__all__ = ["TOOLS", "lookup_knowledge", "query_logs", "query_metrics"]
