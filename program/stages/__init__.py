"""The LM stages of a diagnosis: plan, gather, cite, judge, compose, and the run they share."""
