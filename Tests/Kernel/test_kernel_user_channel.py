"""Beryl on a real Linux kernel's Bluetooth core: Debian's kernel boots under qemu (TCG), hci_vhci's hci0 is carried to
berylsim's controller 0 on the host, and inside the guest `beryl up --transport userchannel:hci0` takes it through the
HCI user channel; the heart-rate central example then talks to the heart-rate peripheral example running on a normal
Beryl stack on the host, on berylsim's controller 1. The guest runs once with the programs of the build directory
(BERYL_BIN_DIR) and once with the files the Debian package installs (BERYL_PACKAGE, or ci/package builds one); one
boot serves every test of its kind, and the guest's timings are printed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Interop"))
from beryl_stack import HostHeartRatePeripheral, stop_process, wait_for  # noqa: E402

import guest_vm  # noqa: E402

GUEST_PROGRAMS = ["beryl", "hcid", "attd", "managerd", "heart-rate-central"]


def bin_dir():
    directory = os.environ.get("BERYL_BIN_DIR")
    if not directory:
        directory = subprocess.check_output(["swift", "build", "--show-bin-path"], cwd=guest_vm.ROOT, text=True).strip()
    return directory


def package_path(directory):
    """The .deb under test: BERYL_PACKAGE, or one ci/package builds now (a release build)."""
    deb = os.environ.get("BERYL_PACKAGE")
    if deb:
        return deb
    built = subprocess.run([os.path.join(guest_vm.ROOT, "ci", "package"), "--out", directory], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module", params=["build", "package"])
def boot(request):
    if not shutil.which("qemu-system-x86_64"):
        pytest.fail("qemu-system-x86_64 is missing: ci/setup installs qemu-system-x86")
    directory = tempfile.mkdtemp(prefix=f"beryl-kernel-{request.param}-")
    binaries = bin_dir()
    kernel, modules, order, version = guest_vm.fetch_kernel()
    result = {"source": request.param, "dir": directory, "kernel": version, "modules": order}
    if request.param == "build":
        initramfs, size = guest_vm.build_initramfs(directory, binaries, GUEST_PROGRAMS, modules)
    else:
        deb = package_path(directory)
        initramfs, size, installed, libraries = guest_vm.build_package_initramfs(directory, deb, modules)
        result.update(deb=deb, installed=installed, libraries=libraries, root=os.path.join(directory, "initramfs"))
        assert initramfs, f"dpkg -i failed:\n{installed.stdout}\n{installed.stderr}"
    result["initramfs_bytes"] = size
    log = open(os.path.join(directory, "berylsim.log"), "w")
    sim = subprocess.Popen([os.path.join(binaries, "berylsim"), "--controllers", "2", "--dir", directory],
                           stdout=log, stderr=subprocess.STDOUT)
    guest = None
    host = None
    try:
        wait_for(lambda: os.path.exists(os.path.join(directory, "control.sock")), 10, "berylsim's control socket")
        host = HostHeartRatePeripheral(os.path.join(directory, "host"), binaries, f"unix:{directory}/controller-1.sock")
        guest = guest_vm.GuestRun(directory, kernel, initramfs, os.path.join(directory, "controller-0.sock")).start()
        finished = guest.wait(timeout=float(os.environ.get("BERYL_KERNEL_TIMEOUT", "420")))
        result.update(lines=guest.lines, console=guest.text(), finished=finished, wall=guest.wall, peripheral=host.log(),
                      peripheral_events=host.events())
        yield result
    finally:
        if guest:
            guest.stop()
        if host:
            host.stop()
        stop_process(sim, grace=10)
        log.close()
        if os.environ.get("BERYL_KEEP_SCRATCH") != "1":
            shutil.rmtree(directory, ignore_errors=True)


def lines_starting(result, word):
    return [line[len(word) + 1:] for line in result["lines"] if line.startswith(word + " ")]


def mark(result, name):
    for line in lines_starting(result, "mark"):
        label, _, seconds = line.partition(" ")
        if label == name:
            return float(seconds)
    return None


def explain(result):
    return "guest console (tail):\n" + "\n".join(result["console"].splitlines()[-60:])


def test_the_guest_finishes_without_errors(boot):
    assert boot["finished"], explain(boot)
    assert lines_starting(boot, "error") == [], explain(boot)


def test_the_stack_takes_hci0_from_the_kernel_through_the_user_channel(boot):
    assert mark(boot, "devices") is not None, explain(boot)
    assert mark(boot, "poweredOn") is not None, explain(boot)
    assert any(re.match(r"status=0\b", line) for line in lines_starting(boot, "down")), explain(boot)


def test_the_heart_rate_central_in_the_guest_reads_and_subscribes_across_the_kernel(boot):
    said = [line.split(" ", 1)[1] if " " in line else "" for line in lines_starting(boot, "central")]
    assert any(line.startswith("discovered") for line in said), explain(boot)
    assert "connected" in said, explain(boot)
    assert any(line.startswith("sensor location chest") for line in said), explain(boot)
    beats = [line for line in said if re.match(r"heart rate \d+ bpm", line)]
    assert len(beats) == 3, explain(boot)
    assert lines_starting(boot, "central-status") == ["0"], explain(boot)
    # The host's peripheral saw the guest's central subscribe and write its control point: the wire carried it.
    said = {e["event"]: e for e in boot["peripheral_events"]}
    assert "subscribed" in said, boot["peripheral"]
    assert said.get("controlPointWritten", {}).get("value") == [1] and said["controlPointWritten"]["accepted"], boot["peripheral"]


def test_a_second_stack_is_told_hci0_is_held_by_another_user_channel(boot):
    said = lines_starting(boot, "second-holder")
    assert len(said) == 1, explain(boot)
    assert not said[0].startswith("status=0"), said[0]
    assert "held through the HCI user channel by another program" in said[0], said[0]


def test_a_device_whose_kernel_setup_failed_is_explained_without_the_bluetoothd_hint(boot):
    said = lines_starting(boot, "failed-setup")
    assert len(said) == 1, explain(boot)
    assert not said[0].startswith("status=0"), said[0]
    assert "never finished setting hci1 up" in said[0], said[0]
    assert "bluetoothd" not in said[0], said[0]


def test_print_the_guest_timings(boot):
    """Not a check of speed (TCG on a shared machine): the figures the board page quotes, printed for the log."""
    booted, modules, devices, up = (mark(boot, name) for name in ("booted", "modules", "devices", "poweredOn"))
    central = {}
    for line in lines_starting(boot, "central"):
        seconds, _, text = line.partition(" ")
        for key in ("discovered", "connected", "sensor location", "heart rate"):
            if text.startswith(key) and key not in central:
                central[key] = float(seconds)
    start = mark(boot, "central-start")
    report = [f"{boot['source']}: kernel {boot['kernel']}, initramfs {boot['initramfs_bytes'] / 1e6:.0f} MB, qemu wall {boot['wall']:.1f} s"]
    if None not in (booted, modules, devices, up):
        report.append(f"boot to init {booted:.2f} s; modules {modules - booted:.2f} s; hci0 {devices - modules:.2f} s; "
                      f"beryl up to poweredOn {up - devices:.2f} s")
    if start is not None and central:
        report.append("central from start: " + ", ".join(f"{k} {v - start:.2f} s" for k, v in central.items()))
    print("\nkernel test timings: " + "; ".join(report))
    assert mark(boot, "poweredOn") is not None, explain(boot)


def only_package(boot):
    if boot["source"] != "package":
        pytest.skip("a check of the installed package; the build-directory boot has none")


def test_the_package_installs_where_a_board_looks(boot):
    only_package(boot)
    root = boot["root"]
    assert os.readlink(os.path.join(root, "usr/bin/beryl")) == "../libexec/beryl/beryl"
    for program in ["beryl", "hcid", "attd", "managerd", "berylsim", "heart-rate-central"]:
        assert os.access(os.path.join(root, "usr/libexec/beryl", program), os.X_OK), program
    # The lab's gRPC server (and gRPC, SwiftNIO, BoringSSL with it) is the beryl-pandora package's.
    assert not os.path.exists(os.path.join(root, "usr/libexec/beryl/beryl-pandora"))
    assert not os.path.exists(os.path.join(root, "lib/systemd/system/beryl-pandora.service"))
    for path in ["lib/udev/rules.d/70-beryl.rules", "lib/systemd/system/beryl-hcid@.service", "lib/systemd/system/beryl-managerd.service",
                 "usr/lib/sysusers.d/beryl.conf", "usr/lib/tmpfiles.d/beryl.conf", "usr/share/beryl/hardware/adapters/raspberrypi-4.json",
                 "usr/lib/beryl/swift/libswiftCore.so", "var/lib/dpkg/info/beryl.postinst"]:
        assert os.path.exists(os.path.join(root, path)), path
    assert os.path.isdir(os.path.join(root, "etc/beryl/apps"))
    # The units start what the package installed.
    unit = open(os.path.join(root, "lib/systemd/system/beryl-hcid@.service")).read()
    assert "ExecStart=/usr/libexec/beryl/hcid " in unit and "--profiles-dir /usr/share/beryl/hardware/adapters" in unit
    status = open(os.path.join(root, "var/lib/dpkg/status")).read()
    assert "Package: beryl\nStatus: install ok installed" in status, status


def test_installed_programs_load_the_bundled_swift_runtime_and_are_stripped(boot):
    only_package(boot)
    for program in guest_vm.installed_programs(boot["root"]):
        dynamic = subprocess.run(["readelf", "-d", program], capture_output=True, text=True, check=True).stdout
        assert "[/usr/lib/beryl/swift]" in dynamic, (program, dynamic)
        sections = subprocess.run(["readelf", "-S", program], capture_output=True, text=True, check=True).stdout
        assert ".symtab" not in sections and ".debug_info" not in sections, program
    assert not any(path.startswith("/opt/swift") for path in boot["libraries"]), boot["libraries"]


def test_depends_names_the_package_of_every_library_it_loads(boot):
    only_package(boot)
    fields = subprocess.run(["dpkg-deb", "-f", boot["deb"], "Depends", "Architecture"], capture_output=True, text=True, check=True).stdout
    depends = {entry.strip().split(" ")[0] for entry in fields.split("Depends:", 1)[1].split("\n")[0].split(",")}
    owners = set(boot["libraries"].values())
    assert None not in owners, boot["libraries"]
    assert owners <= depends, f"libraries of {owners - depends} are loaded but not depended on"
    for package in depends:
        shown = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
        assert shown.returncode == 0 and f"Package: {package}" in shown.stdout, f"{package} is not in Debian's archive"
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    assert f"Architecture: {arch}" in fields
