"""The page: the only room that imports gradio."""
from playground.ui.page import build_demo, launch_kwargs, serve  # noqa: F401
