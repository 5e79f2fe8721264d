"""``python -m playground run|list|sample|score``: the engine from the command line."""
from playground.cli.run import main  # noqa: F401
