"""A Bumble central that never confirms an indication: after 30 s the Beryl peripheral's bearer times out and the link
ends (Core Vol 3 Part F §3.3.3), and nothing more was sent on it after the first indication."""
import asyncio
import os
import time

from bumble.core import UUID, AdvertisingData
from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport

from beryl_stack import BerylStack, ROOT

NUS_IND = UUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")


async def subscribe_and_never_confirm(port):
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as transport:
        central = Device.with_hci("bumble-silent", Address("E0:E1:E2:E3:E4:E6"), transport.source, transport.sink)
        await central.power_on()
        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            name = advertisement.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
            if name in ("Beryl HR", b"Beryl HR") and not found.done():
                found.set_result(advertisement.address)

        central.on("advertisement", on_advertisement)
        await central.start_scanning()
        address = await asyncio.wait_for(found, 10)
        await central.stop_scanning()
        connection = await asyncio.wait_for(central.connect(address), 10)
        ended = asyncio.get_running_loop().create_future()
        connection.on("disconnection", lambda reason: ended.done() or ended.set_result(reason))
        peer = Peer(connection)
        await peer.discover_services()
        for service in peer.services:
            await service.discover_characteristics()
        indicating = peer.get_characteristics_by_uuid(NUS_IND)[0]
        await indicating.discover_descriptors()

        indications = []
        first = asyncio.get_running_loop().create_future()

        def swallow(pdu):
            # Bumble's client would confirm here; this one never does.
            indications.append((time.monotonic(), bytes(pdu.attribute_value)))
            first.done() or first.set_result(True)

        peer.gatt_client.on_att_handle_value_indication = swallow
        cccd = indicating.get_descriptor(UUID("2902"))
        await cccd.write_value(b"\x02\x00", with_response=True)
        await asyncio.wait_for(first, 5)
        reason = await asyncio.wait_for(ended, 45)
        return indications, time.monotonic() - indications[0][0], reason


def test_an_unconfirmed_indication_ends_the_link_after_30_seconds(berylsim):
    with BerylStack(berylsim).start() as stack:
        stack.start_process("serve", ["beryl", "serve", os.path.join(ROOT, "Examples/profiles/heart-rate.json"), "--runtime-dir", stack.run,
                                      "--json"])
        stack.wait_event("serve", "advertising")
        indications, after, reason = asyncio.run(subscribe_and_never_confirm(berylsim["base"] + 1))
        # The serve app indicates every 500 ms; one is outstanding until confirmed, the rest wait, and none follow it.
        assert [value for _, value in indications] == [bytes.fromhex("c0ffee")], indications
        assert 29.5 <= after <= 33, f"the link ended {after:.1f} s after the unconfirmed indication"
        # Ended by Beryl's host (Remote User Terminated Connection, as the central hears it), not by a supervision timeout.
        assert reason == 0x13, (hex(reason), stack.log("attd")[-2000:])
        print(f"link ended {after:.1f} s after the indication (reason 0x{int(reason):02x})")
