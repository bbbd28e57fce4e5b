"""Interop: the heart-rate examples (built on the Beryl client library, through managerd) against Bumble hosts."""
import asyncio
import os
import subprocess
import sys
import time

from bumble.core import UUID, AdvertisingData
from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport

from beryl_stack import events_in

HERE = os.path.dirname(os.path.abspath(__file__))


def beryl_up(air, side, controller):
    run = os.path.join(air["dir"], side)
    subprocess.run([os.path.join(air["bin"], "beryl"), "up", "--runtime-dir", run, "--state-dir", run + "-state",
                    "--transport", air.transport(controller)], check=True, capture_output=True, timeout=60)
    return run


def beryl_down(air, run):
    subprocess.run([os.path.join(air["bin"], "beryl"), "down", "--runtime-dir", run], capture_output=True, timeout=30)


def test_heart_rate_central_example_against_a_bumble_peripheral(air):
    run = beryl_up(air, "a", 0)
    writes = os.path.join(air["dir"], "writes.txt")
    peripheral = subprocess.Popen([sys.executable, os.path.join(HERE, "bumble_peripheral.py"), str(air.port(1)), writes],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert events_in(peripheral.stdout.readline(), "ready"), "the Bumble peripheral did not start"
        central = subprocess.run([os.path.join(air["bin"], "heart-rate-central"), "--runtime-dir", run, "--count", "3", "--json"],
                                 capture_output=True, text=True, timeout=60)
        assert central.returncode == 0, central.stdout + central.stderr
        beats = [e["bpm"] for e in events_in(central.stdout, "heartRate")]
        assert len(beats) == 3 and all((b - a) % 256 == 1 for a, b in zip(beats, beats[1:])), central.stdout
        said = [e["event"] for e in events_in(central.stdout)]
        assert said[:2] == ["discovered", "connected"] and said[-1] == "done", central.stdout
    finally:
        peripheral.terminate()
        peripheral.wait(5)
        beryl_down(air, run)


async def bumble_central_reads_and_subscribes(port):
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as transport:
        device = Device.with_hci("bumble-central", Address("E0:E1:E2:E3:E4:E6"), transport.source, transport.sink)
        await device.power_on()
        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            uuids = advertisement.data.get(AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS) or []
            if UUID("180D") in uuids and not found.done():
                found.set_result(advertisement)

        device.on("advertisement", on_advertisement)
        await device.start_scanning(active=True)
        advertisement = await asyncio.wait_for(found, 15)
        await device.stop_scanning()
        connection = await asyncio.wait_for(device.connect(advertisement.address), 15)
        peer = Peer(connection)
        await peer.discover_services()
        for service in peer.services:
            await service.discover_characteristics()
        location = bytes(await peer.get_characteristics_by_uuid(UUID("2A38"))[0].read_value())
        beats = []
        three = asyncio.get_running_loop().create_future()

        def on_beat(value):
            beats.append(bytes(value)[1])
            if len(beats) >= 3 and not three.done():
                three.set_result(True)

        await peer.get_characteristics_by_uuid(UUID("2A37"))[0].subscribe(on_beat)
        await asyncio.wait_for(three, 10)
        await peer.get_characteristics_by_uuid(UUID("2A39"))[0].write_value(b"\x01", with_response=True)
        await connection.disconnect()
        return location, beats


def test_a_bumble_central_against_the_heart_rate_peripheral_example(air):
    run = beryl_up(air, "b", 0)
    log_path = os.path.join(air["dir"], "peripheral.log")
    log = open(log_path, "w")
    peripheral = subprocess.Popen([os.path.join(air["bin"], "heart-rate-peripheral"), "--runtime-dir", run, "--json"],
                                  stdout=log, stderr=subprocess.STDOUT)

    def said(event):
        return events_in(open(log_path).read(), event)

    try:
        deadline = time.monotonic() + 15
        while not any(e["localName"] == "Beryl HR" and e["error"] is None for e in said("advertising")):
            assert time.monotonic() < deadline and peripheral.poll() is None, open(log_path).read()
            time.sleep(0.1)
        location, beats = asyncio.run(bumble_central_reads_and_subscribes(air.port(1)))
        assert location == b"\x01", location
        assert len(beats) >= 3 and all((b - a) % 256 == 1 for a, b in zip(beats, beats[1:])), beats
        deadline = time.monotonic() + 5
        while [(e["value"], e["accepted"]) for e in said("controlPointWritten")] != [([1], True)]:
            assert time.monotonic() < deadline, open(log_path).read()
            time.sleep(0.1)
        assert len(said("subscribed")) == 1, open(log_path).read()
    finally:
        peripheral.terminate()
        peripheral.wait(5)
        log.close()
        beryl_down(air, run)
