"""Two Beryl stacks (and Beryl with a Bumble host) on one air, run on berylsim and on Root Canal (Android's controller emulator, an independent
controller implementation): hcid's bring-up, scanning with and without duplicates, connections in both directions
with GATT, pairing (Just Works and Passkey Entry), reconnection with the bond, and a link lost without a word.
"""
import json
import os
import subprocess
import sys
import time

from beryl_stack import ROOT, BerylStack, events_in, stop_process, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
HEART_RATE = os.path.join(ROOT, "Examples/profiles/heart-rate.json")
SECRET = "D00D0002-0000-1000-8000-00805F9B34FB"  # secure-lock.json: readable on an encrypted link only
LOCKED_HEX = b"locked".hex()
BODY_SENSOR_LOCATION = "2A38"


def two_stacks(air, a_args=(), b_args=()):
    """Stack A on controller 0, stack B on controller 1, each in its own directory under the air's."""
    stacks = []
    for index, attd_args in enumerate([a_args, b_args]):
        directory = os.path.join(air["dir"], "ab"[index])
        os.makedirs(directory, exist_ok=True)
        env = {"dir": directory, "bin": air["bin"], "air": air}
        stacks.append(BerylStack(env, controller=index, attd_args=attd_args, transport=air.transport(index)))
    return stacks


def events(result):
    return events_in(result.stdout)


def start(stacks):
    for stack in stacks:
        stack.start()
        assert stack.status()["controller"]["state"] == "poweredOn"


def test_bring_up_and_scanning_with_and_without_duplicates(air):
    a, b = two_stacks(air)
    with a, b:
        start([a, b])
        assert a.address != b.address, "each stack has its own controller"
        b.start_process("advertise", ["beryl", "advertise", "--name", "Beryl B", "--service", "FEED", "--runtime-dir", b.run, "--json"])
        b.wait_event("advertise", "advertising", lambda e: e["name"] == "Beryl B" and e["services"] == ["FEED"])
        once = a.beryl("scan", "--runtime-dir", a.run, "--service", "FEED", "--timeout", "3", "--json", timeout=30)
        assert once.returncode == 0, once.stderr
        found = [e for e in events(once) if e.get("name") == "Beryl B"]
        assert len(found) == 1, once.stdout  # one discovery per peripheral without duplicates
        every = a.beryl("scan", "--runtime-dir", a.run, "--service", "FEED", "--duplicates", "--timeout", "3", "--json", timeout=30)
        assert every.returncode == 0, every.stderr
        reports = [e for e in events(every) if e.get("name") == "Beryl B"]
        assert len(reports) >= 3, every.stdout  # advertising every 100 ms or so: several reports in 3 s
        assert {e["identifier"] for e in reports} == {found[0]["identifier"]}, "the same peripheral each time"


def test_connections_both_ways_with_gatt(air):
    a, b = two_stacks(air)
    with a, b:
        start([a, b])
        for central, peripheral in [(a, b), (b, a)]:
            peripheral.start_process("serve", ["beryl", "serve", HEART_RATE, "--runtime-dir", peripheral.run, "--json"])
            peripheral.wait_event("serve", "advertising")
            read = central.beryl("gatt", "--runtime-dir", central.run, "--peer", peripheral.address, "read", BODY_SENSOR_LOCATION,
                                 "--json", "--timeout", "20", timeout=40)
            assert read.returncode == 0, read.stderr
            values = [e for e in events(read) if e.get("event") == "read"]
            assert values and values[0]["value"] == "02", read.stdout  # heart-rate.json: on the wrist
            subscribed = central.beryl("gatt", "--runtime-dir", central.run, "--peer", peripheral.address, "subscribe", "2A37",
                                       "--count", "2", "--json", "--timeout", "20", timeout=40)
            assert subscribed.returncode == 0, subscribed.stderr
            assert len([e for e in events(subscribed) if e.get("event") == "notification"]) == 2, subscribed.stdout
            peripheral.stop_process("serve")


def monitored(monitor_log, received):
    """Every H4 packet of `beryl hci monitor --json` in one direction, as bytes."""
    packets = []
    for line in open(monitor_log).read().splitlines():
        if line.startswith("{"):
            packet = json.loads(line)
            if packet["received"] == received:
                packets.append(bytes.fromhex(packet["h4"]))
    return packets


def le_meta(monitor_log, subevent):
    """The parameters after the subevent of every LE Meta event (H4 04, code 3E) of this subevent hcid received."""
    return [h4[4:] for h4 in monitored(monitor_log, True) if len(h4) > 3 and h4[:2] == bytes([0x04, 0x3E]) and h4[3] == subevent]


def test_new_links_carry_251_octet_pdus_on_the_2m_phy(air):
    """The link's central asks for the 2M PHY (Core Vol 4 Part E 7.8.49) and both controllers report the change. Where
    the controller has the Data Length Extension (berylsim), hcid suggests 251-octet PDUs at bring-up (7.8.35), each side
    asks for them on the new link (7.8.33), and both report 251 each way; Root Canal as started here has 27-octet
    buffers and no Data Length Extension, and is not asked."""
    a, b = two_stacks(air)
    with a, b:
        start([a, b])
        b.start_process("serve", ["beryl", "serve", HEART_RATE, "--runtime-dir", b.run, "--json"])
        b.wait_event("serve", "advertising")
        for stack in (a, b):
            stack.start_process("monitor", ["beryl", "hci", "monitor", "--runtime-dir", stack.run, "--json", "--seconds", "60"])
        time.sleep(1)  # the monitors subscribe before the link exists
        read = a.beryl("gatt", "--runtime-dir", a.run, "--peer", b.address, "read", BODY_SENSOR_LOCATION, "--json", "--timeout", "20", timeout=40)
        assert read.returncode == 0, read.stderr
        set_data_length = bytes([0x01, 0x22, 0x20])  # H4 command, LE Set Data Length
        for stack, role in ((a, "central"), (b, "peripheral")):
            log = stack.log_path("monitor")
            # LE PHY Update Complete: status, handle (2), TX PHY, RX PHY (7.7.65.12).
            wait_for(lambda: any(p[0] == 0 and p[3:5] == bytes([2, 2]) for p in le_meta(log, 0x0C)), 10, f"the {role}'s 2M PHY")
            if air.name == "berylsim":
                # LE Data Length Change: handle (2), max TX octets (2), time (2), max RX octets (2), time (2) (7.7.65.7).
                wait_for(lambda: any(p[2:4] == bytes([251, 0]) and p[6:8] == bytes([251, 0]) for p in le_meta(log, 0x07)), 10,
                         f"the {role}'s 251-octet PDUs")
                assert any(h4.startswith(set_data_length) for h4 in monitored(log, False)), f"the {role} asked for its length"
            else:
                assert not any(h4.startswith(set_data_length) for h4 in monitored(log, False)), "a controller without DLE is not asked"
                assert le_meta(log, 0x07) == []
            stack.stop_process("monitor")


def test_just_works_pairing_then_reconnection_with_the_bond(air):
    a, b = two_stacks(air)
    with a, b:
        start([a, b])
        b.serve()
        paired = a.beryl("pair", "--runtime-dir", a.run, "--peer", b.address, "--json", timeout=60)
        assert paired.returncode == 0, paired.stdout + paired.stderr
        assert any(e.get("event") == "paired" and e["bonded"] and e["encrypted"] and e["secureConnections"] for e in events(paired)), paired.stdout
        assert len(a.bonds()) == 1 and len(b.bonds()) == 1
        # A new link re-encrypts with the bond's key: the secret reads without pairing again.
        read = a.beryl("gatt", "--runtime-dir", a.run, "--peer", b.address, "read", SECRET, "--json", "--timeout", "20", timeout=40)
        assert read.returncode == 0, read.stderr
        assert any(e.get("event") == "read" and e.get("value") == LOCKED_HEX for e in events(read)), read.stdout
        assert not any(e.get("event") in ("paired", "pairing-complete") for e in events(read)), "re-encryption, not pairing"
        b.wait_event("serve", "security", lambda e: e["encrypted"] and e["bonded"])


def test_passkey_entry_with_keyboards_on_both_sides(air):
    # KeyboardOnly on both sides: each enters the same passkey (Core Vol 3 Part H §2.3.5.1, Table 2.8).
    keyboard = ["--io-capability", "keyboard-only"]
    a, b = two_stacks(air, a_args=keyboard, b_args=keyboard)
    with a, b:
        start([a, b])
        b.serve(os.path.join(ROOT, "Examples/profiles/secure-lock.json"), "--passkey", "314159")
        wrong = a.beryl("pair", "--runtime-dir", a.run, "--peer", b.address, "--passkey", "271828", "--json", "--timeout", "30", timeout=60)
        assert wrong.returncode != 0, wrong.stdout
        assert a.bonds() == [] and b.bonds() == []
        time.sleep(3)  # a failed pairing holds off the next attempt for a while (Core Vol 3 Part H §2.3.6)
        right = a.beryl("pair", "--runtime-dir", a.run, "--peer", b.address, "--passkey", "314159", "--json", "--timeout", "30", timeout=60)
        assert right.returncode == 0, right.stdout + right.stderr
        bonds = a.bonds()
        assert len(bonds) == 1 and bonds[0]["authenticated"] is True, bonds


def link_lost(air, a, peer, leave_root_canal):
    """A holds a link to `peer` with beryl connect, the peer leaves the air, and A's report of the loss is returned
    after checking it names the code the air's kind of loss gives."""
    held = a.start_process("connect", ["beryl", "connect", "--runtime-dir", a.run, "--peer", peer, "--json", "--timeout", "20"])
    a.wait_event("connect", "connected", timeout=30)
    if air.name == "berylsim":
        # The peer leaves A's range: no LL_TERMINATE_IND comes, and the link ends on its supervision timeout (HCI 0x08,
        # Core Vol 6 Part B §4.5.2), which Core Bluetooth reports as connectionTimeout.
        subprocess.run([os.path.join(air["bin"], "beryl"), "sim", "range", "--dir", air["dir"], "1", "out"], check=True)
        expected = "connectionTimeout"
    else:
        # Root Canal has no supervision timeout: a device leaves its air when its host's connection closes, and its
        # controller ends the links as one powering off would (LL_TERMINATE_IND), so A hears the peer end it.
        leave_root_canal()
        expected = "peripheralDisconnected"
    wait_for(lambda: held.poll() is not None, 40, f"A to see the link lost:\n{a.log('connect')}")
    lost = a.events("connect", "disconnected")
    assert held.returncode == 2 and len(lost) == 1 and lost[0]["error"] == expected, a.log("connect")
    return lost[0]


def test_a_lost_peer_ends_the_link_and_a_new_link_follows(air):
    a, b = two_stacks(air)
    with a, b:
        start([a, b])
        # Through managerd, which advertises again once a new hcid is up (a --direct serve ends with its hcid).
        b.start_process("serve", ["beryl", "serve", HEART_RATE, "--runtime-dir", b.run, "--json"])
        b.wait_event("serve", "advertising")
        lost = link_lost(air, a, b.address, leave_root_canal=lambda: b.kill("hcid"))
        assert lost["by"] == "peer", lost
        # B comes back (in range; or a new hcid, which Root Canal gives a new controller) and A links to it again.
        if air.name == "berylsim":
            subprocess.run([os.path.join(air["bin"], "beryl"), "sim", "range", "--dir", air["dir"], "1", "in"], check=True)
        else:
            b.start_process("hcid-again", ["hcid", "--runtime-dir", b.run, "--state-dir", b.state, "--transport", b.transport])
            wait_for(lambda: b.status().get("controller", {}).get("state") == "poweredOn", 15, "B's new hcid poweredOn")
        again = a.beryl("connect", "--runtime-dir", a.run, "--peer", b.address, "--hold", "1", "--json", "--timeout", "20", timeout=45)
        assert again.returncode == 0, again.stdout + again.stderr
        assert [e["by"] for e in events(again) if e.get("event") == "disconnected"] == ["us"], again.stdout


class BumbleAdvertiser:
    """bumble_peripheral.py on controller 1: advertises "Bumble HRM" (Heart Rate) and serves GATT until stopped."""

    def __init__(self, air):
        self.path = os.path.join(air["dir"], "bumble-peripheral.log")
        self.log_file = open(self.path, "w")
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, "bumble_peripheral.py"), str(air.port(1)),
                                         os.path.join(air["dir"], "bumble-writes.txt")], stdout=self.log_file, stderr=subprocess.STDOUT)
        ready = lambda: events_in(open(self.path).read(), "ready")  # noqa: E731
        wait_for(lambda: ready() or self.process.poll() is not None, 15, "the Bumble peripheral")
        assert ready(), open(self.path).read()
        self.address = ready()[0]["address"].split("/")[0] + "/random"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_process(self.process)
        self.log_file.close()


def one_stack(air):
    directory = os.path.join(air["dir"], "a")
    os.makedirs(directory, exist_ok=True)
    return BerylStack({"dir": directory, "bin": air["bin"], "air": air}, controller=0, transport=air.transport(0))


def test_beryl_scans_a_bumble_advertiser_with_and_without_duplicates(air):
    with one_stack(air) as a:
        a.start()
        with BumbleAdvertiser(air):  # Bumble advertises every 100 ms
            once = a.beryl("scan", "--runtime-dir", a.run, "--service", "180D", "--timeout", "6", "--json", timeout=30)
            assert once.returncode == 0, once.stderr
            assert len([e for e in events(once) if e.get("name") == "Bumble HRM"]) == 1, once.stdout
            every = a.beryl("scan", "--runtime-dir", a.run, "--service", "180D", "--duplicates", "--timeout", "6", "--json", timeout=30)
            assert every.returncode == 0, every.stderr
            assert len([e for e in events(every) if e.get("name") == "Bumble HRM"]) >= 3, every.stdout


def test_a_bumble_peripheral_that_vanishes_ends_beryls_link(air):
    with one_stack(air) as a:
        a.start()
        with BumbleAdvertiser(air) as bumble:
            link_lost(air, a, bumble.address, leave_root_canal=bumble.process.kill)
            # The stack carries on.
            assert a.status()["controller"]["state"] == "poweredOn"
