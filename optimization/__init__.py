"""The optimizer's jobs, one module each: candidates, experiment, statistics, report, replay.
`optimize.py` is the command that runs them."""
