"""The one atomic-write helper: all or nothing, temp files cleaned up, the umask honoured and left alone."""

import os
import stat

import pytest

from seqfile.atomic import AtomicFile, temp_dir_beside, write_bytes


def test_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with AtomicFile(target) as f:
            f.write(b"new, half written")
            raise RuntimeError("writer failed")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["out.bin"]


def test_new_files_follow_the_umask_which_stays_as_it_was(tmp_path):
    old = os.umask(0o027)
    try:
        write_bytes(tmp_path / "a", b"x")
        assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o640
        assert stat.S_IMODE(os.stat(temp_dir_beside(tmp_path / "d")).st_mode) == 0o750
        assert os.umask(0o027) == 0o027  # never flipped behind the caller's back
    finally:
        os.umask(old)


def test_a_program_writing_by_name(tmp_path):
    out = AtomicFile(tmp_path / "k.bin")
    out.file.close()  # another program writes the temporary file by name
    assert os.path.dirname(out.tmp) == str(tmp_path) and os.path.basename(out.tmp).startswith(".k.bin.")
    with open(out.tmp, "wb") as f:
        f.write(b"kernel")
    out.commit()
    assert (tmp_path / "k.bin").read_bytes() == b"kernel"
    partial = AtomicFile(tmp_path / "j.bin")
    with pytest.raises(KeyboardInterrupt):
        with partial as f:
            f.close()
            open(partial.tmp, "wb").write(b"partial")
            raise KeyboardInterrupt
    assert sorted(os.listdir(tmp_path)) == ["k.bin"]


def test_sample_frames_leave_nothing_behind_on_failure(tmp_path, monkeypatch):
    import cv2

    from gpumr.faces import sample
    calls = []
    real = cv2.imencode

    def failing(ext, img, params=None):
        calls.append(ext)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(ext, img, params or [])
    monkeypatch.setattr(cv2, "imencode", failing)
    with pytest.raises(KeyboardInterrupt):
        sample.make_frames(str(tmp_path / "f"), count=5)
    assert os.listdir(tmp_path) == []  # the folder appears whole or not at all; nothing hidden is left
