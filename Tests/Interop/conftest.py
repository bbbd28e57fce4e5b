import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def bin_dir() -> str:
    directory = os.environ.get("BERYL_BIN_DIR")
    if not directory:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        directory = subprocess.check_output(["swift", "build", "--show-bin-path"], cwd=root, text=True).strip()
    return directory


def free_port_pair() -> int:
    """A base port whose next port is free too (berylsim serves controller i at base + i)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base >= 65000:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", base))
                b.bind(("127.0.0.1", base + 1))
            return base
        except OSError:
            continue
    raise RuntimeError("no free pair of TCP ports on loopback")


@pytest.fixture
def berylsim():
    """Starts berylsim with two controllers over TCP in a temporary directory; stops it by pid."""
    directory = tempfile.mkdtemp(prefix="beryl-interop-")
    base = free_port_pair()
    log = open(os.path.join(directory, "berylsim.log"), "w")
    process = subprocess.Popen(
        [os.path.join(bin_dir(), "berylsim"), "--controllers", "2", "--dir", directory, "--tcp", f"127.0.0.1:{base}"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(directory, "control.sock")):
        assert process.poll() is None, open(os.path.join(directory, "berylsim.log")).read()
        assert time.monotonic() < deadline, "berylsim did not start"
        time.sleep(0.05)
    yield {"dir": directory, "base": base, "bin": bin_dir()}
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    # As the Swift tests do: BERYL_KEEP_SCRATCH=1 keeps the logs and databases for a post-mortem.
    if os.environ.get("BERYL_KEEP_SCRATCH") != "1":
        shutil.rmtree(directory, ignore_errors=True)
