import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from beryl_stack import stop_process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


ROOTCANAL_GLOB = "lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal"


def rootcanal_binary():
    """Root Canal's packaged binary from .venv-lab (ci/setup installs rootcanal there for the device lab)."""
    import glob
    found = sorted(glob.glob(os.path.join(ROOT, ".venv-lab", ROOTCANAL_GLOB)))
    if not found:
        pytest.fail("Root Canal is missing: ci/setup installs rootcanal into .venv-lab")
    return found[-1]


def listening(port):
    """Whether something listens on TCP `port`, read from /proc: a probe connection to Root Canal's HCI port would
    create a controller."""
    want = f":{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(fields[1].endswith(want) and fields[3] == "0A" for fields in (line.split() for line in table.readlines()[1:]))


def free_ports(count):
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


class Air:
    """Where the tests' controllers live. berylsim serves controller i at its own socket (and TCP base + i); Root Canal
    makes a new controller for each TCP connection to its one HCI port, so there `i` only orders the connections."""

    def __init__(self, name, directory, bin_dir, base=None, hci_port=None):
        self.name, self.dir, self.bin = name, directory, bin_dir
        self.base, self.hci_port = base, hci_port

    def port(self, index):
        """The TCP port a Bumble host reaches controller `index` at."""
        return self.base + index if self.name == "berylsim" else self.hci_port

    def transport(self, index):
        """hcid's --transport for controller `index`."""
        if self.name == "berylsim":
            return f"unix:{self.dir}/controller-{index}.sock"
        return f"tcp:127.0.0.1:{self.hci_port}"

    # The dictionary view older tests and BerylStack read.
    def __getitem__(self, key):
        return {"dir": self.dir, "base": self.base, "bin": self.bin}[key]

    def get(self, key, default=None):
        return {"dir": self.dir, "base": self.base, "bin": self.bin, "air": self}.get(key, default)


def start_air(name):
    """Starts berylsim (two controllers, unix sockets and TCP) or Root Canal (every port free and its own) in a
    temporary directory; returns (Air, stop) where stop() ends it by pid."""
    directory = tempfile.mkdtemp(prefix=f"beryl-interop-{name}-")
    log = open(os.path.join(directory, f"{name}.log"), "w")
    if name == "berylsim":
        base = free_port_pair()
        process = subprocess.Popen(
            [os.path.join(bin_dir(), "berylsim"), "--controllers", "2", "--dir", directory, "--tcp", f"127.0.0.1:{base}"],
            stdout=log, stderr=subprocess.STDOUT)
        air = Air(name, directory, bin_dir(), base=base)
        ready = lambda: os.path.exists(os.path.join(directory, "control.sock"))  # noqa: E731
    else:
        hci, test, link, link_ble = free_ports(4)
        process = subprocess.Popen(
            [rootcanal_binary(), "-hci_port", str(hci), "-test_port", str(test), "-link_port", str(link),
             "-link_ble_port", str(link_ble)],
            stdout=log, stderr=subprocess.STDOUT, cwd=directory)
        air = Air(name, directory, bin_dir(), hci_port=hci)
        ready = lambda: listening(hci)  # noqa: E731
    def stop():
        stop_process(process)
        log.close()
        # As the Swift tests do: BERYL_KEEP_SCRATCH=1 keeps the logs and databases for a post-mortem.
        if os.environ.get("BERYL_KEEP_SCRATCH") != "1":
            shutil.rmtree(directory, ignore_errors=True)

    deadline = time.monotonic() + 15
    try:
        while not ready():
            assert process.poll() is None, open(log.name).read()
            assert time.monotonic() < deadline, f"{name} did not start:\n{open(log.name).read()}"
            time.sleep(0.05)
    except BaseException:
        stop()
        raise
    return air, stop


@pytest.fixture
def berylsim():
    """berylsim with two controllers, for the tests that need its controls (sim commands, controller sockets)."""
    air, stop = start_air("berylsim")
    yield air
    stop()


@pytest.fixture(params=["berylsim", "rootcanal"])
def air(request):
    """Each test that takes `air` runs twice: on berylsim and on Root Canal, Android's controller emulator."""
    air, stop = start_air(request.param)
    yield air
    stop()
