"""course_lib.utils.check_output_file and write_text_atomic: a file the user names (``eval --json``,
a benchmark's record) is checked before any work and written atomically beside itself; a checkpoint,
an input, a device, a folder, a file used as a folder, an unwritable folder or an overlong name is
refused in one line, and nothing is left behind (the 2026-11-28 review, E5 and E4)."""
import os
import stat
import tempfile

import pytest
import torch

from course_lib.utils import OutputPathError, check_output_file, write_text_atomic


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")
                  or p.name.startswith(".write-check"))


def test_a_new_file_is_written_and_its_folders_made(tmp_path):
    out = tmp_path / "cards" / "sub" / "card.json"
    # the check writes nothing
    assert check_output_file(out) == str(out) and not out.parent.exists()
    assert write_text_atomic(out, "{}\n") == str(out)
    assert out.read_text() == "{}\n" and leftovers(out.parent) == []
    mask = os.umask(0)
    os.umask(mask)
    # like any file the user writes, not 0600
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


def test_an_existing_text_file_is_replaced_and_keeps_its_mode(tmp_path):
    out = tmp_path / "card.json"
    out.write_text("old")
    out.chmod(0o640)
    write_text_atomic(out, "new")
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_a_checkpoint_is_never_replaced(tmp_path, kind):
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"w": torch.zeros(2)}, ckpt, _use_new_zipfile_serialization=kind == "zip")
    before = ckpt.read_bytes()
    with pytest.raises(OutputPathError,
                       match=r"^--json .*ckpt.pt holds a checkpoint .* choose another file$"):
        write_text_atomic(ckpt, "{}")
    assert ckpt.read_bytes() == before and leftovers(tmp_path) == []


def test_an_input_is_never_replaced_even_through_a_link(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("the input")
    link = tmp_path / "link.json"
    link.symlink_to(data)
    for path in (data, link):
        with pytest.raises(OutputPathError,
                           match="is this command's input .*data.txt: writing there would destroy"):
            check_output_file(path, inputs=[data], option="--out")
    assert data.read_text() == "the input"


def test_a_device_or_a_pipe_is_refused(tmp_path):
    with pytest.raises(OutputPathError, match="^--json /dev/null is not a regular file"):
        check_output_file("/dev/null")  # only checked: nothing is written, even as root
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="is not a regular file .*choose another file"):
        write_text_atomic(fifo, "{}")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and leftovers(tmp_path) == []


def test_a_folder_is_refused_with_a_file_name_to_use(tmp_path):
    folder = tmp_path / "cards"
    folder.mkdir()
    with pytest.raises(OutputPathError,
                       match=r"is a folder: name a file in it, e.g. --json .*cards/out.json"):
        write_text_atomic(folder, "{}")
    assert list(folder.iterdir()) == [] and leftovers(tmp_path) == []


@pytest.mark.parametrize("sub", ["card.json", "deeper/card.json"])
def test_a_file_used_as_a_folder_is_refused(tmp_path, sub):
    (tmp_path / "small.txt").write_text("x")
    with pytest.raises(OutputPathError,
                       match=r"cannot be made: .*small.txt is a file, not a folder"):
        check_output_file(tmp_path / "small.txt" / sub)


def test_an_overlong_name_is_refused(tmp_path):
    with pytest.raises(OutputPathError,
                       match=r"cannot be made: the name x{20}\.\.\. is 305 bytes, more than"):
        check_output_file(tmp_path / ("x" * 300 + ".json"))


def test_an_unwritable_folder_is_refused(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        # what a read-only or immutable folder answers
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputPathError,
                       match=r"the folder .* is not writable \(Operation not permitted\)"):
        check_output_file(tmp_path / "card.json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_a_read_only_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    for path in (ro / "card.json", ro / "sub" / "card.json"):
        with pytest.raises(OutputPathError, match="not writable"):
            check_output_file(path)


def test_a_symlink_is_written_through_and_kept(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new" and leftovers(tmp_path) == []


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_output_file("-") is None
    assert write_text_atomic("-", "{}\n") is None
    assert capsys.readouterr().out == "{}\n" and list(tmp_path.iterdir()) == []  # no file named "-"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    out = tmp_path / "card.json"
    out.write_text("whole")
    with pytest.raises(TypeError):
        write_text_atomic(out, 42)  # not text: fails mid-write
    assert out.read_text() == "whole" and leftovers(tmp_path) == []
