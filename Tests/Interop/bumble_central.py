"""A Bumble central against a Beryl peripheral (`beryl serve Examples/profiles/heart-rate.json`).

Usage: bumble_central.py PORT   (the berylsim TCP port of the controller Bumble drives)
Prints one JSON object per step and line, "event" naming the step; exits non-zero with a "failed" event saying what was
expected on the first failure.
"""
import asyncio
import json
import sys

from bumble import att
from bumble.core import UUID, AdvertisingData
from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport

NUS_RW = UUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
NUS_IND = UUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")


def step(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def expect(condition, text):
    if not condition:
        step("failed", expected=text)
        raise SystemExit(1)


async def main(port: int) -> int:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as transport:
        central = Device.with_hci("bumble-central", Address("E0:E1:E2:E3:E4:E5"), transport.source, transport.sink)
        await central.power_on()

        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            name = advertisement.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
            if name in ("Beryl HR", b"Beryl HR") and not found.done():
                found.set_result(advertisement)

        central.on("advertisement", on_advertisement)
        await central.start_scanning(active=True)
        advertisement = await asyncio.wait_for(found, 10)
        uuids = advertisement.data.get(AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS) or []
        expect(UUID("180D") in uuids, f"180D advertised, got {uuids}")
        heard = advertisement.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
        step("discovered", name=heard.decode() if isinstance(heard, bytes) else heard, address=str(advertisement.address),
             uuids=[str(u) for u in uuids])
        await central.stop_scanning()

        connection = await asyncio.wait_for(central.connect(advertisement.address), 10)
        peer = Peer(connection)
        mtu = await peer.request_mtu(185)
        expect(mtu == 185, f"MTU 185 after exchange, got {mtu}")
        await peer.discover_services()
        services = {str(s.uuid): s for s in peer.services}
        expect("180D" in " ".join(services), f"heart rate service discovered, got {list(services)}")
        for service in peer.services:
            await service.discover_characteristics()
        step("connected", mtu=mtu, services=len(peer.services))

        name = await peer.get_characteristics_by_uuid(UUID("2A00"))[0].read_value()
        expect(bytes(name) == b"Beryl", f"GAP device name Beryl, got {bytes(name)}")
        location = await peer.get_characteristics_by_uuid(UUID("2A38"))[0].read_value()
        expect(bytes(location) == b"\x02", f"cached body sensor location 02, got {bytes(location).hex()}")
        step("read-name-and-cached-value")

        rw = peer.get_characteristics_by_uuid(NUS_RW)[0]
        await rw.write_value(b"\x01\x02\x03", with_response=True)
        expect(bytes(await rw.read_value()) == b"\x01\x02\x03", "short write then read back")
        await rw.write_value(b"\x09\x08", with_response=False)
        await asyncio.sleep(0.3)
        expect(bytes(await rw.read_value()) == b"\x09\x08", "write without response then read back")
        long_value = bytes((i * 7) & 0xFF for i in range(400))
        await rw.write_value(long_value, with_response=True)
        back = bytes(await rw.read_value())
        expect(back == long_value, f"400-byte long write then long read, got {len(back)} bytes")
        step("writes-and-long-read-round-trip")

        # Reliable write (Core Vol 3 Part G §4.9.5): two prepared parts, each echo checked, then executed together;
        # a cancelled one leaves the value as it was.
        client = peer.gatt_client
        for offset, part in [(0, b"\xAA\xBB\xCC"), (3, b"\xDD\xEE")]:
            echo = await client.send_request(att.ATT_Prepare_Write_Request(attribute_handle=rw.handle, value_offset=offset, part_attribute_value=part))
            expect(echo.op_code == att.Opcode.ATT_PREPARE_WRITE_RESPONSE and bytes(echo.part_attribute_value) == part and echo.value_offset == offset,
                   f"prepare write echoed, got {echo}")
        executed = await client.send_request(att.ATT_Execute_Write_Request(flags=0x01))
        expect(executed.op_code == att.Opcode.ATT_EXECUTE_WRITE_RESPONSE, f"execute write answered, got {executed}")
        expect(bytes(await rw.read_value()) == b"\xAA\xBB\xCC\xDD\xEE", "reliable write applied both parts")
        await client.send_request(att.ATT_Prepare_Write_Request(attribute_handle=rw.handle, value_offset=0, part_attribute_value=b"\x00"))
        await client.send_request(att.ATT_Execute_Write_Request(flags=0x00))
        expect(bytes(await rw.read_value()) == b"\xAA\xBB\xCC\xDD\xEE", "a cancelled reliable write changed nothing")
        step("reliable-write-applied")

        beats = []
        got_three = asyncio.get_running_loop().create_future()

        def on_beat(value):
            beats.append(bytes(value)[0])
            if len(beats) >= 3 and not got_three.done():
                got_three.set_result(True)

        await peer.get_characteristics_by_uuid(UUID("2A37"))[0].subscribe(on_beat)
        await asyncio.wait_for(got_three, 5)
        expect(all((b - a) % 256 == 1 for a, b in zip(beats, beats[1:])), f"counter8 notifications count up, got {beats}")
        step("notifications", values=beats[:3])

        indicated = asyncio.get_running_loop().create_future()
        await peer.get_characteristics_by_uuid(NUS_IND)[0].subscribe(
            lambda value: indicated.done() or indicated.set_result(bytes(value)), prefer_notify=False)
        value = await asyncio.wait_for(indicated, 5)
        expect(value == bytes.fromhex("c0ffee"), f"indication c0ffee, got {value.hex()}")
        step("indication-confirmed")

        await connection.disconnect()
        step("disconnected")
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]))))
