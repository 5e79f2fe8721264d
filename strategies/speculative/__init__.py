"""The speculative family: draft, verify, accept; drafts from models, early exit, prompt lookup, EAGLE."""
