"""Scripts that rebuild what assets/ holds (the toy models, the EAGLE heads, the screenshots), a fuzz
of speculative decoding under grammars, and a sweep of greedy draft-and-verify against greedy."""
