"""Compile the diagnosis program's prompts against the devset (see README)."""

if __name__ == "__main__":
    print("usage: python optimize.py  (the optimizer is not built yet; see issue 'Devset, metrics, evaluation')")
