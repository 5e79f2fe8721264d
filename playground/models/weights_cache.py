"""Converted-weight caches that heal: built in a temporary directory, renamed into place, then sealed.

A cache directory is complete once renamed; the seal (``CHECKSUMS``: the sha256
of every file in it) is written after the rename. A cache whose files no longer
match their seal (a truncated copy, a full disk) or that fails to load is rebuilt
once, with the progress shown, and only a rebuild that fails too is reported as
an error. A cache from before seals existed is loaded, and sealed when it loads.

Temporary directories of processes that died mid-conversion are removed before
the next conversion; a live process's are left alone (several servers may share
one cache).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable, TypeVar

from playground.errors import InvalidRequest

CHECKSUMS = "CHECKSUMS.json"
T = TypeVar("T")
Progress = Callable[[float, str], None]


class CacheError(InvalidRequest):
    """The converted weights could not be built or loaded, even after one rebuild."""


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def seal(directory: Path) -> None:
    """Write the sha256 of every file in ``directory`` (atomically, as the last step)."""
    sums = {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != CHECKSUMS}
    tmp = directory / (CHECKSUMS + ".tmp")
    tmp.write_text(json.dumps(sums, indent=1), encoding="utf-8")
    os.replace(tmp, directory / CHECKSUMS)


def seal_problem(directory: Path) -> str | None:
    """Why ``directory`` does not match its seal, or None when it does. No seal is not a problem here."""
    try:
        sums = json.loads((directory / CHECKSUMS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return f"its checksum file is unreadable ({err})"
    for name, expected in sums.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != expected:
            return f"{name} does not match its checksum"
    return None


def is_sealed(directory: Path) -> bool:
    return (directory / CHECKSUMS).is_file()


def remove_dead_temporaries(target: Path) -> None:
    """Delete ``<target>.tmp<pid>`` directories whose process is gone (killed mid-conversion)."""
    for tmp in target.parent.glob(target.name + ".tmp*"):
        pid = tmp.name[len(target.name) + 4:]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build(target: Path, convert: Callable[[Path], T]) -> T:
    """``convert(tmp)`` writes the files into a fresh temporary directory and returns the loaded model;
    the directory is then renamed to ``target`` (replacing a damaged one) and sealed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temporaries(target)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        result = convert(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seal(target)
    return result


def load_or_build(target: Path, load: Callable[[Path], T], convert: Callable[[Path], T], progress: Progress,
                  name: str) -> T:
    """The cached model at ``target`` when it is sound; else built again, once.

    ``load(dir)`` reads a cache; ``convert(tmp)`` writes one and returns the model it converted.
    """
    problem = None
    if target.is_dir():
        problem = seal_problem(target)
        if problem is None:
            progress(0.5, f"loading {name} from the converted-weights cache")
            try:
                result = load(target)
            except Exception as err:  # noqa: BLE001 - safetensors, json and transformers raise many kinds
                problem = f"it failed to load ({type(err).__name__}: {err})"
            else:
                if not is_sealed(target):
                    seal(target)
                return result
        progress(0.1, f"the converted-weights cache of {name} is damaged ({problem}): converting again")
    try:
        return build(target, convert)
    except InvalidRequest:
        raise
    except Exception as err:  # noqa: BLE001 - report any failure of the one rebuild as a message
        before = f" after a damaged cache ({problem})" if problem else ""
        raise CacheError(f"converting {name} failed{before}: {type(err).__name__}: {err}") from None
