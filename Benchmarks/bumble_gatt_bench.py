#!/usr/bin/env python3
"""GATT throughput / latency reference benchmark for Google Bumble.

This is the reference half of `beryl bench gatt`: two Bumble hosts, each on
its own Bumble software controller (bumble.controller.Controller), joined by
Bumble's in-memory link (bumble.link.LocalLink), all in one process and one
asyncio event loop.

Measured:
  1. Notification throughput (20-byte and 244-byte values), counted on the
     central side inside a fixed time window.
     Each value starts with a 32-bit little-endian sequence number; the
     receiver counts losses and values out of order.
  2. Sequential Read Request round-trip time for a 20-byte characteristic
     (p50 / p99 in microseconds), once for a static value the server holds
     and once for a dynamic one a read callback makes.
  3. The process's CPU time per notification (both hosts, both
     controllers and the link: everything Bumble runs is one process).

Output: one JSON object on stdout. On failure: {"error": "..."} and exit 1.

Run with:  /work/main/.venv-interop/bin/python Benchmarks/bumble_gatt_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
import time

SERVICE_UUID = "6E4B0001-8B3A-4F6A-9C1D-BE5E11BE0001"
NOTIFY_UUID = "6E4B0002-8B3A-4F6A-9C1D-BE5E11BE0001"
READ_UUID = "6E4B0003-8B3A-4F6A-9C1D-BE5E11BE0001"
DYNAMIC_UUID = "6E4B0004-8B3A-4F6A-9C1D-BE5E11BE0001"

REQUESTED_MTU = 247  # ATT MTU 247 -> 244-byte notification values fit
NOTIFY_SIZES = (20, 244)
READ_VALUE = bytes(range(20))  # fixed 20-byte value
WARMUP_READS = 10
WARMUP_SECONDS = 0.25  # notifications sent before each window opens, not counted

SETUP_TIMEOUT = 5.0  # seconds, per setup step
FLOW_WAIT_TIMEOUT = 1.0  # seconds, max wait for one HCI completion event
DRAIN_TIMEOUT = 2.0  # seconds, max wait for the queue to drain after a phase
READ_TIMEOUT = 2.0  # seconds, per read


class BenchError(Exception):
    pass


def bumble_version() -> str:
    try:
        from importlib.metadata import version

        return version("bumble")
    except Exception:  # pragma: no cover - fallback
        try:
            from bumble import _version

            return str(_version.version)
        except Exception:
            return "unknown"


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile on an already sorted list."""
    if not sorted_values:
        raise BenchError("no samples")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


async def step(awaitable, what: str, timeout: float = SETUP_TIMEOUT):
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise BenchError(f"timeout ({timeout}s) during {what}") from None


async def run(seconds: float, reads: int) -> dict:
    from bumble.controller import Controller
    from bumble.device import Device, Peer
    from bumble.gatt import Characteristic, Service
    from bumble.hci import Address
    from bumble.host import Host
    from bumble.link import LocalLink
    from bumble.transport.common import AsyncPipeSink

    loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------ wiring
    # Same wiring as bumble.testing.test_utils.Devices: each Host talks to its
    # Controller directly (controller -> host via call_soon in
    # Controller.send_hci_packet, host -> controller via AsyncPipeSink, also
    # call_soon); the controllers exchange LL/ACL PDUs over the LocalLink.
    link = LocalLink()
    central_addr = "F0:F0:F0:F0:F0:F0"
    peripheral_addr = "F1:F1:F1:F1:F1:F1"
    c_ctrl = Controller("C-central", link=link, public_address=central_addr)
    p_ctrl = Controller("C-peripheral", link=link, public_address=peripheral_addr)
    central = Device(
        name="central",
        address=Address(central_addr),
        host=Host(c_ctrl, AsyncPipeSink(c_ctrl)),
    )
    peripheral = Device(
        name="peripheral",
        address=Address(peripheral_addr),
        host=Host(p_ctrl, AsyncPipeSink(p_ctrl)),
    )

    # ------------------------------------------------------- peripheral GATT
    notify_char = Characteristic(
        NOTIFY_UUID,
        Characteristic.Properties.NOTIFY,
        Characteristic.Permissions(0),
        bytes(20),
    )
    read_char = Characteristic(
        READ_UUID,
        Characteristic.Properties.READ,
        Characteristic.Permissions.READABLE,
        READ_VALUE,
    )
    from bumble.gatt import CharacteristicValue

    dynamic_char = Characteristic(
        DYNAMIC_UUID,
        Characteristic.Properties.READ,
        Characteristic.Permissions.READABLE,
        CharacteristicValue(read=lambda _connection: READ_VALUE),
    )
    peripheral.add_service(Service(SERVICE_UUID, [notify_char, read_char, dynamic_char]))

    # ---------------------------------------------------------------- connect
    await step(central.power_on(), "central power_on")
    await step(peripheral.power_on(), "peripheral power_on")

    p_conn_future = loop.create_future()

    def on_p_connection(connection):
        if not p_conn_future.done():
            p_conn_future.set_result(connection)

    peripheral.on(peripheral.EVENT_CONNECTION, on_p_connection)
    await step(
        peripheral.start_advertising(advertising_interval_min=20.0),
        "start_advertising",
    )
    c_conn = await step(
        central.connect(peripheral.random_address, timeout=SETUP_TIMEOUT),
        "connect",
        SETUP_TIMEOUT + 1.0,
    )
    p_conn = await step(p_conn_future, "peripheral connection event")

    # -------------------------------------------------- MTU, discovery, CCCD
    peer = Peer(c_conn)
    mtu = await step(peer.request_mtu(REQUESTED_MTU), "MTU exchange")
    if mtu != REQUESTED_MTU:
        raise BenchError(f"negotiated ATT MTU {mtu}, expected {REQUESTED_MTU}")
    if p_conn.att_mtu != REQUESTED_MTU:
        raise BenchError(f"peripheral-side ATT MTU is {p_conn.att_mtu}")

    services = await step(peer.discover_services([SERVICE_UUID]), "service discovery")
    if not services:
        raise BenchError("benchmark service not found")
    chars = await step(
        peer.discover_characteristics(service=services[0]),
        "characteristic discovery",
    )
    remote_notify = next((c for c in chars if c.uuid == notify_char.uuid), None)
    remote_read = next((c for c in chars if c.uuid == read_char.uuid), None)
    remote_dynamic = next((c for c in chars if c.uuid == dynamic_char.uuid), None)
    if remote_notify is None or remote_read is None or remote_dynamic is None:
        raise BenchError(f"characteristics not found (got {[str(c) for c in chars]})")

    # Receiver state: counts notifications arriving inside the window.
    rx = {"start": 0.0, "end": 0.0, "count": 0, "bytes": 0, "bad": 0,
          "late": 0, "size": 0, "total": 0, "highest": -1, "disordered": 0}

    def on_notification(value: bytes) -> None:
        now = time.perf_counter()
        if len(value) != rx["size"]:
            rx["bad"] += 1
            return
        sequence = int.from_bytes(value[:4], "little")
        rx["total"] += 1
        if sequence < rx["highest"]:
            rx["disordered"] += 1
        rx["highest"] = max(rx["highest"], sequence)
        if rx["start"] <= now < rx["end"]:
            rx["count"] += 1
            rx["bytes"] += len(value)
        else:
            rx["late"] += 1

    # Raw callback (no decode proxy): subscribe via the GATT client directly.
    await step(
        peer.gatt_client.subscribe(remote_notify, on_notification),
        "subscribe (CCCD write)",
    )

    # ------------------------------------------- notification throughput
    # Bumble's notify_subscriber() is *not* flow controlled: it builds the ATT
    # PDU and calls Host.send_l2cap_pdu() synchronously, which fragments into
    # ACL packets and appends them to an unbounded DataPacketQueue; the queue
    # only releases packets to the controller while fewer than
    # HCI_LE_Read_Buffer_Size total packets are in flight. The await never
    # suspends. So the sender applies backpressure itself: it keeps enqueuing
    # while the queue's pending count (queued but not completed) is below the
    # controller's packet credit count, then waits for the queue's 'flow'
    # event (emitted on HCI Number Of Completed Packets).
    host_conn = peripheral.host.connections.get(p_conn.handle)
    if host_conn is None:
        raise BenchError("peripheral host connection not found")
    queue = host_conn.acl_packet_queue
    credit_limit = queue.max_in_flight

    async def wait_flow() -> None:
        fut = loop.create_future()

        def on_flow(*_):
            if not fut.done():
                fut.set_result(None)

        queue.once("flow", on_flow)
        try:
            await asyncio.wait_for(fut, FLOW_WAIT_TIMEOUT)
        except asyncio.TimeoutError:
            queue.remove_listener("flow", on_flow)
            raise BenchError("no HCI completion within "
                             f"{FLOW_WAIT_TIMEOUT}s while notifying") from None

    async def settle() -> None:
        # Wait until everything queued has been completed, then let the
        # remaining in-loop hops (link -> controller -> host) run.
        deadline = time.perf_counter() + DRAIN_TIMEOUT
        while queue.pending > 0:
            if time.perf_counter() > deadline:
                raise BenchError("ACL queue did not drain")
            await wait_flow()
        for _ in range(20):
            await asyncio.sleep(0)

    notification_results = []
    for size in NOTIFY_SIZES:
        body = bytes((i & 0xFF for i in range(4, size)))
        await settle()
        rx.update(count=0, bytes=0, bad=0, late=0, size=size, total=0,
                  highest=-1, disordered=0)
        sent = 0
        warm_end = time.perf_counter() + WARMUP_SECONDS
        t0 = t_end = cpu0 = None
        rx["start"], rx["end"] = math.inf, math.inf
        while t_end is None or time.perf_counter() < t_end:
            if t0 is None and time.perf_counter() >= warm_end:
                cpu0 = time.process_time()
                t0 = time.perf_counter()
                t_end = t0 + seconds
                rx["start"], rx["end"] = t0, t_end
            while queue.pending < credit_limit:
                value = sent.to_bytes(4, "little") + body
                await peripheral.notify_subscriber(p_conn, notify_char, value)
                sent += 1
            await wait_flow()
        window_cpu = time.process_time() - cpu0
        cpu_fraction = window_cpu / (time.perf_counter() - t0)
        await settle()
        if rx["bad"]:
            raise BenchError(f"{rx['bad']} notifications with unexpected length")
        if rx["count"] == 0:
            raise BenchError(f"no {size}-byte notifications received")
        notification_results.append({
            "valueBytes": size,
            "perSecond": round(rx["count"] / seconds, 1),
            "bytesPerSecond": round(rx["bytes"] / seconds, 1),
            "received": rx["count"],
            "sent": sent,
            "receivedOutsideWindow": rx["late"],
            "lost": sent - rx["total"],
            "outOfOrder": rx["disordered"],
            "cpuMicrosecondsPerNotification": round(window_cpu * 1e6 / rx["count"], 2),
            "processCpuFraction": round(cpu_fraction, 3),
        })

    # ---------------------------------------------------------- read RTT
    async def time_reads(characteristic) -> dict:
        for _ in range(WARMUP_READS):
            await step(characteristic.read_value(), "warm-up read", READ_TIMEOUT)
        samples = []
        cpu0, w0 = time.process_time(), time.perf_counter()
        for i in range(reads):
            t = time.perf_counter()
            got = await step(characteristic.read_value(), f"read #{i}", READ_TIMEOUT)
            samples.append((time.perf_counter() - t) * 1e6)
            if got != READ_VALUE:
                raise BenchError(f"read #{i} returned unexpected value {bytes(got).hex()}")
        cpu_fraction = (time.process_time() - cpu0) / (time.perf_counter() - w0)
        samples.sort()
        return {
            "count": len(samples),
            "p50Microseconds": round(percentile(samples, 50), 1),
            "p99Microseconds": round(percentile(samples, 99), 1),
            "minMicroseconds": round(samples[0], 1),
            "maxMicroseconds": round(samples[-1], 1),
            "warmupReads": WARMUP_READS,
            "processCpuFraction": round(cpu_fraction, 3),
        }

    static_reads = await time_reads(remote_read)
    dynamic_reads = await time_reads(remote_dynamic)

    # -------------------------------------------------------------- teardown
    try:
        await asyncio.wait_for(c_conn.disconnect(), 2.0)
    except Exception:
        pass  # measurement is done; teardown problems don't matter

    return {
        "stack": "bumble",
        "version": bumble_version(),
        "notifications": notification_results,
        "readRTT": static_reads,
        "dynamicReadRTT": dynamic_reads,
        "seconds": seconds,
        "attMtu": mtu,
        "aclPacketLength": queue.max_packet_size,
        "aclCredits": credit_limit,
        "note": (
            "two Bumble hosts, Bumble software controllers, in-process LocalLink, "
            "one asyncio event loop in one Python process. LocalLink has no "
            "air-time model (no connection interval, no PHY rate, no "
            "retransmissions, no LL data-length limit on the link itself), so "
            "throughput and latency are bounded only by CPU / Python "
            "event-loop cost of both stacks together; each hop (host->controller, "
            "controller->link->controller, controller->host) is a "
            "loop.call_soon. The Bumble controller advertises 27-byte LE ACL "
            "buffers x 64 credits and acks every ACL packet immediately, so the "
            "host fragments a 244-byte notification (251-byte L2CAP PDU) into "
            "10 HCI ACL packets; the receiving controller delivers it "
            "reassembled. notify_subscriber() is not flow controlled in Bumble, "
            "so the sender keeps the host ACL queue at most at the controller's "
            "credit count and waits on HCI Number Of Completed Packets. "
            "Notifications are counted on the central only if they arrive "
            f"inside the window, which opens after {WARMUP_SECONDS} s of "
            "warm-up. Read RTT excludes "
            f"{WARMUP_READS} warm-up reads. processCpuFraction = process CPU "
            "time / wall time during a phase; well below 1.0 means the process "
            "was descheduled (host contention) and that phase's figures are "
            "depressed. Not comparable with a real radio."
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="notification window per value size (default 2)")
    parser.add_argument("--reads", type=int, default=500,
                        help="number of timed sequential reads (default 500)")
    args = parser.parse_args()

    # Keep Bumble's own logging off stdout and quiet on stderr.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)

    try:
        if not (args.seconds > 0 and math.isfinite(args.seconds)):
            raise BenchError("--seconds must be a positive number")
        if args.reads < 1:
            raise BenchError("--reads must be >= 1")
        overall = 30.0 + 2 * args.seconds * len(NOTIFY_SIZES) + args.reads * 0.05
        result = asyncio.run(
            asyncio.wait_for(run(args.seconds, args.reads), overall)
        )
    except asyncio.TimeoutError:
        print(json.dumps({"error": "overall benchmark timeout"}))
        return 1
    except BaseException as exc:  # noqa: BLE001 - report anything as JSON
        if isinstance(exc, KeyboardInterrupt):
            print(json.dumps({"error": "interrupted"}))
        else:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
