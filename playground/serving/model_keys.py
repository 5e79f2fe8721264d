"""Which strings name a model: the offline keys, or a hub repo id ``namespace/name``.

A model key reaches ``from_pretrained``, which reads a directory when one by that
name exists. On a shared server that would load whatever sits on its disk, so a
key is never a path: a hub id must be ``namespace/name`` in the hub's own
characters (ASCII letters, digits, ``-``, ``_``, ``.``; no ``--`` or ``..``; each
part starts and ends with a letter or digit; at most 96 characters), and a key
that names an existing file or directory is refused outright.

An operator can restrict the keys with ``$PLAYGROUND_MODELS``, a comma-separated
list read when the model store starts.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from playground.errors import InvalidRequest

ALLOWED_ENV = "PLAYGROUND_MODELS"
MAX_HUB_ID = 96
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
HUB_ID = re.compile(rf"{_PART}/{_PART}")


def hub_id_problem(key: str) -> str | None:
    """Why ``key`` is not a hub repo id, or None when it is one."""
    if len(key) > MAX_HUB_ID:
        return f"at most {MAX_HUB_ID} characters"
    if not key.isascii() or not HUB_ID.fullmatch(key):
        return "namespace/name of ASCII letters, digits, '-', '_' and '.', each part starting and ending with " \
               "a letter or digit"
    if "--" in key or ".." in key or key.endswith(".git"):
        return "no '--' or '..', not ending in '.git'"
    if Path(key).exists():
        return "not the name of a file or directory on this server"
    return None


def check_key(key: object, offline: Iterable[str]) -> str:
    """``key`` stripped, when it is an offline key or a hub repo id; else InvalidRequest naming both kinds."""
    names = list(offline)
    if not isinstance(key, str):
        raise InvalidRequest(f"model must be one of {', '.join(names)} or a hub id namespace/name, got {key!r}")
    key = key.strip()
    if key in names:
        return key
    problem = hub_id_problem(key) if key else "not empty"
    if problem:
        raise InvalidRequest(f"model must be one of {', '.join(names)} or a hub id namespace/name "
                             f"({problem}), got {key!r}")
    return key


@dataclass(frozen=True)
class KeyPolicy:
    """Which valid keys this server serves: every one (``allowed`` None) or only those listed."""

    offline: tuple[str, ...]
    allowed: frozenset[str] | None = None

    @classmethod
    def from_env(cls, offline: Iterable[str]) -> "KeyPolicy":
        """``$PLAYGROUND_MODELS`` (comma-separated keys; unset or empty: every valid key).

        A listed key that is not a valid key stops the start with the validation message."""
        offline = tuple(offline)
        raw = os.environ.get(ALLOWED_ENV, "").strip()
        if not raw:
            return cls(offline)
        listed = [part for part in (p.strip() for p in raw.split(",")) if part]
        try:
            keys = frozenset(check_key(k, offline) for k in listed)
        except InvalidRequest as err:
            raise InvalidRequest(f"${ALLOWED_ENV}: {err}") from None
        return cls(offline, keys)

    def check(self, key: object) -> str:
        """The key to load, or InvalidRequest naming what this server serves."""
        if self.allowed is not None and isinstance(key, str) and key.strip() not in self.allowed:
            raise InvalidRequest(f"model must be one of {', '.join(sorted(self.allowed))} on this server, "
                                 f"got {key.strip()!r}")
        return check_key(key, self.offline)

    def permits(self, key: str) -> bool:
        return self.allowed is None or key in self.allowed
