"""Decoding Playground: watch language models choose their words."""
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"  # small trained weights, examples, css, js
