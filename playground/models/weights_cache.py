"""Converted-weight caches that heal: built in a temporary directory, renamed into place, then sealed.

A cache directory is complete once renamed; the seal (``CHECKSUMS``: the sha256
of every file in it) is written after the rename. A cache whose files no longer
match their seal (a truncated copy, a full disk) or that fails to load is rebuilt
once, with the progress shown, and only a rebuild that fails too is reported as
an error. A cache from before seals existed is loaded, and sealed when it loads.

Several processes may share one cache (servers, test workers): one converts while
the others wait on a lock beside the cache and then load what it built, so a model
is converted once. Temporary directories of processes that died mid-conversion are
removed before the next conversion; a live process's are left alone.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

try:
    import fcntl
except ImportError:  # not on Windows
    fcntl = None  # type: ignore[assignment]

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


@contextmanager
def conversion_lock(target: Path) -> Iterator[None]:
    """Held while one process converts ``target``: another process that needs the same cache waits,
    then loads what the first one built instead of converting it a second time. The lock is the
    operating system's (``flock``), so a process killed mid-conversion releases it."""
    if fcntl is None:  # no flock on this platform: every process converts on its own, as before
        yield
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load_sound(target: Path, load: Callable[[Path], T], progress: Progress, name: str
                ) -> tuple[bool, T | None, str | None]:
    """(True, the model, None) when ``target`` is a sound cache; else (False, None, what is wrong with
    it, or None when there is none)."""
    if not target.is_dir():
        return False, None, None
    problem = seal_problem(target)
    if problem is None:
        progress(0.5, f"loading {name} from the converted-weights cache")
        try:
            result = load(target)
        except Exception as err:  # safetensors, json and transformers raise many kinds
            problem = f"it failed to load ({type(err).__name__}: {err})"
        else:
            if not is_sealed(target):
                seal(target)
            return True, result, None
    return False, None, problem


def load_or_build(target: Path, load: Callable[[Path], T], convert: Callable[[Path], T], progress: Progress,
                  name: str) -> T:
    """The cached model at ``target`` when it is sound; else built again, once, by one process at a
    time (one that waited loads the cache the other built).

    ``load(dir)`` reads a cache; ``convert(tmp)`` writes one and returns the model it converted.
    """
    found, result, problem = _load_sound(target, load, progress, name)
    if found:
        return result  # type: ignore[return-value]
    with conversion_lock(target):
        found, result, now = _load_sound(target, load, progress, name)  # built while this one waited?
        if found:
            return result  # type: ignore[return-value]
        problem = problem or now
        if problem:
            progress(0.1, f"the converted-weights cache of {name} is damaged ({problem}): converting again")
        try:
            return build(target, convert)
        except InvalidRequest:
            raise
        except Exception as err:  # report any failure of the one rebuild as a message
            before = f" after a damaged cache ({problem})" if problem else ""
            raise CacheError(f"converting {name} failed{before}: {type(err).__name__}: {err}") from None
