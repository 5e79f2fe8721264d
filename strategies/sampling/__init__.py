"""The sampling family: the chain of logit transforms, its selectors, and the decoders that run it."""
