"""Interop: a Bumble central pairs and bonds with a Beryl peripheral (hcid + attd + `beryl serve secure-lock.json`).

Each runs on berylsim (Beryl on controller 0's unix socket) and on Root Canal; Bumble drives controller 1 over TCP.
"""
import asyncio
import time

import pytest
from bumble.att import ATT_Error
from bumble.core import ProtocolError

from beryl_stack import BerylStack
from bumble_secure_central import CENTRAL_ADDRESS, BumbleCentral, PasskeyFromLog

INSUFFICIENT_AUTHENTICATION = 0x05
INSUFFICIENT_ENCRYPTION = 0x0F
CONFIRM_VALUE_FAILED = 0x04
CENTRAL = f"{CENTRAL_ADDRESS}/random"  # how Beryl names the Bumble central


async def served(stack, event, match=lambda _: True, timeout=10):
    """Waits, without blocking Bumble's loop, for an event `beryl serve --json` reported that `match` accepts."""
    deadline = time.monotonic() + timeout
    while not any(match(e) for e in stack.events("serve", event)):
        assert time.monotonic() < deadline, f"timed out waiting for a {event!r} event in serve.log:\n{stack.log('serve')}"
        await asyncio.sleep(0.05)


def bonded_with_central(authenticated):
    """A pairing-complete event: LE Secure Connections with the Bumble central, bonded, (un)authenticated."""
    return lambda e: (e["peer"] == CENTRAL and e["secureConnections"] and e["bonded"] and e["authenticated"] == authenticated)


def encrypted_with_bond(e):
    return e["encrypted"] and e["bonded"]


async def read_error(link):
    with pytest.raises(ATT_Error) as error:
        await link.read_secret()
    return error.value.error_code


async def bonded_keys(central):
    stored = await central.device.keystore.get_all()
    assert len(stored) == 1, stored
    return stored[0]


async def reconnect_and_reencrypt(central, stack):
    """A second connection reads the secret after re-encrypting with the stored LTK, without pairing again."""
    link = await central.connect()
    # The peer knows us now: the read fails for want of encryption, not of authentication.
    assert await read_error(link) == INSUFFICIENT_ENCRYPTION
    await asyncio.wait_for(link.connection.encrypt(), 10)
    assert link.connection.encryption != 0
    assert await link.read_secret() == b"locked"
    assert link.pairings == [] and link.pairing_failures == [], "re-encryption, not pairing"
    await served(stack, "security", encrypted_with_bond)
    await central.disconnect(link)


def test_just_works_bond_and_reencrypt_on_reconnection(air):
    with BerylStack(air) as stack:
        stack.start()
        stack.serve()
        beryl_address = stack.address

        async def scenario():
            async with BumbleCentral(air.port(1)) as central:
                link = await central.connect()
                assert await read_error(link) == INSUFFICIENT_AUTHENTICATION, "no reading the secret before pairing"

                await asyncio.wait_for(link.connection.pair(), 20)
                assert link.pairing_failures == [] and len(link.pairings) == 1
                assert link.connection.encryption != 0 and link.connection.sc
                address, keys = await bonded_keys(central)
                assert address.startswith(beryl_address), (address, beryl_address)
                assert keys.ltk is not None and not keys.ltk.authenticated, "Just Works: unauthenticated LTK"
                assert keys.irk is not None, "Beryl distributed its IRK"
                assert await link.read_secret() == b"locked"
                await served(stack, "pairing-complete", bonded_with_central(authenticated=False))
                await central.disconnect(link)

                await reconnect_and_reencrypt(central, stack)
                return central.identity

        identity = asyncio.run(scenario())
        assert len(stack.events("serve", "pairing-complete")) == 1, stack.log("serve")
        # One link encrypted by pairing (no bond yet), and the next with the bond's key.
        security = stack.events("serve", "security")
        assert any(e["encrypted"] and not e["bonded"] for e in security), stack.log("serve")
        assert any(encrypted_with_bond(e) for e in security), stack.log("serve")
        bonds = stack.bonds()
        assert [b["identity"] for b in bonds] == [f"{identity}/random"], bonds
        assert bonds[0]["authenticated"] is False and bonds[0]["secureConnections"] is True, bonds
        assert bonds[0]["irk"] is True, "Bumble distributed its IRK"


def test_passkey_entry_displayed_by_beryl_typed_by_bumble(air):
    with BerylStack(air, attd_args=["--io-capability", "display-only"]) as stack:
        stack.start()
        stack.serve()
        keyboard = PasskeyFromLog(stack.displayed_passkey)

        async def scenario():
            async with BumbleCentral(air.port(1), keyboard, mitm=True) as central:
                link = await central.connect()
                assert await read_error(link) == INSUFFICIENT_AUTHENTICATION
                await asyncio.wait_for(link.connection.pair(), 30)
                assert link.pairing_failures == [] and len(link.pairings) == 1
                _, keys = await bonded_keys(central)
                assert keys.ltk.authenticated, "passkey entry: authenticated LTK"
                assert await link.read_secret() == b"locked"
                await served(stack, "pairing-complete", bonded_with_central(authenticated=True))
                await central.disconnect(link)
                await reconnect_and_reencrypt(central, stack)

        asyncio.run(scenario())
        assert len(keyboard.asked) == 1, keyboard.asked
        displayed, typed = keyboard.asked[0]
        assert displayed == typed
        shown = [(e["peer"], e["number"]) for e in stack.events("serve", "pairing") if e["kind"] == "displayPasskey"]
        assert shown == [(CENTRAL, displayed)], stack.log("serve")
        bonds = stack.bonds()
        assert len(bonds) == 1 and bonds[0]["authenticated"] is True and bonds[0]["secureConnections"] is True, bonds


def test_wrong_passkey_fails_with_confirm_value_failed(air):
    with BerylStack(air, attd_args=["--io-capability", "display-only"]) as stack:
        stack.start()
        stack.serve()
        keyboard = PasskeyFromLog(stack.displayed_passkey, error=1)

        async def scenario():
            async with BumbleCentral(air.port(1), keyboard, mitm=True) as central:
                link = await central.connect()
                with pytest.raises(ProtocolError) as failure:
                    await asyncio.wait_for(link.connection.pair(), 30)
                assert failure.value.error_namespace == "smp" and failure.value.error_code == CONFIRM_VALUE_FAILED, failure.value
                assert link.pairing_failures == [CONFIRM_VALUE_FAILED] and link.pairings == []
                assert await central.device.keystore.get_all() == []
                # Beryl, the responder, checks the initiator's commitment against its own passkey and ends the pairing.
                await served(stack, "pairing-failed",
                             lambda e: e["peer"] == CENTRAL and e["reason"] == CONFIRM_VALUE_FAILED and not e["endedByPeer"])
                # The link stays up, unencrypted: the secret is still out of reach.
                assert link.connection.encryption == 0
                assert await read_error(link) == INSUFFICIENT_AUTHENTICATION, "still no reading the secret"

        asyncio.run(scenario())
        displayed, typed = keyboard.asked[0]
        assert typed != displayed
        assert stack.events("serve", "pairing-complete") == [], stack.log("serve")
        assert stack.bonds() == []
