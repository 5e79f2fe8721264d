"""``one_parse_per_file``: within a block, one gguf-py reader per file (the same path, size and time);
outside it, and once the last block ends, a new one each time."""
import threading

import gguf

from playground.models import gguf_reads


def test_one_reader_per_file_within_a_block_and_none_kept_after(tmp_path, monkeypatch):
    path, other = tmp_path / "a.gguf", tmp_path / "b.gguf"
    path.write_bytes(b"x")
    other.write_bytes(b"y")
    made = []
    with gguf_reads.one_parse_per_file():
        monkeypatch.setattr(gguf_reads, "_original", lambda p, mode="r": made.append(str(p)) or object())
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first
        assert gguf.GGUFReader(tmp_path / "." / "a.gguf") is first
        assert gguf.GGUFReader(other) is not first
        assert gguf.GGUFReader(path, "r+") is not first  # a writable reader is never shared
        with gguf_reads.one_parse_per_file():
            assert gguf.GGUFReader(path) is first
        assert gguf.GGUFReader(path) is first and gguf_reads.held() == 2
        path.write_bytes(b"xx")  # the file changed: parsed anew
        assert gguf.GGUFReader(path) is not first
    assert gguf_reads.held() == 0
    outside = gguf.GGUFReader(path), gguf.GGUFReader(path)
    assert outside[0] is not outside[1]
    assert made == [str(path), str(other), str(path), str(path), str(path), str(path)]


def test_threads_in_blocks_share_a_reader_and_the_last_one_out_drops_it(tmp_path, monkeypatch):
    path = tmp_path / "a.gguf"
    path.write_bytes(b"x")
    with gguf_reads.one_parse_per_file():
        monkeypatch.setattr(gguf_reads, "_original", lambda p, mode="r": object())
    inside, leave = threading.Barrier(2), threading.Event()
    got = []

    def block(wait: bool) -> None:
        with gguf_reads.one_parse_per_file():
            got.append(gguf.GGUFReader(path))
            inside.wait()
            if wait:
                leave.wait()

    waiting = threading.Thread(target=block, args=(True,))
    waiting.start()
    block(False)
    assert gguf_reads.held() == 1  # the other block still runs
    leave.set()
    waiting.join()
    assert got[0] is got[1] and gguf_reads.held() == 0
