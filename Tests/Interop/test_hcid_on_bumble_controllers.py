"""hcid brings up Bumble's software controllers (an independent controller implementation) over TCP."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from beryl_stack import ROOT, BerylStack, stack_status, wait_for
from conftest import bin_dir, free_port_pair

LOCK_PROFILE = os.path.join(ROOT, "Examples/profiles/lock.json")


@contextlib.contextmanager
def two_stacks_on_bumble_controllers(prefix):
    """Bumble's two software controllers over TCP, and a Beryl stack on each; all stopped and removed after."""
    base = free_port_pair()
    controllers = subprocess.Popen(
        [sys.executable, "-m", "bumble.apps.controllers", f"tcp-server:127.0.0.1:{base}", f"tcp-server:127.0.0.1:{base + 1}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stacks = []
    directories = []
    try:
        time.sleep(1.5)
        for index in range(2):
            directory = tempfile.mkdtemp(prefix=f"{prefix}-{index}-")
            directories.append(directory)
            stacks.append(BerylStack({"dir": directory, "bin": bin_dir()}, transport=f"tcp:127.0.0.1:{base + index}").start())
        yield stacks
    finally:
        for stack in stacks:
            stack.stop()
        controllers.terminate()
        controllers.wait(5)
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


def test_hcid_reaches_powered_on_against_bumble_controllers():
    base = free_port_pair()
    directory = tempfile.mkdtemp(prefix="beryl-bumble-ctrl-")
    controllers = subprocess.Popen(
        [sys.executable, "-m", "bumble.apps.controllers", f"tcp-server:127.0.0.1:{base}", f"tcp-server:127.0.0.1:{base + 1}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hcid = None
    try:
        time.sleep(1.5)
        log = open(os.path.join(directory, "hcid.log"), "w")
        hcid = subprocess.Popen(
            [os.path.join(bin_dir(), "hcid"), "--runtime-dir", os.path.join(directory, "run"), "--state-dir",
             os.path.join(directory, "state"), "--transport", f"tcp:127.0.0.1:{base}"],
            stdout=log, stderr=subprocess.STDOUT)
        status = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            status = stack_status(bin_dir(), os.path.join(directory, "run"))
            if status.get("controller", {}).get("state") == "poweredOn":
                break
            time.sleep(0.2)
        controller = status.get("controller", {})
        assert controller.get("state") == "poweredOn", (status, open(os.path.join(directory, "hcid.log")).read())
        assert controller["transport"] == f"tcp:127.0.0.1:{base}"
        assert controller["leAclMtu"] > 0 and controller["leAclBuffers"] > 0
        assert controller["profile"] == "none"
    finally:
        if hcid:
            hcid.terminate()
            hcid.wait(5)
        controllers.terminate()
        controllers.wait(5)
        shutil.rmtree(directory, ignore_errors=True)


def test_a_controller_without_a_public_address_gets_a_static_random_identity():
    """Bumble's controllers report 00:00:00:00:00:00 as their public address. hcid gives each stack a static random
    identity (Core Vol 6 Part B §1.3.2.1), kept in its state directory, and the stack advertises, scans and connects
    with it: a second Beryl stack hears the first at that address and reads from it."""
    with two_stacks_on_bumble_controllers("beryl-identity") as stacks:
        lock, central = stacks
        address = lock.address
        assert address.endswith("/random"), address
        assert int(address[:2], 16) >= 0xC0, f"a static address has its top two bits set: {address}"
        assert central.address.endswith("/random") and central.address != address, (central.address, address)
        with open(os.path.join(lock.state, "identity.json")) as f:
            assert json.load(f) == {"version": 1, "address": address.split("/")[0]}

        lock.start_process("serve", ["beryl", "serve", LOCK_PROFILE, "--runtime-dir", lock.run, "--json"])
        lock.wait_event("serve", "advertising")
        scan = central.beryl("scan", "--runtime-dir", central.run, "--service", "D00D0001-0000-1000-8000-00805F9B34FB",
                             "--count", "1", "--timeout", "20", "--json")
        assert scan.returncode == 0, scan.stderr
        heard = json.loads(scan.stdout.splitlines()[0])
        assert heard["address"] == address, (heard, address)
        read = central.beryl("gatt", "--runtime-dir", central.run, "--peer", heard["identifier"], "read",
                             "D00D0004-0000-1000-8000-00805F9B34FB", "--json")
        assert read.returncode == 0, read.stderr + lock.log("managerd") + central.log("managerd")
        assert json.loads(read.stdout.splitlines()[-1])["value"] == b"locked".hex()

        # The identity outlives hcid: a restarted one takes it back from the state directory.
        name, process, log = next(entry for entry in lock.processes if entry[0] == "hcid")
        process.terminate()
        process.wait(5)
        lock.start_process("hcid-again", ["hcid", "--runtime-dir", lock.run, "--state-dir", lock.state, "--transport", lock.transport])
        wait_for(lambda: lock.status().get("controller", {}).get("state") == "poweredOn", 15, "hcid poweredOn again")
        assert lock.address == address


def test_a_controller_that_never_answers_le_set_phy_keeps_its_links():
    """Bumble's controllers claim the 2M PHY (LE feature bit 8) but send no Command Status for LE Set PHY. The central's
    hcid asks once on the first link; the controller goes on carrying the link, so hcid takes the silence for a
    command it lacks (not a frozen controller): no controller reset, the link and the next ones work, and it does not
    ask again (Core Vol 4 Part E 7.8.49)."""
    with two_stacks_on_bumble_controllers("beryl-phy") as stacks:
        lock, central = stacks
        central.start_process("monitor", ["beryl", "hci", "monitor", "--runtime-dir", central.run, "--json", "--seconds", "60"])
        lock.start_process("serve", ["beryl", "serve", LOCK_PROFILE, "--runtime-dir", lock.run, "--json"])
        lock.wait_event("serve", "advertising")
        time.sleep(1)  # the monitor subscribes before the link exists

        def read():
            run = central.beryl("gatt", "--runtime-dir", central.run, "--peer", lock.address, "read",
                                "D00D0004-0000-1000-8000-00805F9B34FB", "--json", "--timeout", "20", timeout=40)
            assert run.returncode == 0, run.stderr + central.log("hcid")
            assert json.loads(run.stdout.splitlines()[-1])["value"] == b"locked".hex()

        # Two links, each followed by more than hcid's 2-second command timeout.
        for _ in range(2):
            read()
            time.sleep(3)
        wait_for(lambda: central.status().get("controller", {}).get("unansweredCommands") == [0x2032], 5, "hcid giving up on LE Set PHY")
        controller = central.status()["controller"]
        assert controller["timesUnresponsive"] == 0 and controller["state"] == "poweredOn", (controller, central.log("hcid"))
        with open(central.log_path("monitor")) as log:
            sent = [bytes.fromhex(json.loads(line)["h4"]) for line in log if line.strip() and not json.loads(line)["received"]]
        set_phy = [h4 for h4 in sent if h4[:3] == bytes([0x01, 0x32, 0x20])]
        assert len(set_phy) == 1, f"LE Set PHY asked {len(set_phy)} times; once is right"
        resets = [h4 for h4 in sent if h4[:3] == bytes([0x01, 0x03, 0x0C])]
        assert resets == [], "no controller reset after the bring-up"


def test_a_cancel_bumbles_controller_never_completes_is_detected_and_reset():
    """Bumble 0.0.236's controller confirms LE Create Connection Cancel but never sends the LE Connection Complete
    (status 0x02) the spec requires (Core Vol 4 Part E 7.8.13). A connect to a device nobody hears, abandoned when its
    tool's timeout ends it, makes managerd cancel the attempt; hcid waits its command timeout for the completion, then
    counts the wedged cancel in its status and resets the controller, which comes back poweredOn."""
    with two_stacks_on_bumble_controllers("beryl-cancel") as stacks:
        _, central = stacks
        run = central.beryl("connect", "--runtime-dir", central.run, "--peer", "F0:F0:F0:F0:F0:09", "--timeout", "2", "--json", timeout=30)
        assert run.returncode != 0, "nobody advertises as F0:F0:F0:F0:F0:09, so the connect times out"
        wait_for(lambda: central.status().get("controller", {}).get("cancelsNeverCompleted", 0) >= 1, 15,
                 "hcid noticing the cancel Bumble's controller never completed")
        wait_for(lambda: central.status().get("controller", {}).get("state") == "poweredOn", 15, "the controller back after its reset")
