"""The GGUF tensor table (``playground.models.fast.gguf_tensors``) against gguf-py's full reader: the same
tensors, types, shapes and bytes, and clear refusals of what is not a GGUF file."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader

from playground import models
from playground.models.fast.gguf_tensors import tensor_table


def test_the_table_is_gguf_pys():
    path = str(models.gguf_path("smollm2-135m"))
    ours = tensor_table(path)
    theirs = {t.name: t for t in GGUFReader(path).tensors}
    assert set(ours) == set(theirs) and len(ours) == 272
    for name, tensor in theirs.items():
        mine = ours[name]
        assert mine.kind == tensor.tensor_type.name
        assert mine.shape == tuple(int(s) for s in tensor.shape)
        assert np.array_equal(np.asarray(mine.data).reshape(-1), np.asarray(tensor.data).view(np.uint8).reshape(-1))


def test_not_a_gguf_file_is_refused(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(ValueError, match="is not a GGUF file"):
        tensor_table(str(path))
