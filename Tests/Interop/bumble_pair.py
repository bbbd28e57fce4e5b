"""Two Bumble hosts on two berylsim controllers: advertise, scan, connect, GATT, disconnect.

Usage: bumble_pair.py PORT0 PORT1   (berylsim --tcp 127.0.0.1:PORT0 serves controller 0 there, 1 at PORT0+1)
Prints one line per step; exits non-zero with what was expected on the first failure.
"""
import asyncio
import sys

from bumble.core import UUID
from bumble.device import Device, Peer
from bumble.gatt import Characteristic, CharacteristicValue, Service
from bumble.hci import Address
from bumble.transport import open_transport

SERVICE = UUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
READ_CHAR = UUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
WRITE_CHAR = UUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")


def step(text):
    print(text, flush=True)


async def main(port0: int, port1: int) -> int:
    async with await open_transport(f"tcp-client:127.0.0.1:{port0}") as t0, \
               await open_transport(f"tcp-client:127.0.0.1:{port1}") as t1:
        peripheral = Device.with_hci("bumble-peripheral", Address("F0:F1:F2:F3:F4:F5"), t0.source, t0.sink)
        central = Device.with_hci("bumble-central", Address("E0:E1:E2:E3:E4:E5"), t1.source, t1.sink)

        written = asyncio.get_running_loop().create_future()

        def on_write(connection, value):
            if not written.done():
                written.set_result(bytes(value))

        notify_char = Characteristic(
            READ_CHAR,
            Characteristic.Properties.READ | Characteristic.Properties.NOTIFY,
            Characteristic.READABLE,
            bytes(range(100)),
        )
        write_char = Characteristic(
            WRITE_CHAR,
            Characteristic.Properties.WRITE,
            Characteristic.WRITEABLE,
            CharacteristicValue(write=on_write),
        )
        peripheral.add_service(Service(SERVICE, [notify_char, write_char]))

        await peripheral.power_on()
        await central.power_on()
        step(f"powered on: peripheral {peripheral.public_address}, central {central.public_address}")

        # Bumble's default is once a second, which a scanner listening 60 ms in every 100 ms can miss for many seconds on
        # end (advDelay drifts the phase by only 0-10 ms an event; berylsim models both).
        await peripheral.start_advertising(auto_restart=False, advertising_interval_min=100, advertising_interval_max=100)
        step("peripheral advertising")

        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            if advertisement.address == peripheral.random_address and not found.done():
                found.set_result(advertisement)

        central.on("advertisement", on_advertisement)
        await central.start_scanning(active=True)
        advertisement = await asyncio.wait_for(found, 10)
        step(f"central discovered {advertisement.address} rssi {advertisement.rssi}")
        await central.stop_scanning()

        connection = await asyncio.wait_for(central.connect(advertisement.address), 10)
        step(f"connected, handle {connection.handle}")

        peer = Peer(connection)
        await peer.discover_services()
        services = peer.get_services_by_uuid(SERVICE)
        if not services:
            step("FAIL: expected service 6E400001 in discovery")
            return 1
        await services[0].discover_characteristics()
        readable = services[0].get_characteristics_by_uuid(READ_CHAR)[0]
        writable = services[0].get_characteristics_by_uuid(WRITE_CHAR)[0]
        value = await readable.read_value()
        if bytes(value) != bytes(range(100)):
            step(f"FAIL: expected 100-byte value 00..63, read {bytes(value).hex()}")
            return 1
        step(f"read {len(value)} bytes (long read over the default MTU)")

        await writable.write_value(b"\x01\x02\x03", with_response=True)
        got = await asyncio.wait_for(written, 5)
        if got != b"\x01\x02\x03":
            step(f"FAIL: expected write 010203, peripheral got {got.hex()}")
            return 1
        step("write with response delivered")

        notified = asyncio.get_running_loop().create_future()
        await readable.subscribe(lambda value: notified.done() or notified.set_result(bytes(value)))
        await asyncio.sleep(0.2)
        await peripheral.notify_subscribers(notify_char, b"\xAA\xBB")
        got = await asyncio.wait_for(notified, 5)
        if got != b"\xAA\xBB":
            step(f"FAIL: expected notification aabb, got {got.hex()}")
            return 1
        step("notification received")

        await connection.disconnect()
        step("disconnected")
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]))))
