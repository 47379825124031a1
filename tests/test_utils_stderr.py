"""course_lib.utils.stderr_silenced: what C++ code writes to file descriptor 2 inside the block is
dropped, and stderr works again after it."""
import os

from course_lib.utils import stderr_silenced


def test_writes_to_fd_2_inside_the_block_are_dropped_and_stderr_is_restored(capfd):
    with stderr_silenced():
        os.write(2, b"profiler_start\n")  # as a C++ library writes, below sys.stderr
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "after" in err


def test_stderr_is_restored_when_the_block_raises(capfd):
    try:
        with stderr_silenced():
            raise KeyError("inside")
    except KeyError:
        pass
    os.write(2, b"still here\n")
    assert "still here" in capfd.readouterr().err
