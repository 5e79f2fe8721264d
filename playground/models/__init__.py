"""Key -> LM: the model lineup, loading within a memory budget, and the seam strategies call."""
from playground.models.lineup import (
                                      DEFAULT_MODEL,
                                      MAX_NEW_TOKENS,
                                      OFFLINE,
                                      ModelSpec,
                                      ModelUnavailable,
                                      Progress,
                                      gguf_path,
                                      on_space,
                                      spec_for,
)
from playground.models.lm import LM, Forward, WeightsRefused
from playground.models.store import ModelStore, model_bytes

__all__ = ["DEFAULT_MODEL", "MAX_NEW_TOKENS", "OFFLINE", "ModelSpec", "ModelUnavailable", "Progress", "gguf_path",
           "on_space", "spec_for", "LM", "Forward", "WeightsRefused", "ModelStore", "model_bytes"]
