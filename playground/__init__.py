"""Decoding Playground: watch language models choose their words."""
