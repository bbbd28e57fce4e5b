"""Interop: a Beryl central (hcid + attd + `beryl gatt` / `beryl pair`) pairs and bonds with a Bumble peripheral.

Each runs on berylsim (Beryl on controller 0's unix socket) and on Root Canal; the Bumble peripheral (bumble_secure_peripheral.py) drives
controller 1 over TCP and serves a characteristic that needs an encrypted link.
"""
import os
import subprocess
import sys
import time

import pytest

from beryl_stack import BerylStack, events_in, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "B0B40002-9260-4A9E-8E8A-1F8C2B6A0001"
SECRET_HEX = b"bumble secret".hex()
PEER = "F0:F1:F2:F3:F4:F7/random"  # the Bumble peripheral's static random (and identity) address
REPEATED_ATTEMPTS = 0x09  # SMP Pairing Failed reason (Core Vol 3 Part H §3.5.5)
CONFIRM_VALUE_FAILED = 0x04
REMOTE_USER_TERMINATED = 0x13


class BumblePeripheral:
    def __init__(self, env, *arguments):
        self.path = os.path.join(env["dir"], "bumble-peripheral.log")
        self.log_file = open(self.path, "w")
        self.stderr_file = open(os.path.join(env["dir"], "bumble-peripheral.stderr"), "w")
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, "bumble_secure_peripheral.py"), str(env.port(1)), *arguments],
                                        stdout=self.log_file, stderr=self.stderr_file)
        try:
            wait_for(lambda: self.said() or self.process.poll() is not None, 10, "the Bumble peripheral")
            assert self.said()[:1] == [{"event": "ready", "address": PEER.split('/')[0]}], self.log()
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log_file.close()
        self.stderr_file.close()

    def log(self):
        with open(self.path, errors="replace") as f:
            return f.read()

    def said(self):
        """Every JSON object it printed, one a line (Bumble's own logging goes to bumble-peripheral.stderr); a line still
        being written is not one yet."""
        return events_in(self.log())

    def events(self, event=None):
        """Its events after "ready", or only those named `event`."""
        return [e for e in self.said()[1:] if event is None or e["event"] == event]


def connected(address):
    return {"event": "connected", "peer": f"{address}/P"}


def paired(address, authenticated):
    return {"event": "paired", "peer": f"{address}/P", "authenticated": authenticated, "sc": True}


def disconnected():
    return {"event": "disconnected", "reason": REMOTE_USER_TERMINATED}


def pairing_events(result):
    """What `beryl gatt`/`beryl pair --json` reported of pairing: prompts, and its completion or failure."""
    return [e for e in events_in(result.stdout) if e.get("event") in ("pairing", "pairing-complete", "pairing-failed")]


def read_values(result):
    return [e["value"] for e in events_in(result.stdout) if e.get("event") == "read" and e.get("uuid") == SECRET]


def completed(result, authenticated):
    """Whether `result` reported a pairing with PEER completed: LE Secure Connections, bonded under PEER's identity,
    (un)authenticated."""
    return any(e["event"] == "pairing-complete" and e["peer"] == PEER and e.get("identity") == PEER and e["secureConnections"] is True
               and e["bonded"] is True
               and e["authenticated"] is authenticated for e in pairing_events(result))


def gatt_read(stack, *extra, timeout=20):
    return stack.beryl("gatt", "--runtime-dir", stack.run, "--peer", PEER, "read", SECRET, "--timeout", str(timeout), *extra,
                       "--json", timeout=timeout + 15)


def after_repeated_attempts_wait(attempt, deadline=8):
    """Beryl refuses to pair again with a peer for a couple of seconds after a failure (Core Vol 3 Part H §2.3.6)."""
    give_up = time.monotonic() + deadline
    while True:
        result = attempt()
        refused = any(e.get("event") == "pairing-failed" and e.get("reason") == REPEATED_ATTEMPTS
                      or e.get("event") == "failed" and e.get("smpReason") == REPEATED_ATTEMPTS for e in events_in(result.stdout))
        if not refused or time.monotonic() > give_up:
            return result
        time.sleep(0.5)


def test_beryl_central_pairs_just_works_then_reencrypts(air):
    with BumblePeripheral(air) as bumble, BerylStack(air) as stack:
        stack.start()
        first = gatt_read(stack)
        assert first.returncode == 0, first.stderr
        assert read_values(first) == [SECRET_HEX], first.stdout
        assert completed(first, authenticated=False), first.stdout
        wait_for(lambda: bumble.events("disconnected"), 5, "the first link to go")
        events = bumble.events()
        assert events[1:] == [{"event": "pairing-started"}, {"event": "encrypted", "withBondedKey": False},
                              paired(stack.address, authenticated=False), {"event": "read-secret"}, disconnected()], events

        bonds = stack.bonds()
        assert [b["identity"] for b in bonds] == [PEER], bonds
        assert bonds[0]["authenticated"] is False and bonds[0]["secureConnections"] is True and bonds[0]["irk"] is True, bonds

        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert read_values(again) == [SECRET_HEX], again.stdout
        assert pairing_events(again) == [], f"re-encryption with the bond, no second pairing: {again.stdout}"
        wait_for(lambda: len(bumble.events("disconnected")) == 2, 5, "the second link to go")
        events = bumble.events()
        assert events[6:] == [connected(stack.address), {"event": "encrypted", "withBondedKey": True}, {"event": "read-secret"},
                              disconnected()], events
        assert len(bumble.events("pairing-started")) == 1, events
        bonds = stack.bonds()
        assert bonds[0]["keyEncryptions"] == 1, bonds
        assert bonds[0]["lastKeyEncryption"] == {"outcome": "encrypted"}, bonds


def test_beryl_central_wrong_passkey_then_right_passkey(air):
    with BumblePeripheral(air, "--display", "123456") as bumble, \
            BerylStack(air, attd_args=["--io-capability", "keyboard-only"]) as stack:
        stack.start()
        wrong = stack.beryl("pair", "--runtime-dir", stack.run, "--peer", PEER, "--passkey", "654321", "--timeout", "20", "--json", timeout=35)
        assert wrong.returncode != 0, wrong.stdout
        # Bumble, the responder, finds the commitment made with Beryl's passkey wrong and ends the pairing.
        failed = [e for e in pairing_events(wrong) if e["event"] != "pairing"]
        assert [(e["event"], e["reason"], e["endedByPeer"]) for e in failed] == [("pairing-failed", CONFIRM_VALUE_FAILED, True)], \
            wrong.stdout + wrong.stderr
        # The command failed with the same typed reason: the peer's Pairing Failed, Confirm Value Failed.
        refusal = [(e["operation"], e.get("smpReason"), e.get("byPeer")) for e in events_in(wrong.stdout, "failed")]
        assert refusal == [("pairing", CONFIRM_VALUE_FAILED, True)], wrong.stdout + wrong.stderr
        wait_for(lambda: bumble.events("disconnected"), 5, "the link to go")
        assert bumble.events()[1:] == [{"event": "pairing-started"}, {"event": "displaying-passkey", "passkey": 123456},
                                       {"event": "pairing-failed", "reason": CONFIRM_VALUE_FAILED}, disconnected()], bumble.events()
        assert stack.bonds() == []

        right = after_repeated_attempts_wait(lambda: gatt_read(stack, "--passkey", "123456"))
        assert right.returncode == 0, right.stderr
        assert read_values(right) == [SECRET_HEX], right.stdout
        assert completed(right, authenticated=True), right.stdout
        wait_for(lambda: len(bumble.events("paired")) == 1, 5, "Bumble's side of the pairing")
        assert paired(stack.address, authenticated=True) in bumble.events(), bumble.events()
        bonds = stack.bonds()
        assert len(bonds) == 1 and bonds[0]["identity"] == PEER and bonds[0]["authenticated"] is True, bonds

        # The authenticated bond re-encrypts the next link: no passkey needed, no pairing.
        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert read_values(again) == [SECRET_HEX] and pairing_events(again) == [], again.stdout
        wait_for(lambda: bumble.events()[-1:] == [disconnected()] and {"event": "encrypted", "withBondedKey": True} in bumble.events(), 5,
                 "re-encryption on Bumble's side")
        assert len(bumble.events("pairing-started")) == 2, bumble.events()


def test_beryl_pair_leaves_the_peripheral_bonded_too(air):
    with BumblePeripheral(air) as bumble, BerylStack(air) as stack:
        stack.start()
        result = stack.beryl("pair", "--runtime-dir", stack.run, "--peer", PEER, "--timeout", "20", "--json", timeout=35)
        assert result.returncode == 0, result.stderr
        assert any(e.get("event") == "paired" and e["bonded"] is True for e in events_in(result.stdout)), result.stdout
        wait_for(lambda: bumble.events("disconnected"), 5, "the link to go")
        # Bumble completes a pairing only once it has every key it was promised (Beryl's IRK and identity address).
        assert paired(stack.address, authenticated=False) in bumble.events(), bumble.events()
        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert pairing_events(again) == [], f"re-encryption with the bond, no second pairing: {again.stdout}"
