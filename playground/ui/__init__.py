"""The page: the only room that imports gradio."""
from playground.ui.page import build_demo, launch_kwargs, serve

__all__ = ["build_demo", "launch_kwargs", "serve"]
