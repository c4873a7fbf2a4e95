"""DSPy signatures for each LM stage and the demos the program ships with (the contracts they use are `contracts`).

Importing this package keeps litellm offline, the one place that is set: litellm (imported by dspy)
fetches a model price list over the network when it loads, unless told not to. Every entry point
(`program`, optimize.py, the tests through `program`) imports it before dspy.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
