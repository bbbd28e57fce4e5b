"""A Bumble central for the pairing interop tests against `beryl serve Examples/profiles/secure-lock.json`.

It keeps its bonds in a bumble.keys.MemoryKeyStore for the life of the Device, so a second connection can re-encrypt
with the LTK of the first one's pairing instead of pairing again.
"""
import asyncio

from bumble.core import UUID, AdvertisingData
from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

LOCK_NAME = "Beryl Lock"
SECRET = UUID("D00D0002-0000-1000-8000-00805F9B34FB")
CENTRAL_ADDRESS = "E0:E1:E2:E3:E4:E5"


class Link:
    """One connection to the lock with its GATT discovered and what happened on it."""

    def __init__(self, connection):
        self.connection = connection
        self.peer = Peer(connection)
        self.secret = None
        self.pairings = []
        self.pairing_failures = []
        self.encryption_changes = 0
        connection.on("pairing", lambda keys: self.pairings.append(keys))
        connection.on("pairing_failure", lambda reason: self.pairing_failures.append(int(reason)))
        connection.on("connection_encryption_change", self._on_encryption_change)

    def _on_encryption_change(self):
        self.encryption_changes += 1

    async def discover(self):
        await self.peer.discover_services()
        for service in self.peer.services:
            await service.discover_characteristics()
        characteristics = self.peer.get_characteristics_by_uuid(SECRET)
        assert characteristics, f"D00D0002 discovered, got services {[str(s.uuid) for s in self.peer.services]}"
        self.secret = characteristics[0]

    async def read_secret(self):
        return bytes(await asyncio.wait_for(self.secret.read_value(), 10))


class BumbleCentral:
    """Usage: async with BumbleCentral(port, delegate, mitm) as central: link = await central.connect()"""

    def __init__(self, port, delegate=None, mitm=False):
        self.port = port
        self.delegate = delegate or PairingDelegate()
        self.mitm = mitm
        self.transport = None
        self.device = None

    async def __aenter__(self):
        self.transport = await open_transport(f"tcp-client:127.0.0.1:{self.port}")
        self.device = Device.with_hci("bumble-central", Address(CENTRAL_ADDRESS), self.transport.source, self.transport.sink)
        self.device.keystore = MemoryKeyStore()
        # Our identity address is the static random address we connect with, so the peer can find our bond when we
        # come back (Bumble would otherwise send the controller's public address as its identity, see the report).
        self.device.pairing_config_factory = lambda connection: PairingConfig(
            sc=True, mitm=self.mitm, bonding=True, delegate=self.delegate,
            identity_address_type=PairingConfig.AddressType.RANDOM)
        await self.device.power_on()
        return self

    async def __aexit__(self, *exc):
        await self.transport.close()

    @property
    def identity(self):
        return self.device.static_address.to_string(False)

    async def connect(self, name=LOCK_NAME):
        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            local_name = advertisement.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
            if local_name in (name, name.encode()) and not found.done():
                found.set_result(advertisement)

        self.device.on("advertisement", on_advertisement)
        try:
            await self.device.start_scanning(active=True)
            advertisement = await asyncio.wait_for(found, 10)
            await self.device.stop_scanning()
        finally:
            self.device.remove_listener("advertisement", on_advertisement)
        connection = await asyncio.wait_for(self.device.connect(advertisement.address), 10)
        link = Link(connection)
        await asyncio.wait_for(link.discover(), 10)
        return link

    async def disconnect(self, link):
        gone = asyncio.get_running_loop().create_future()
        link.connection.on("disconnection", lambda reason: gone.done() or gone.set_result(reason))
        await link.connection.disconnect()
        await asyncio.wait_for(gone, 5)


class PasskeyFromLog(PairingDelegate):
    """A keyboard: get_number() types the passkey the Beryl side displayed (read by `passkey()`), plus `error`."""

    def __init__(self, passkey, error=0):
        super().__init__(io_capability=PairingDelegate.IoCapability.KEYBOARD_INPUT_ONLY)
        self.passkey = passkey
        self.error = error
        self.asked = []

    async def get_number(self):
        for _ in range(200):
            displayed = self.passkey()
            if displayed is not None:
                typed = (displayed + self.error) % 1000000
                self.asked.append((displayed, typed))
                return typed
            await asyncio.sleep(0.05)
        raise AssertionError("the Beryl side displayed no passkey within 10 s")
