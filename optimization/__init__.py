"""`python optimize.py`, in parts: candidates (what is compiled), experiment (scoring a program on the
devset with dspy.Evaluate), statistics (gains, intervals, how the metric's parts correlate), report
(the Markdown and HTML pages) and replay (re-scoring a run from its transcript)."""
