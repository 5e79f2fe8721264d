"""Decoding strategies and logit transforms, by family: sampling/, beam/, speculative/, contrastive/.

Importing the package imports every module of every family, so each ``@register``-ed strategy is
in the registry; adding a strategy is adding a file to its family's folder.
"""
import importlib
import pkgutil

for _mod in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    importlib.import_module(_mod.name)
