"""The package on a Debian system of its own: debootstrap makes a minimal bookworm root (cached in $BERYL_CACHE_DIR/board/),
apt installs the .deb there, resolving its Depends from Debian's archive, and the installed stack runs from that root
(chroot) on berylsim's controller 0: the heart-rate central example finds and reads the host's heart-rate peripheral,
and so does the C central built there against the installed libberyl through pkg-config.
Every library comes from the root's own Debian packages, none from this machine's build.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "Tests", "Interop"))
sys.path.insert(0, os.path.join(ROOT, "Tests", "Kernel"))
from beryl_stack import HostHeartRatePeripheral, stop_process, wait_for  # noqa: E402
from test_kernel_user_channel import bin_dir, package_path  # noqa: E402

# Machine-wide, outside any clone, so a fresh clone on this machine reuses what an earlier run fetched (ci/setup
# names the same default); a new machine fills it on first use.
CACHE = os.path.join(os.environ.get("BERYL_CACHE_DIR", "/var/cache/beryl"), "board")
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"


def base_root_tarball():
    """A minbase root, made once: later runs unpack the tarball instead of downloading again."""
    tarball = os.path.join(CACHE, f"{SUITE}-minbase.tar")
    if not os.path.exists(tarball):
        os.makedirs(CACHE, exist_ok=True)
        work = tempfile.mkdtemp(prefix="beryl-debootstrap-", dir=CACHE)
        try:
            made = subprocess.run(["debootstrap", "--variant=minbase", SUITE, work, MIRROR], capture_output=True, text=True)
            assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
            subprocess.run(["tar", "-C", work, "-cf", tarball + ".part", "."], check=True)
            os.rename(tarball + ".part", tarball)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball


def chroot(root, *arguments, timeout=120, env=None):
    """A command in the root, with none of this run's BERYL_* settings: BERYL_BIN_DIR would send the installed CLI to
    the build directory's daemons, which the root does not have."""
    clean = {key: value for key, value in (env or os.environ).items() if not key.startswith("BERYL_")}
    return subprocess.run(["chroot", root, *arguments], capture_output=True, text=True, timeout=timeout, env=clean)


@pytest.fixture(scope="module")
def system():
    if not shutil.which("debootstrap"):
        pytest.fail("debootstrap is missing: ci/setup installs it")
    directory = tempfile.mkdtemp(prefix="beryl-board-")
    root = os.path.join(directory, "root")
    os.makedirs(root)
    subprocess.run(["tar", "-C", root, "-xf", base_root_tarball()], check=True)
    mounts = []
    try:
        # No /dev mount: debootstrap made the root's device nodes, and a devtmpfs there would be the host's own, one
        # failed unmount away from rmtree deleting the host's devices.
        for name, kind in [("proc", "proc"), ("sys", "sysfs")]:
            subprocess.run(["mount", "-t", kind, name, os.path.join(root, name)], check=True)
            mounts.append(os.path.join(root, name))
        deb = package_path(directory)
        shutil.copy(deb, os.path.join(root, "tmp", os.path.basename(deb)))
        shutil.copy("/etc/resolv.conf", os.path.join(root, "etc", "resolv.conf"))
        updated = chroot(root, "apt-get", "update", "-qq", timeout=300)
        assert updated.returncode == 0, updated.stderr
        installed = chroot(root, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "/tmp/" + os.path.basename(deb),
                           timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        name, version, arch = os.path.basename(deb)[:-4].split("_")
        yield {"root": root, "dir": directory, "installed": installed, "deb": deb, "version": version, "arch": arch}
    finally:
        unmounted = all(subprocess.run(["umount", "-l", mount]).returncode == 0 for mount in reversed(mounts))
        if unmounted and os.environ.get("BERYL_KEEP_SCRATCH") != "1":
            shutil.rmtree(directory, ignore_errors=True)


def test_apt_installs_the_package_with_its_depends_from_debian(system):
    assert system["installed"].returncode == 0, system["installed"].stdout[-3000:] + system["installed"].stderr[-3000:]
    status = chroot(system["root"], "dpkg-query", "-W", "-f", "${Status}", "beryl")
    assert status.stdout == "install ok installed", status
    # Every library the programs load resolves inside the root, from its own packages.
    for program in ["beryl", "hcid", "attd", "managerd", "heart-rate-central"]:
        linked = chroot(system["root"], "ldd", f"/usr/libexec/beryl/{program}")
        assert linked.returncode == 0 and "not found" not in linked.stdout, linked.stdout
        assert "/opt/swift" not in linked.stdout, linked.stdout


def test_the_maintainer_scripts_make_the_users_groups_and_state_directory(system):
    root = system["root"]
    beryl = chroot(root, "id", "beryl")
    assert beryl.returncode == 0 and "(beryl)" in beryl.stdout and "(bluetooth)" in beryl.stdout, beryl.stdout
    assert chroot(root, "getent", "group", "beryl-lab").returncode == 0
    state = os.stat(os.path.join(root, "var/lib/beryl"))
    assert oct(state.st_mode & 0o777) == "0o750"
    owner = chroot(root, "stat", "-c", "%U:%G", "/var/lib/beryl").stdout.strip()
    assert owner == "beryl:beryl", owner


@contextlib.contextmanager
def stack_beside_the_host(system):
    """berylsim's two controllers: the host's heart-rate peripheral on 1, the installed stack (`beryl up` in the root)
    on 0; everything stopped by pid, and `beryl down`, afterwards."""
    root = system["root"]
    binaries = bin_dir()
    sim_dir = os.path.join(root, "sim")
    os.makedirs(sim_dir, exist_ok=True)
    log = open(os.path.join(system["dir"], "berylsim.log"), "a")
    sim = subprocess.Popen([os.path.join(binaries, "berylsim"), "--controllers", "2", "--dir", sim_dir], stdout=log, stderr=subprocess.STDOUT)
    host = None
    try:
        wait_for(lambda: os.path.exists(os.path.join(sim_dir, "control.sock")), 10, "berylsim")
        host = HostHeartRatePeripheral(os.path.join(system["dir"], "host"), binaries, f"unix:{sim_dir}/controller-1.sock")
        up = chroot(root, "beryl", "up", "--transport", "unix:/sim/controller-0.sock", timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "poweredOn" in up.stdout, up.stdout
        yield host
        down = chroot(root, "beryl", "down", timeout=60)
        assert down.returncode == 0, down.stderr
    finally:
        try:
            chroot(root, "beryl", "down", timeout=60)
        except subprocess.TimeoutExpired:
            pass
        if host:
            host.stop()
        stop_process(sim, grace=10)
        log.close()


def test_the_installed_stack_runs_the_heart_rate_central_against_the_host(system):
    with stack_beside_the_host(system) as host:
        central = chroot(system["root"], "/usr/libexec/beryl/heart-rate-central", "--count", "2", timeout=60)
        assert central.returncode == 0, central.stdout + central.stderr
        assert "connected" in central.stdout and "sensor location chest" in central.stdout, central.stdout
        assert central.stdout.count(" bpm") == 2, central.stdout
        assert len(host.events("subscribed")) == 1, host.log()


def test_a_c_program_builds_against_the_installed_libberyl_and_reads_the_host(system):
    """libberyl0 and libberyl-dev (ci/package's, beside the beryl package) installed with a compiler: the C central
    example is built in the root through pkg-config, as a C program on a board would be, and does what the Swift one
    does; so does the packaged C example."""
    root = system["root"]
    debs = [os.path.join(os.path.dirname(system["deb"]), f"{name}_{system['version']}_{system['arch']}.deb")
            for name in ("libberyl0", "libberyl-dev")]
    for deb in debs:
        assert os.path.exists(deb), f"ci/package did not leave {deb}"
        shutil.copy(deb, os.path.join(root, "tmp", os.path.basename(deb)))
    installed = chroot(root, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "gcc", "libc6-dev", "pkg-config",
                       *["/tmp/" + os.path.basename(deb) for deb in debs],
                       timeout=900, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    flags = chroot(root, "pkg-config", "--cflags", "--libs", "beryl", "libevent_core")
    assert flags.returncode == 0 and "-lberyl" in flags.stdout, flags.stdout + flags.stderr
    built = chroot(root, "sh", "-c", "cc -std=c11 -Wall -Werror /usr/share/beryl/examples/c/heart_rate_central.c "
                                     "$(pkg-config --cflags --libs beryl libevent_core) -o /tmp/central-c")
    assert built.returncode == 0, built.stdout + built.stderr
    linked = chroot(root, "ldd", "/tmp/central-c")
    # The package's library (Debian's multiarch directory; /lib is /usr/lib there), not a build directory's.
    assert re.search(r"libberyl\.so\.0 => /(usr/)?lib/[^/]+-linux-gnu/libberyl\.so\.0", linked.stdout), linked.stdout
    assert "not found" not in linked.stdout, linked.stdout
    with stack_beside_the_host(system) as host:
        for program in ("/tmp/central-c", "/usr/libexec/beryl/heart-rate-central-c"):
            central = chroot(root, program, "--count", "2", timeout=60)
            assert central.returncode == 0, program + "\n" + central.stdout + central.stderr
            assert "connected" in central.stdout and "sensor location chest" in central.stdout, central.stdout
            assert central.stdout.count(" bpm") == 2 and "reset energy expended" in central.stdout, central.stdout
        assert [(e["value"], e["accepted"]) for e in host.events("controlPointWritten")] == [([1], True)] * 2, host.log()
