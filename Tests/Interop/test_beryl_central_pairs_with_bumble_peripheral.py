"""Interop: a Beryl central (hcid + attd + `beryl gatt` / `beryl pair`) pairs and bonds with a Bumble peripheral.

Each runs on berylsim (Beryl on controller 0's unix socket) and on Root Canal; the Bumble peripheral (bumble_secure_peripheral.py) drives
controller 1 over TCP and serves a characteristic that needs an encrypted link.
"""
import os
import subprocess
import sys
import time

import pytest

from beryl_stack import BerylStack, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "B0B40002-9260-4A9E-8E8A-1F8C2B6A0001"
SECRET_HEX = b"bumble secret".hex()
PEER = "F0:F1:F2:F3:F4:F7/random"  # the Bumble peripheral's static random (and identity) address


class BumblePeripheral:
    def __init__(self, env, *arguments):
        self.path = os.path.join(env["dir"], "bumble-peripheral.log")
        self.log_file = open(self.path, "w")
        self.stderr_file = open(os.path.join(env["dir"], "bumble-peripheral.stderr"), "w")
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, "bumble_secure_peripheral.py"), str(env.port(1)), *arguments],
                                        stdout=self.log_file, stderr=self.stderr_file)
        try:
            wait_for(lambda: "ready " in self.log() or self.process.poll() is not None, 10, "the Bumble peripheral")
            assert f"ready {PEER.split('/')[0]}" in self.log(), self.log()
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

    def events(self):
        """Its event lines after "ready" (Bumble's own logging goes to bumble-peripheral.stderr)."""
        return self.log().splitlines()[1:]


def gatt_read(stack, *extra, timeout=20):
    return stack.beryl("gatt", "--runtime-dir", stack.run, "--peer", PEER, "read", SECRET, "--timeout", str(timeout), *extra,
                       timeout=timeout + 15)


def after_repeated_attempts_wait(attempt, deadline=8):
    """Beryl refuses to pair again with a peer for a couple of seconds after a failure (Core Vol 3 Part H §2.3.6)."""
    give_up = time.monotonic() + deadline
    while True:
        result = attempt()
        refused = "repeatedAttempts" in result.stderr or "reason=9" in result.stdout
        if not refused or time.monotonic() > give_up:
            return result
        time.sleep(0.5)


def test_beryl_central_pairs_just_works_then_reencrypts(air):
    with BumblePeripheral(air) as bumble, BerylStack(air) as stack:
        stack.start()
        first = gatt_read(stack)
        assert first.returncode == 0, first.stderr
        assert f"event=read uuid={SECRET} value={SECRET_HEX}" in first.stdout, first.stdout
        assert "event=pairing-complete" in first.stdout, first.stdout
        assert f"LE Secure Connections, unauthenticated, bonded as {PEER}" in first.stdout, first.stdout
        wait_for(lambda: "disconnected" in bumble.log(), 5, "the first link to go")
        events = bumble.events()
        assert events[1:] == ["pairing started", "encrypted during pairing",
                              f"paired {stack.address}/P authenticated=False sc=True", "read secret", "disconnected 0x13"], events

        bonds = stack.bonds()
        assert [b["identity"] for b in bonds] == [PEER], bonds
        assert bonds[0]["authenticated"] is False and bonds[0]["secureConnections"] is True and bonds[0]["irk"] is True, bonds

        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert f"value={SECRET_HEX}" in again.stdout, again.stdout
        assert "pairing" not in again.stdout, f"re-encryption with the bond, no second pairing: {again.stdout}"
        wait_for(lambda: bumble.log().count("disconnected") == 2, 5, "the second link to go")
        events = bumble.events()
        assert events[6:] == [f"connected {stack.address}/P", "encrypted with bonded key", "read secret", "disconnected 0x13"], events
        assert sum(e.startswith("pairing started") for e in events) == 1, events
        bonds = stack.bonds()
        assert bonds[0]["keyEncryptions"] == 1, bonds
        assert bonds[0]["lastKeyEncryption"] == {"outcome": "encrypted"}, bonds


def test_beryl_central_wrong_passkey_then_right_passkey(air):
    with BumblePeripheral(air, "--display", "123456") as bumble, \
            BerylStack(air, attd_args=["--io-capability", "keyboard-only"]) as stack:
        stack.start()
        wrong = stack.beryl("pair", "--runtime-dir", stack.run, "--peer", PEER, "--passkey", "654321", "--timeout", "20", timeout=35)
        assert wrong.returncode != 0, wrong.stdout
        # Bumble, the responder, finds the commitment made with Beryl's passkey wrong and ends the pairing.
        assert "confirmValueFailed" in wrong.stderr and "the peer sent Pairing Failed" in wrong.stderr, wrong.stderr
        assert "the peer ended it, reason 0x4" in wrong.stdout, wrong.stdout
        wait_for(lambda: "disconnected" in bumble.log(), 5, "the link to go")
        assert bumble.events()[1:] == ["pairing started", "displaying passkey 123456", "pairing failed 0x04", "disconnected 0x13"], bumble.events()
        assert stack.bonds() == []

        right = after_repeated_attempts_wait(lambda: gatt_read(stack, "--passkey", "123456"))
        assert right.returncode == 0, right.stderr
        assert f"value={SECRET_HEX}" in right.stdout, right.stdout
        assert f"LE Secure Connections, authenticated, bonded as {PEER}" in right.stdout, right.stdout
        wait_for(lambda: bumble.log().count("paired") == 1, 5, "Bumble's side of the pairing")
        assert f"paired {stack.address}/P authenticated=True sc=True" in bumble.events(), bumble.events()
        bonds = stack.bonds()
        assert len(bonds) == 1 and bonds[0]["identity"] == PEER and bonds[0]["authenticated"] is True, bonds

        # The authenticated bond re-encrypts the next link: no passkey needed, no pairing.
        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert f"value={SECRET_HEX}" in again.stdout and "pairing" not in again.stdout, again.stdout
        wait_for(lambda: bumble.events()[-1:] == ["disconnected 0x13"] and "encrypted with bonded key" in bumble.events(), 5,
                 "re-encryption on Bumble's side")
        assert bumble.log().count("pairing started") == 2, bumble.events()


def test_beryl_pair_leaves_the_peripheral_bonded_too(air):
    with BumblePeripheral(air) as bumble, BerylStack(air) as stack:
        stack.start()
        paired = stack.beryl("pair", "--runtime-dir", stack.run, "--peer", PEER, "--timeout", "20", timeout=35)
        assert paired.returncode == 0, paired.stderr
        assert "bonded=true" in paired.stdout, paired.stdout
        wait_for(lambda: "disconnected" in bumble.log(), 5, "the link to go")
        # Bumble completes a pairing only once it has every key it was promised (Beryl's IRK and identity address).
        assert f"paired {stack.address}/P authenticated=False sc=True" in bumble.events(), bumble.events()
        again = gatt_read(stack)
        assert again.returncode == 0, again.stderr
        assert "pairing" not in again.stdout, f"re-encryption with the bond, no second pairing: {again.stdout}"
