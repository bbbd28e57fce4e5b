"""A Bumble peripheral with Battery, Heart Rate and a custom characteristic, for a Beryl central to use.

Usage: bumble_peripheral.py PORT WRITES_FILE
Prints {"event": "ready", "address": "ADDRESS"} (one JSON object on a line) once advertising; appends every value written to the custom characteristic to WRITES_FILE as hex,
and every value written to its custom descriptor as "descriptor HEX".
"""
import asyncio
import json
import sys

from bumble.core import AdvertisingData, UUID
from bumble.device import Device
from bumble.gatt import Characteristic, CharacteristicValue, Descriptor, Service
from bumble.hci import Address
from bumble.transport import open_transport

CUSTOM_SERVICE = UUID("A0B40001-9260-4A9E-8E8A-1F8C2B6A0001")
CUSTOM = UUID("A0B40002-9260-4A9E-8E8A-1F8C2B6A0001")
CUSTOM_DESCRIPTOR = UUID("A0B40003-9260-4A9E-8E8A-1F8C2B6A0001")


async def main(port: int, writes_path: str) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as transport:
        device = Device.with_hci("bumble-peripheral", Address("F0:F1:F2:F3:F4:F6"), transport.source, transport.sink)
        stored = bytearray(b"hello")

        def on_write(connection, value):
            stored[:] = bytes(value)
            with open(writes_path, "a") as f:
                f.write(bytes(value).hex() + "\n")

        battery = Characteristic(UUID("2A19"), Characteristic.Properties.READ | Characteristic.Properties.NOTIFY,
                                 Characteristic.READABLE, bytes([77]))
        heart_rate = Characteristic(UUID("2A37"), Characteristic.Properties.NOTIFY, Characteristic.READABLE, bytes([0, 60]))
        described = bytearray(b"\x01\x02")

        def on_descriptor_write(connection, value):
            described[:] = bytes(value)
            with open(writes_path, "a") as f:
                f.write("descriptor " + bytes(value).hex() + "\n")

        descriptors = [
            Descriptor(UUID("2901"), Descriptor.READABLE, b"Bumble custom"),
            Descriptor(CUSTOM_DESCRIPTOR, Descriptor.READABLE | Descriptor.WRITEABLE,
                       CharacteristicValue(read=lambda connection: bytes(described), write=on_descriptor_write)),
        ]
        custom = Characteristic(CUSTOM, Characteristic.Properties.READ | Characteristic.Properties.WRITE,
                                Characteristic.READABLE | Characteristic.WRITEABLE,
                                CharacteristicValue(read=lambda connection: bytes(stored), write=on_write), descriptors)
        device.add_services([
            Service(UUID("180F"), [battery]),
            Service(UUID("180D"), [heart_rate]),
            Service(CUSTOM_SERVICE, [custom]),
        ])
        device.advertising_data = bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([0x06])),
            (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS, bytes([0x0D, 0x18])),
            (AdvertisingData.COMPLETE_LOCAL_NAME, b"Bumble HRM"),
        ]))
        await device.power_on()
        # Bumble's default is once a second, which a scanner listening 60 ms in every 100 ms can miss for many seconds on
        # end (advDelay drifts the phase by only 0-10 ms an event; berylsim models both).
        await device.start_advertising(auto_restart=True, advertising_interval_min=100, advertising_interval_max=100)
        print(json.dumps({"event": "ready", "address": str(device.random_address)}), flush=True)
        beat = 60
        while True:
            await asyncio.sleep(0.1)
            beat = (beat + 1) % 256
            await device.notify_subscribers(heart_rate, bytes([0, beat]))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
