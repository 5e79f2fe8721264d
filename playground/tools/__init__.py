"""Scripts that rebuild what assets/ holds: the toy models, the EAGLE heads, the screenshots."""
