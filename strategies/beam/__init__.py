"""The beam family: beam search, its tree and pruning, stochastic beam, sample-then-beam."""
