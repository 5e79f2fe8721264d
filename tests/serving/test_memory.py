"""playground.serving.memory on this machine's glibc: the arena cap takes effect and trimming is rate-limited."""
from __future__ import annotations

import platform

import pytest

from playground.serving import memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


@glibc
def test_the_arena_cap_takes_effect():
    assert memory.limit_arenas() is True


@glibc
def test_trim_runs_at_most_once_a_second_unless_forced():
    assert memory.trim(force=True) is True
    assert memory.trim() is False  # within TRIM_EVERY of the last one
    assert memory.trim(force=True) is True
