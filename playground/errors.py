"""The error type every layer raises for a value a user gave.

It lives beside the trace, below both the model seam and the strategies, so
neither has to import the other to share it.
"""
from __future__ import annotations


class InvalidRequest(ValueError):
    """A value a user gave is outside what is allowed. The message names both."""
