"""Scripts that rebuild what assets/ holds (the toy models, the EAGLE heads, the screenshots), and a fuzz
of speculative decoding under grammars."""
