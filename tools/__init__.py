"""Diagnosis tools (each declared once), the sources behind them, and the recorder that turns each
call into evidence."""

from tools.functions import TOOLBOX, lookup_knowledge, query_logs, query_metrics

__all__ = ["TOOLBOX", "lookup_knowledge", "query_logs", "query_metrics"]
