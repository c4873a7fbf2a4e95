"""DSPy signatures for each LM stage, and the Pydantic contracts every component shares."""

import os

# litellm (imported by dspy) fetches a model price list over the network unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
