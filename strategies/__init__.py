"""Decoding strategies and logit transforms.

Importing the package imports every module in it, so each ``@register``-ed
strategy is in the registry; adding a strategy is adding a file.
"""
import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
