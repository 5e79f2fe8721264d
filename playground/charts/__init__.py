"""Trace (a dict) in, plotly figures and HTML out: no torch, gradio, strategies or models."""
