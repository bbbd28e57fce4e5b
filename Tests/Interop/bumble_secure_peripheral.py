"""A Bumble peripheral whose secret characteristic needs an encrypted link, for a Beryl central to pair with.

Usage: bumble_secure_peripheral.py PORT [--display PASSKEY]
  PORT                the berylsim TCP port of the controller Bumble drives
  --display PASSKEY   display-only I/O with this passkey (MITM required); without it, no input/no output (Just Works)

Pairs with LE Secure Connections and bonds (keys in a MemoryKeyStore for the life of the process, so a central that
comes back re-encrypts with the bonded LTK). Prints one JSON object per event and line, flushed, "event" naming it:
  {"event": "ready", "address": ADDRESS} | {"event": "connected", "peer": PEER} | {"event": "pairing-started"} |
  {"event": "displaying-passkey", "passkey": N} | {"event": "paired", "peer": IDENTITY, "authenticated": B, "sc": B} |
  {"event": "pairing-failed", "reason": N} | {"event": "encrypted", "withBondedKey": B} | {"event": "read-secret"} |
  {"event": "disconnected", "reason": N}
"""
import argparse
import asyncio
import json

from bumble.core import AdvertisingData, UUID
from bumble.device import Device
from bumble.gatt import Characteristic, CharacteristicValue, Service
from bumble.hci import Address
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

SECURE_SERVICE = UUID("B0B40001-9260-4A9E-8E8A-1F8C2B6A0001")
SECRET = UUID("B0B40002-9260-4A9E-8E8A-1F8C2B6A0001")
SECRET_VALUE = b"bumble secret"
ADDRESS = "F0:F1:F2:F3:F4:F7"


def say(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


class Display(PairingDelegate):
    def __init__(self, passkey):
        super().__init__(io_capability=PairingDelegate.IoCapability.DISPLAY_OUTPUT_ONLY)
        self.passkey = passkey

    async def generate_passkey(self):
        return self.passkey

    async def display_number(self, number, digits):
        say("displaying-passkey", passkey=int(number))


async def main(port, passkey):
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as transport:
        device = Device.with_hci("bumble-secure-peripheral", Address(ADDRESS), transport.source, transport.sink)
        device.keystore = MemoryKeyStore()
        delegate = Display(passkey) if passkey is not None else PairingDelegate()
        # Our identity is the static random address we advertise with, so a bonded central finds our keys again.
        device.pairing_config_factory = lambda connection: PairingConfig(
            sc=True, mitm=passkey is not None, bonding=True, delegate=delegate,
            identity_address_type=PairingConfig.AddressType.RANDOM)

        def read_secret(connection):
            say("read-secret")
            return SECRET_VALUE

        secret = Characteristic(SECRET, Characteristic.Properties.READ,
                                Characteristic.READABLE | Characteristic.READ_REQUIRES_ENCRYPTION,
                                CharacteristicValue(read=read_secret))
        device.add_service(Service(SECURE_SERVICE, [secret]))
        device.advertising_data = bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([0x06])),
            (AdvertisingData.COMPLETE_LOCAL_NAME, b"Bumble Safe"),
        ]))

        def on_connection(connection):
            state = {"pairing": False}
            say("connected", peer=str(connection.peer_address))

            def on_pairing_start():
                state["pairing"] = True
                say("pairing-started")

            def on_pairing(keys):
                state["pairing"] = False
                say("paired", peer=str(connection.peer_address), authenticated=bool(keys.ltk.authenticated), sc=bool(connection.sc))

            def on_pairing_failure(reason):
                state["pairing"] = False
                say("pairing-failed", reason=int(reason))

            def on_encryption_change():
                if connection.encryption:
                    say("encrypted", withBondedKey=not state["pairing"])

            connection.on("pairing_start", on_pairing_start)
            connection.on("pairing", on_pairing)
            connection.on("pairing_failure", on_pairing_failure)
            connection.on("connection_encryption_change", on_encryption_change)
            connection.on("disconnection", lambda reason: say("disconnected", reason=int(reason)))

        device.on("connection", on_connection)
        await device.power_on()
        # Bumble's default is once a second, which a scanner listening 60 ms in every 100 ms can miss for many seconds on
        # end (advDelay drifts the phase by only 0-10 ms an event; berylsim models both).
        await device.start_advertising(auto_restart=True, advertising_interval_min=100, advertising_interval_max=100)
        say("ready", address=device.random_address.to_string(False))
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--display", type=int)
    options = parser.parse_args()
    asyncio.run(main(options.port, options.display))
