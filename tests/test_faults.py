"""The faults a cluster user meets (issue 64), each named in one line with nothing lost: a write that
runs out of space, a signal to stop, a second trainer on one shard, a damaged file. Unit checks here;
the workflow under each fault, resumed to the unbroken run's tables, in tests/test_reliability.py."""
import errno
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from icl.store import files
from icl.train import stopping


def _write(n, then):
    def go(tmp):
        with open(tmp, "wb") as fh:
            fh.write(b"x" * n)
        raise then
    return go


@pytest.mark.parametrize("fault", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 168128 vs 168000"),   # torch.save's
    OSError("IOError: No space left on device. Detail: [errno 28]"),                                 # arrow's
])
def test_a_write_out_of_space_is_one_line_naming_file_bytes_and_free_space(tmp_path, fault):
    path = tmp_path / "shard.npz"
    path.write_bytes(b"old")                         # what was there before is kept, untouched
    with pytest.raises(files.DiskFull) as e:
        with files.atomic_path(str(path)) as tmp:
            _write(4096, fault)(tmp)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"no space left on the device to write {path}: it failed after 4,096 bytes")
    assert "bytes free" in msg and "rerun the same command" in msg
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["shard.npz"]


def test_other_write_errors_are_not_called_a_full_disk(tmp_path):
    with pytest.raises(ValueError, match="bad value"):
        with files.atomic_path(str(tmp_path / "t.parquet")) as tmp:
            _write(10, ValueError("bad value"))(tmp)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_says_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    """Through `icl`'s entry point: exit 1 and one line, no traceback."""
    from icl import cli

    def full(args):
        with files.atomic_path(str(tmp_path / "summary.parquet")) as tmp:
            _write(100, OSError(errno.ENOSPC, "No space left on device"))(tmp)
    monkeypatch.setattr(cli, "cmd_claims", full)
    with pytest.raises(SystemExit) as e:
        cli.main(["claims"])
    assert str(e.value).startswith("error: no space left on the device to write") and "Traceback" not in str(e.value)


def test_a_damaged_file_is_moved_aside_with_a_date(tmp_path):
    p = tmp_path / "x.npz"
    p.write_bytes(b"broken")
    dest = files.move_aside(str(p))
    assert not p.exists() and open(dest, "rb").read() == b"broken"
    assert os.path.basename(dest).startswith("x.npz.damaged-") and len(os.path.basename(dest)) == len("x.npz.damaged-") + 15


HOLDER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from icl.store.files import shard_lock
    with shard_lock(sys.argv[1], "first") as todo:
        print("locked", flush=True)
        time.sleep(1.5)
        np.savez(sys.argv[1][:-4], done=np.arange(3))
""")


def test_a_second_trainer_waits_and_finds_the_shard_done(tmp_path, capfd):
    """A double submission: the first trainer holds the shard; the second says so in one line,
    waits, and finds the shard written: it trains nothing (and so writes nothing torn)."""
    out = str(tmp_path / "s.npz")
    first = subprocess.Popen([sys.executable, "-c", HOLDER, out], stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "locked"
    t = time.time()
    with files.shard_lock(out, "second") as todo:
        waited = time.time() - t
    assert first.wait(30) == 0
    assert not todo and waited > 0.5
    err = capfd.readouterr().err
    assert f"[second] pid {first.pid} on " in err and "is training this shard already; waiting for it" in err
    assert "[second] another trainer finished this shard meanwhile: nothing to do" in err
    np.testing.assert_array_equal(np.load(out)["done"], np.arange(3))
    with files.shard_lock(out + ".other.npz", "alone") as todo:      # no other trainer: no wait, work to do
        assert todo


def test_a_stop_request_is_read_not_obeyed_at_once():
    """SIGTERM and SIGUSR1 set the flag the loop reads at its epoch's end; outside, the old handlers."""
    import signal
    old = signal.getsignal(signal.SIGTERM)
    with stopping.StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.signal == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is old
