"""A rogue remote device: a Bumble central that connects to a Beryl peripheral and sends it malformed PDUs.

Usage:
    bumble_rogue.py --transport tcp-client:127.0.0.1:PORT --peer AA:BB:CC:DD:EE:FF --seed N [--rounds K] [--timeout S]

--transport  the Bumble transport of the controller the rogue drives (berylsim serves controller i at its base port + i)
--peer       the Beryl peripheral's address (`beryl status --json`: controller.address); it must be advertising
--seed       every PDU the rogue sends comes from random.Random(seed): a seed replays the same abuse
--rounds     rounds of abuse (default 3); each round runs every section below
--timeout    seconds to wait for each answer (default 2)

Each round sends, on one link (reconnecting when the peer drops it, counted in disconnectedUs), after a well-formed
look at the peer's database (its writable values and CCCDs):
  att        ATT (CID 0x0004): round 1 raises ATT_MTU, round 2 exchanges it a second time down to 23 (a client may only
             exchange once); truncated requests (Invalid PDU 0x04 expected), requests with trailing bytes, unknown
             request opcodes (Request Not Supported 0x06) and unknown commands (ignored); Read, Read Blob, Write, Prepare
             Write and Read Multiple on dead handles (0x0000, 0xFFF0-0xFFFF: Invalid Handle 0x01 naming the handle);
             Find Information, Read By Type, Read By Group Type and Find By Type Value with start > end and with start 0
             (0x01 naming the start, Core Vol 3 Part F §3.4.3.1); Read By Group Type with a 5-byte UUID (0x04 or 0x10)
             and of 0x2803 (0x10); CCCD writes of wrong lengths, then subscriptions kept on through the round
             (indications are confirmed); Read Blob past a value's end (0x07 or 0x0B); a Handle Value Indication to the
             peer's own client (it must confirm); a Write Request longer than ATT_MTU (refused); a flood of 100 Prepare
             Writes, Execute Write with reserved flags (an Error Response) then with 0x01; Execute Write with nothing
             prepared (0x01 and 0x00); in round 0, 130 prepares (past Beryl's 128) then a cancel; Handle Value
             Confirmations with no indication outstanding; 20 random PDUs. One request at a time, each answer awaited.
  signaling  LE signalling (CID 0x0005): unknown and BR/EDR-only command codes (Command Reject 0x0000, same
             identifier), identifier 0, length fields longer and shorter than the payload, under 4 bytes, over the
             23-byte signalling MTU, a Connection Parameter Update Request with invalid values and one of a bad length
             (a peripheral rejects any: Command Reject 0x0000, Core Vol 3 Part A §4.20), an unsolicited Connection
             Parameter Update Response and Command Reject (not answered), a Disconnection Request for a channel that does
             not exist, an LE Credit Based Connection Request on an unknown SPSM, 8 random packets.
  smp        SMP (CID 0x0006): Pairing Requests with maximum key size 0, 6 and over 16, a reserved IO capability, a
             reserved OOB flag, truncated and overlong (none may start pairing); Pairing Confirm, Random, DHKey Check and
             Response out of order; an unknown command code; Pairing Failed with nothing under way; empty; random bytes.
  acl        raw HCI ACL packets (Bumble's ACL flow control kept): an L2CAP basic header longer and shorter than its
             payload, a continuation past the header's length, a huge length with garbage continuations, a continuation
             with no start, a zero-length start, a start with part of a header, a well-formed request cut into 1-byte
             fragments (must be answered); PDUs to unassigned fixed channels (0x0007 and three others).
After each part a well-formed Read Request probes the peer (a missing answer is recorded in probeFailures).

Final checks (reconnecting first if the link is down): an ATT Exchange MTU and a full primary service discovery
(Read By Group Type) must get proper answers. stillServing = both answered.

The last stdout line is one JSON object: sent (abuse PDUs and ACL packets), errorResponses, invalidHandleErrors (Error
Responses carrying 0x01), disconnectedUs, stillServing, services, seed, rounds, mtu, seconds, sentDigest (a hash of
everything sent: the same seed against the same peer gives the same digest), error (why the checks failed), detail:
unexpected (answers that break a rule the Core spec states: where, case, bytes sent and got, the rule; the first 3 of
each case, unexpectedCounts has all), notes (answers worth a look that the spec leaves open), unanswered,
probeFailures, disconnectReasons, and counters. Progress goes to stderr (Bumble's own log with --verbose).
Exit 0 when the peer still serves after the abuse, 1 when it does not, 2 for usage errors.
"""
import argparse
import asyncio
import hashlib
import json
import logging
import random
import re
import struct
import sys
import time
import traceback

from bumble import hci
from bumble.device import ConnectionParametersPreferences, Device
from bumble.hci import Address
from bumble.transport import open_transport

ATT_CID, SIGNALING_CID, SMP_CID = 0x0004, 0x0005, 0x0006
ROGUE_ADDRESS = "D0:6E:0E:0E:0E:01"  # static random
CONNECT_TIMEOUT = 10.0
QUIET = 0.1  # how long to listen after a PDU that must not be answered

# ATT opcodes (Core Vol 3 Part F §3.4.8).
ERROR_RSP, MTU_REQ, MTU_RSP = 0x01, 0x02, 0x03
FIND_INFO_REQ, FIND_BY_TYPE_REQ, READ_BY_TYPE_REQ = 0x04, 0x06, 0x08
READ_REQ, READ_RSP, READ_BLOB_REQ, READ_MULTIPLE_REQ = 0x0A, 0x0B, 0x0C, 0x0E
READ_BY_GROUP_REQ, READ_BY_GROUP_RSP = 0x10, 0x11
WRITE_REQ, WRITE_RSP = 0x12, 0x13
PREPARE_REQ, PREPARE_RSP, EXECUTE_REQ, EXECUTE_RSP = 0x16, 0x17, 0x18, 0x19
NOTIFY, INDICATE, CONFIRM = 0x1B, 0x1D, 0x1E
READ_MULTIPLE_VARIABLE_REQ, MULTIPLE_NOTIFY = 0x20, 0x23
WRITE_CMD, SIGNED_WRITE_CMD = 0x52, 0xD2
REQUESTS = {MTU_REQ, FIND_INFO_REQ, FIND_BY_TYPE_REQ, READ_BY_TYPE_REQ, READ_REQ, READ_BLOB_REQ, READ_MULTIPLE_REQ,
            READ_BY_GROUP_REQ, WRITE_REQ, PREPARE_REQ, EXECUTE_REQ, READ_MULTIPLE_VARIABLE_REQ}
# What a server sends (responses, notifications, indications): a server receiving them answers nothing.
SERVER_SENT = {0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1D, 0x21, 0x23}
NEWER_SERVER_SENT = {0x21, 0x23}  # Read Multiple Variable Response, Multiple Handle Value Notification (Core 5.2)
KNOWN_OPCODES = sorted(REQUESTS | SERVER_SENT | {CONFIRM, WRITE_CMD, SIGNED_WRITE_CMD})
DEAD_HANDLES = [0x0000] + list(range(0xFFF0, 0x10000))
PRIMARY_SERVICE, CHARACTERISTIC, CCCD = 0x2800, 0x2803, 0x2902

# LE signalling codes (Core Vol 3 Part A §4).
COMMAND_REJECT, DISCONNECTION_REQ = 0x01, 0x06
PARAM_UPDATE_REQ, PARAM_UPDATE_RSP, LE_CREDIT_CONN_REQ = 0x12, 0x13, 0x14
KNOWN_SIGNALING = {0x01, 0x06, 0x07, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A}

# SMP codes (Core Vol 3 Part H §3.3).
PAIRING_REQ, PAIRING_RSP, PAIRING_CONFIRM, PAIRING_RANDOM, PAIRING_FAILED = 0x01, 0x02, 0x03, 0x04, 0x05
PAIRING_DHKEY_CHECK = 0x0D


def log(text):
    print(text, file=sys.stderr, flush=True)


class LinkLost(Exception):
    pass


class Rogue:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.timeout = args.timeout
        self.peer = args.peer.upper()
        self.device = None
        self.connection = None
        self.peer_address = None
        self.link_lost = asyncio.Event()
        self.closing = False
        self.mtu = 23
        self.counting = True
        self.round = 0
        self.section = ""
        # What the peer serves, learned once with well-formed discovery: writable value handles to flood.
        self.writable = []
        self.cccds = []
        self.readable = 0x0001  # the GAP service declaration: every GATT server has it readable
        self.digest = hashlib.sha256()  # over every abuse PDU sent: the same seed against the same peer gives the same digest
        self.stats = {"sent": 0, "errorResponses": 0, "invalidHandleErrors": 0, "disconnectedUs": 0}
        self.detail = {
            "connections": 0, "unanswered": 0, "unsolicited": 0, "probeFailures": [], "unexpected": [], "unexpectedCounts": {}, "notes": [],
            "signalingRejects": 0, "smpPairingFailed": 0, "smpPairingResponses": 0, "notifications": 0,
            "indicationsConfirmed": 0, "sectionSeconds": {}, "disconnectReasons": [], "prepareResponses": 0, "prepareQueueFull": 0,
        }

    # MARK: Link

    def new_inboxes(self):
        self.att_inbox = asyncio.Queue()
        self.signaling_inbox = asyncio.Queue()
        self.smp_inbox = asyncio.Queue()
        self.confirm_inbox = asyncio.Queue()

    async def open(self, transport):
        self.device = Device.with_hci("bumble-rogue", Address(ROGUE_ADDRESS), transport.source, transport.sink)
        manager = self.device.l2cap_channel_manager
        original = manager.on_pdu

        # Everything the peer sends on the fixed channels passes here first: answers to the rogue's raw PDUs are queued
        # for it; what Bumble must handle itself (the peer's own ATT requests, signalling) goes on to Bumble.
        def on_pdu(connection, cid, pdu):
            if self.connection is None or connection.handle != self.connection.handle:
                return original(connection, cid, pdu)
            if cid == ATT_CID:
                return self.on_att(connection, cid, pdu, original)
            if cid == SIGNALING_CID:
                self.signaling_inbox.put_nowait(bytes(pdu))
                try:
                    return original(connection, cid, pdu)
                except Exception as error:  # Bumble choking on the peer's answer is not the peer's failure
                    log(f"bumble could not handle signalling {bytes(pdu).hex()}: {error!r}")
                    return None
            if cid == SMP_CID:
                self.smp_inbox.put_nowait(bytes(pdu))
                return None
            self.note(f"peer sent a PDU on channel 0x{cid:04X}: {bytes(pdu).hex()}")
            return None

        manager.on_pdu = on_pdu
        self.new_inboxes()
        await self.device.power_on()

    def on_att(self, connection, cid, pdu, original):
        pdu = bytes(pdu)
        if not pdu:
            self.note("peer sent an empty ATT PDU")
            return
        opcode = pdu[0]
        if opcode in (NOTIFY, INDICATE, MULTIPLE_NOTIFY) and len(pdu) > self.mtu:  # answers are checked in att()
            self.unexpected("notification or indication longer than ATT_MTU", b"", pdu, f"no PDU exceeds ATT_MTU, here {self.mtu} (Core Vol 3 Part F §3.2.8)")
        if opcode in (NOTIFY, MULTIPLE_NOTIFY):
            self.detail["notifications"] += 1
        elif opcode == INDICATE:
            # A random write may have subscribed us: confirm, as a well-behaved client would.
            self.detail["indicationsConfirmed"] += 1
            self.send_raw_l2cap(ATT_CID, bytes([CONFIRM]), count=False)
        elif opcode & 1 or opcode == ERROR_RSP:
            if opcode == ERROR_RSP and self.counting and len(pdu) >= 5:
                self.stats["errorResponses"] += 1
                if pdu[4] == 0x01:
                    self.stats["invalidHandleErrors"] += 1
            self.att_inbox.put_nowait(pdu)
        elif opcode == CONFIRM:
            self.confirm_inbox.put_nowait(pdu)
        else:
            # The peer's own client's requests: Bumble's server answers them.
            try:
                original(connection, cid, pdu)
            except Exception as error:
                log(f"bumble could not handle ATT {pdu.hex()} from the peer: {error!r}")

    def on_disconnection(self, reason):
        if not self.closing:
            self.stats["disconnectedUs"] += 1
            self.detail["disconnectReasons"].append(f"round {self.round} {self.section}: 0x{int(reason):02X}")
            log(f"peer disconnected (reason 0x{int(reason):02X}) during round {self.round} {self.section}")
        self.connection = None
        self.link_lost.set()

    async def find_peer(self):
        found = asyncio.get_running_loop().create_future()

        def on_advertisement(advertisement):
            if str(advertisement.address).split("/")[0].upper() == self.peer and not found.done():
                found.set_result(advertisement.address)

        self.device.on("advertisement", on_advertisement)
        try:
            await self.device.start_scanning(active=False)
            try:
                return await asyncio.wait_for(found, CONNECT_TIMEOUT)
            except asyncio.TimeoutError:
                raise LinkLost(f"{self.peer} was not heard advertising within {CONNECT_TIMEOUT:.0f} s") from None
        finally:
            self.device.remove_listener("advertisement", on_advertisement)
            await self.device.stop_scanning()

    async def connect(self):
        if self.peer_address is None:
            self.peer_address = await self.find_peer()
        self.link_lost = asyncio.Event()
        self.new_inboxes()
        # The shortest interval: one answer per couple of connection events keeps a run short.
        preferences = {hci.Phy.LE_1M: ConnectionParametersPreferences(connection_interval_min=7.5, connection_interval_max=7.5)}
        connection = await self.device.connect(self.peer_address, connection_parameters_preferences=preferences, timeout=CONNECT_TIMEOUT)
        self.connection = connection
        self.mtu = 23
        self.detail["connections"] += 1
        connection.on("disconnection", self.on_disconnection)
        log(f"connected to {self.peer_address} (handle 0x{connection.handle:04X})")

    async def ensure_link(self):
        if self.connection is None:
            try:
                await self.connect()
            except Exception as error:
                raise LinkLost(f"could not reconnect to {self.peer}: {error!r}") from error

    async def close(self):
        if self.connection is not None:
            self.closing = True
            try:
                await asyncio.wait_for(self.connection.disconnect(), 5)
            except Exception:
                pass

    # MARK: Sending

    def send_raw_l2cap(self, cid, payload, count=True):
        if self.connection is None:
            return
        if count:
            self.stats["sent"] += 1
            self.digest.update(struct.pack("<HH", cid, len(payload)) + bytes(payload))
        self.device.send_l2cap_pdu(self.connection.handle, cid, bytes(payload))

    def send_acl(self, data, continuation=False):
        """One HCI ACL data packet as given (the L2CAP header inside may lie), through Bumble's flow control."""
        if self.connection is None:
            return
        handle = self.connection.handle
        link = self.device.host.connections.get(handle)
        if link is None:
            return
        self.stats["sent"] += 1
        self.digest.update(struct.pack("<BH", 0xAC if continuation else 0xA5, len(data)) + bytes(data))
        packet = hci.HCI_AclDataPacket(connection_handle=handle, pb_flag=1 if continuation else 0, bc_flag=0,
                                       data_total_length=len(data), data=bytes(data))
        link.acl_packet_queue.enqueue(packet, handle)

    async def next_from(self, inbox, timeout):
        if self.link_lost.is_set() and inbox.empty():
            return None
        getter = asyncio.ensure_future(inbox.get())
        lost = asyncio.ensure_future(self.link_lost.wait())
        done, pending = await asyncio.wait({getter, lost}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if getter in done:
            return getter.result()
        if not getter.done():
            await asyncio.gather(getter, return_exceptions=True)
        return None

    def drain(self, inbox):
        stale = 0
        while not inbox.empty():
            inbox.get_nowait()
            stale += 1
        self.detail["unsolicited"] += stale

    async def att(self, pdu, expect="reply", timeout=None, count=True):
        """Sends one ATT PDU and returns the answer to it (None if none came).

        expect: "reply" (a request: wait for its answer), "none" (must not be answered: listen briefly), "maybe"."""
        await self.ensure_link()
        self.drain(self.att_inbox)
        pdu = bytes(pdu)
        self.send_raw_l2cap(ATT_CID, pdu, count=count)
        wait = (timeout or self.timeout) if expect in ("reply", "maybe") else QUIET
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            answer = await self.next_from(self.att_inbox, max(0.0, remaining)) if remaining > 0 else None
            if answer is None:
                if expect == "reply" and not self.link_lost.is_set():
                    self.detail["unanswered"] += 1
                return None
            if answers(pdu, answer):
                if pdu[0] == MTU_REQ and len(pdu) == 3 and answer[0] == MTU_RSP and len(answer) == 3:
                    # ATT_MTU = min(Client Rx MTU, Server Rx MTU), never under 23 (Core Vol 3 Part F §3.4.2.2).
                    self.mtu = max(23, min(struct.unpack_from("<H", pdu, 1)[0], struct.unpack_from("<H", answer, 1)[0]))
                if len(answer) > self.mtu:
                    self.unexpected("answer longer than ATT_MTU", pdu, answer,
                                    f"no PDU exceeds ATT_MTU, here {self.mtu} (Core Vol 3 Part F §3.2.8)")
                return answer
            self.detail["unsolicited"] += 1

    async def signaling(self, packet, wait):
        await self.ensure_link()
        self.drain(self.signaling_inbox)
        self.send_raw_l2cap(SIGNALING_CID, packet)
        return await self.next_from(self.signaling_inbox, wait)

    async def smp(self, pdu, wait):
        await self.ensure_link()
        self.drain(self.smp_inbox)
        self.send_raw_l2cap(SMP_CID, pdu)
        answer = await self.next_from(self.smp_inbox, wait)
        if answer:
            if answer[0] == PAIRING_FAILED:
                self.detail["smpPairingFailed"] += 1
            elif answer[0] == PAIRING_RSP:
                self.detail["smpPairingResponses"] += 1
        return answer

    # MARK: Findings

    def where(self):
        return f"round {self.round} {self.section}"

    def unexpected(self, case, sent, got, rule):
        entry = {"where": self.where(), "case": case, "sent": bytes(sent).hex(), "got": got.hex() if got else None, "rule": rule}
        counts = self.detail["unexpectedCounts"]
        counts[case] = counts.get(case, 0) + 1
        if counts[case] <= 3:  # the first few of each case, with their bytes; the counts say how many more
            self.detail["unexpected"].append(entry)
            log(f"UNEXPECTED {entry}")

    def note(self, text):
        if len(self.detail["notes"]) < 100:
            self.detail["notes"].append(f"{self.where()}: {text}")

    async def expect_error(self, case, pdu, codes, handle=None, rule=""):
        """A request that must get an Error Response for its opcode with one of `codes` (and `handle` when given)."""
        answer = await self.att(pdu)
        if self.link_lost.is_set() and answer is None:
            return None
        if answer is None or answer[0] != ERROR_RSP or len(answer) != 5 or answer[4] not in codes \
                or (handle is not None and struct.unpack_from("<H", answer, 2)[0] != handle):
            wanted = "/".join(f"0x{c:02X}" for c in codes)
            self.unexpected(case, pdu, answer, rule or f"Error Response {wanted}" + (f" for handle 0x{handle:04X}" if handle is not None else ""))
        return answer

    async def expect_silence(self, case, pdu, rule):
        answer = await self.att(pdu, expect="none")
        if answer is not None:
            self.unexpected(case, pdu, answer, rule)

    async def probe(self):
        """A well-formed Read Request the peer must answer (any proper answer: a value or an Error Response)."""
        pdu = bytes([READ_REQ]) + struct.pack("<H", self.readable)
        answer = await self.att(pdu, count=False)
        if answer is None:
            if self.link_lost.is_set():
                return
            self.detail["probeFailures"].append(self.where())
            self.unexpected("probe", pdu, None, "a well-formed Read Request is answered")

    # MARK: Recon (well-formed)

    async def recon(self):
        """Finds writable values (Read By Type 0x2803) to aim prepare floods at, and the CCCDs (Read By Type 0x2902)."""
        self.counting = False
        try:
            await self.recon_characteristics()
            await self.recon_cccds()
        finally:
            self.counting = True
        log(f"recon: writable value handles {[f'0x{h:04X}' for h in self.writable]}, CCCDs {[f'0x{h:04X}' for h in self.cccds]}")

    async def recon_characteristics(self):
        start = 0x0001
        while start <= 0xFFFF:
            answer = await self.att(bytes([READ_BY_TYPE_REQ]) + struct.pack("<HHH", start, 0xFFFF, CHARACTERISTIC), count=False)
            if answer is None or answer[0] != 0x09 or len(answer) < 2 or answer[1] < 7:
                return
            size = answer[1]
            last = start
            for offset in range(2, len(answer) - size + 1, size):
                handle, properties, value_handle = struct.unpack_from("<HBH", answer, offset)
                if properties & 0x08:
                    self.writable.append(value_handle)
                last = handle
            if last == 0xFFFF:
                return
            start = last + 1

    async def recon_cccds(self):
        start = 0x0001
        while start <= 0xFFFF:
            answer = await self.att(bytes([READ_BY_TYPE_REQ]) + struct.pack("<HHH", start, 0xFFFF, CCCD), count=False)
            if answer is None or answer[0] != 0x09 or len(answer) < 2 or answer[1] != 4:
                return
            handles = [struct.unpack_from("<H", answer, offset)[0] for offset in range(2, len(answer) - 3, 4)]
            self.cccds += handles
            if not handles or handles[-1] == 0xFFFF:
                return
            start = handles[-1] + 1

    # MARK: ATT abuse

    def dead(self):
        return self.rng.choice(DEAD_HANDLES)

    def target(self):
        return self.rng.choice(self.writable) if self.writable else 0x0003

    async def exchange_mtu(self, client_mtu, case):
        pdu = bytes([MTU_REQ]) + struct.pack("<H", client_mtu)
        answer = await self.att(pdu)
        if not (answer is not None and answer[0] == MTU_RSP and len(answer) == 3) and (answer is not None or not self.link_lost.is_set()):
            self.unexpected(case, pdu, answer, "an Exchange MTU Request gets an Exchange MTU Response")

    async def att_round(self):
        rng = self.rng
        # ATT_MTU: round 0 keeps the default 23; round 1 raises it; round 2 exchanges again (a client may only exchange
        # once, Core Vol 3 Part F §3.4.2.1), asking 23 or less: the answer sets ATT_MTU back to 23, and every answer
        # after it must fit in that. Later rounds exchange at random.
        if self.round == 1:
            await self.exchange_mtu(rng.randint(64, 517), "exchange MTU")
        elif self.round == 2:
            await self.exchange_mtu(rng.choice([0, 5, 22, 23]), "second exchange MTU, 23 or less")
        elif self.round >= 3:
            await self.exchange_mtu(rng.randint(0, 600), "exchange MTU again")

        # Truncated requests: too short for their parameters (the most each may carry is one byte short of the least valid).
        truncated = {
            MTU_REQ: 1, FIND_INFO_REQ: 3, FIND_BY_TYPE_REQ: 5, READ_BY_TYPE_REQ: 5, READ_REQ: 1, READ_BLOB_REQ: 3,
            READ_MULTIPLE_REQ: 3, READ_BY_GROUP_REQ: 5, WRITE_REQ: 1, PREPARE_REQ: 3, EXECUTE_REQ: 0,
        }
        for opcode in rng.sample(sorted(truncated), len(truncated)):
            length = rng.randint(0, truncated[opcode])
            pdu = bytes([opcode]) + rng.randbytes(length)
            await self.expect_error(f"truncated 0x{opcode:02X}", pdu, {0x04}, rule="a truncated request gets Error Response Invalid PDU 0x04")
        # Requests with trailing garbage after fixed-size parameters (the MTU asked is the current one, should it be taken).
        for pdu in [bytes([READ_REQ]) + struct.pack("<H", self.readable), bytes([FIND_INFO_REQ]) + struct.pack("<HH", 1, 0xFFFF),
                    bytes([EXECUTE_REQ, 0x00]), bytes([MTU_REQ]) + struct.pack("<H", self.mtu)]:
            pdu += rng.randbytes(rng.randint(1, 4))
            answer = await self.att(pdu)
            if answer is None and not self.link_lost.is_set():
                self.unexpected(f"overlong 0x{pdu[0]:02X}", pdu, None, "a request is answered")
            elif answer is not None and answer[0] != ERROR_RSP:
                self.note(f"overlong {pdu.hex()} accepted: {answer.hex()}")

        # Unknown and unsupported requests (command flag clear) get Request Not Supported; unknown commands are ignored.
        unknown_requests = [0x00, 0x14, 0x1A, 0x1C, 0x22, 0x24, 0x26, 0x2E, 0x30, 0x3E, READ_MULTIPLE_VARIABLE_REQ]
        for opcode in rng.sample(unknown_requests, 5):
            pdu = bytes([opcode]) + rng.randbytes(rng.randint(0, 8))
            if opcode == READ_MULTIPLE_VARIABLE_REQ:
                pdu = bytes([opcode]) + struct.pack("<HH", 0x0001, 0x0002)
            answer = await self.att(pdu)
            if opcode == READ_MULTIPLE_VARIABLE_REQ and answer is not None and answer[0] == READ_MULTIPLE_VARIABLE_REQ + 1:
                continue  # a Core 5.2 server supports it
            if answer is None or answer[0] != ERROR_RSP or len(answer) != 5:
                if not (answer is None and self.link_lost.is_set()):
                    self.unexpected(f"unknown request 0x{opcode:02X}", pdu, answer, "an unsupported request gets an Error Response (0x06)")
            elif answer[4] != 0x06:
                self.unexpected(f"unknown request 0x{opcode:02X}", pdu, answer, "an unsupported request gets Error Response Request Not Supported 0x06")
        for opcode in rng.sample([0x40, 0x42, 0x4E, 0x54, 0x60, 0x7E, 0x7F, 0xC0, 0xC4, 0xFE, 0xFF], 4):
            pdu = bytes([opcode]) + rng.randbytes(rng.randint(0, 10))
            await self.expect_silence(f"unknown command 0x{opcode:02X}", pdu, "an unknown command (bit 6 set) is ignored (Core Vol 3 Part F §3.3.1)")

        # Dead handles: Invalid Handle 0x01 naming the handle.
        for _ in range(3):
            handle = self.dead()
            await self.expect_error("read dead handle", bytes([READ_REQ]) + struct.pack("<H", handle), {0x01}, handle)
        await self.expect_error("read handle 0x0000", bytes([READ_REQ, 0, 0]), {0x01}, 0x0000)
        for _ in range(2):
            handle = self.dead()
            await self.expect_error("read blob dead handle", bytes([READ_BLOB_REQ]) + struct.pack("<HH", handle, rng.randint(0, 0xFFFF)), {0x01}, handle)
            handle = self.dead()
            await self.expect_error("write dead handle", bytes([WRITE_REQ]) + struct.pack("<H", handle) + rng.randbytes(rng.randint(0, self.mtu - 3)), {0x01}, handle)
            handle = self.dead()
            await self.expect_error("prepare dead handle", bytes([PREPARE_REQ]) + struct.pack("<HH", handle, rng.randint(0, 600)) + rng.randbytes(rng.randint(0, self.mtu - 5)), {0x01}, handle)
        handles = [self.dead() for _ in range(rng.randint(2, 5))]
        await self.expect_error("read multiple dead handles", bytes([READ_MULTIPLE_REQ]) + b"".join(struct.pack("<H", h) for h in handles), {0x01}, handles[0])
        await self.expect_silence("write command dead handle", bytes([WRITE_CMD]) + struct.pack("<H", self.dead()) + rng.randbytes(4), "a command is never answered")
        await self.expect_silence("signed write command", bytes([SIGNED_WRITE_CMD]) + struct.pack("<H", rng.randint(1, 0x30)) + rng.randbytes(rng.randint(0, 16)), "a command is never answered")

        # Ranges: start 0 or start > end is Invalid Handle, naming the starting handle (Core Vol 3 Part F §3.4.3.1 and kin).
        for opcode, tail in [(FIND_INFO_REQ, b""), (READ_BY_TYPE_REQ, struct.pack("<H", CHARACTERISTIC)),
                             (READ_BY_GROUP_REQ, struct.pack("<H", PRIMARY_SERVICE)), (FIND_BY_TYPE_REQ, struct.pack("<HH", PRIMARY_SERVICE, 0x180D))]:
            start = rng.randint(2, 0xFFFF)
            end = rng.randint(1, start - 1)
            await self.expect_error(f"0x{opcode:02X} start > end", bytes([opcode]) + struct.pack("<HH", start, end) + tail, {0x01}, start)
            await self.expect_error(f"0x{opcode:02X} start 0", bytes([opcode]) + struct.pack("<HH", 0, rng.randint(0, 0xFFFF)) + tail, {0x01}, 0)

        # Read By Group Type: a 5-byte UUID is Invalid PDU (or Unsupported Group Type); a non-grouping type is 0x10.
        await self.expect_error("group type 5-byte UUID", bytes([READ_BY_GROUP_REQ]) + struct.pack("<HH", 1, 0xFFFF) + rng.randbytes(5), {0x04, 0x10})
        await self.expect_error("group type 0x2803", bytes([READ_BY_GROUP_REQ]) + struct.pack("<HHH", 1, 0xFFFF, CHARACTERISTIC), {0x10},
                                rule="Read By Group Type of a non-grouping type gets Unsupported Group Type 0x10 (Core Vol 3 Part F §3.4.4.9)")
        await self.expect_error("read by type 3-byte UUID", bytes([READ_BY_TYPE_REQ]) + struct.pack("<HH", 1, 0xFFFF) + rng.randbytes(3), {0x04})

        # Client Characteristic Configuration: wrong lengths, then subscriptions that stay on for the rest of the round
        # (notifications and indications flow under the abuse; indications are confirmed).
        for handle in self.cccds:
            size = rng.choice([0, 1, 3, 4])
            pdu = bytes([WRITE_REQ]) + struct.pack("<H", handle) + rng.randbytes(size)
            answer = await self.att(pdu)
            if answer is not None and answer[0] != ERROR_RSP:
                self.unexpected("CCCD write of a wrong length", pdu, answer, "a Client Characteristic Configuration value is 2 bytes (Core Vol 3 Part G §3.3.3.3)")
            elif answer is not None and answer[4] != 0x0D:
                self.note(f"CCCD write of {size} bytes {pdu.hex()}: {answer.hex()}")
            await self.att(bytes([WRITE_REQ]) + struct.pack("<HH", handle, rng.choice([1, 2, 3])))
        # Read Blob past the end of a value: Invalid Offset 0x07, or Attribute Not Long 0x0B for a short fixed value
        # (Core Vol 3 Part F §3.4.4.5).
        for handle in [self.readable] + self.writable[-1:]:
            await self.expect_error("read blob past the end", bytes([READ_BLOB_REQ]) + struct.pack("<HH", handle, rng.randint(0x0300, 0xFFFF)), {0x07, 0x0B}, handle,
                                    rule="Read Blob at an offset past the value gets Invalid Offset 0x07 (or Attribute Not Long 0x0B)")
        # An indication to the peer's own client: a client confirms every indication (Core Vol 3 Part F §3.4.7.2).
        await self.ensure_link()
        self.drain(self.confirm_inbox)
        pdu = bytes([INDICATE]) + struct.pack("<H", rng.randint(1, 0xFFFF)) + rng.randbytes(rng.randint(0, self.mtu - 3))
        self.send_raw_l2cap(ATT_CID, pdu)
        answer = await self.next_from(self.confirm_inbox, self.timeout)
        if answer is None and not self.link_lost.is_set():
            self.unexpected("indication to the peer's client", pdu, None, "a client confirms a Handle Value Indication")

        # A Write Request longer than ATT_MTU (kept within 521 bytes, the most any L2CAP frame here may carry).
        extra = rng.randint(1, 8)
        size = min(self.mtu + extra, 521)
        if size > self.mtu:
            pdu = bytes([WRITE_REQ]) + struct.pack("<H", self.target()) + rng.randbytes(size - 3)
            answer = await self.att(pdu)
            if answer is not None and answer[0] != ERROR_RSP:
                self.unexpected("write over ATT_MTU", pdu, answer, f"a {size}-byte request over ATT_MTU {self.mtu} (as the last Exchange MTU set it) is refused, "
                                "not carried out (Core Vol 3 Part F §3.2.8)")
            elif answer is None and not self.link_lost.is_set():
                self.note(f"write of {size} bytes over ATT_MTU {self.mtu} went unanswered")

        # Prepare Write flood, Execute Write with an invalid flags value, then with 0x01.
        await self.prepare_flood(100)
        await self.expect_error("execute flags invalid", bytes([EXECUTE_REQ, rng.choice([0x02, 0x03, 0x80, 0xFF])]), {0x04},
                                rule="Execute Write with reserved flags gets an Error Response (Invalid PDU 0x04)")
        pdu = bytes([EXECUTE_REQ, 0x01])
        answer = await self.att(pdu)
        if answer is None and not self.link_lost.is_set():
            self.unexpected("execute after flood", pdu, None, "Execute Write is answered")
        elif answer is not None:
            self.note(f"execute 0x01 after a 100-prepare flood: {answer.hex()}")
        # Execute with nothing prepared: an Execute Write Response (nothing to do).
        for flags in (0x01, 0x00):
            pdu = bytes([EXECUTE_REQ, flags])
            answer = await self.att(pdu)
            if not (answer is None and self.link_lost.is_set()) and (answer is None or answer != bytes([EXECUTE_RSP])):
                self.unexpected(f"execute 0x{flags:02X} with nothing prepared", pdu, answer, "Execute Write with an empty queue gets an Execute Write Response")
        # Past any prepare queue (Beryl keeps 128): Prepare Queue Full is the answer, then a cancel empties it.
        if self.round == 0:
            await self.prepare_flood(130)
            pdu = bytes([EXECUTE_REQ, 0x00])
            answer = await self.att(pdu)
            if not (answer is None and self.link_lost.is_set()) and answer != bytes([EXECUTE_RSP]):
                self.unexpected("cancel after flood", pdu, answer, "Execute Write 0x00 (cancel) gets an Execute Write Response")

        # Confirmations with no indication outstanding: nothing to answer.
        await self.expect_silence("unsolicited confirmation", bytes([CONFIRM]), "a Handle Value Confirmation is never answered")
        await self.expect_silence("confirmation with garbage", bytes([CONFIRM]) + rng.randbytes(rng.randint(1, 6)), "a Handle Value Confirmation is never answered")

        # Random byte strings.
        for _ in range(20):
            await self.random_att()
        for handle in self.cccds:
            await self.att(bytes([WRITE_REQ]) + struct.pack("<HH", handle, 0))

    async def prepare_flood(self, count):
        rng = self.rng
        handle = self.target()
        offset = 0
        full = 0
        for _ in range(count):
            part = rng.randbytes(rng.randint(0, max(0, self.mtu - 5)))
            if rng.random() < 0.1:
                offset = rng.randint(0, 0xFFFF)
            pdu = bytes([PREPARE_REQ]) + struct.pack("<HH", handle, offset) + part
            answer = await self.att(pdu)
            if answer is None:
                if self.link_lost.is_set():
                    return
                continue
            if answer[0] == PREPARE_RSP:
                self.detail["prepareResponses"] += 1
                if answer[1:] != pdu[1:]:
                    self.unexpected("prepare echo", pdu, answer, "a Prepare Write Response echoes the request (Core Vol 3 Part F §3.4.6.2)")
            elif answer[0] == ERROR_RSP and len(answer) == 5 and answer[4] == 0x09:
                full += 1
                self.detail["prepareQueueFull"] += 1
            offset = (offset + len(part)) & 0xFFFF
        if count > 128 and full == 0 and self.writable:
            self.note(f"{count} prepares were all queued (no Prepare Queue Full)")

    async def random_att(self):
        rng = self.rng
        opcode = rng.choice(KNOWN_OPCODES) if rng.random() < 0.6 else rng.randint(0, 255)
        length = rng.choice([0, 1, 2, 3, 4, 5, rng.randint(0, max(1, self.mtu + 4))])
        body = rng.randbytes(length)
        if opcode in (READ_REQ, READ_BLOB_REQ, WRITE_REQ, PREPARE_REQ, WRITE_CMD) and length >= 2 and rng.random() < 0.5:
            body = struct.pack("<H", self.dead()) + body[2:]  # mostly keep random writes off the real attributes
        pdu = bytes([opcode]) + body
        if opcode in NEWER_SERVER_SENT:
            expect = "maybe"  # Core 5.2 server PDUs: a server that predates them cannot tell them from unknown requests
        elif opcode in SERVER_SENT or opcode == CONFIRM or opcode & 0x40:
            expect = "none"
        elif opcode % 2 == 0:
            expect = "reply"
        else:
            expect = "maybe"  # an unknown opcode with the command flag clear: a request to some servers
        answer = await self.att(pdu, expect=expect)
        if opcode in NEWER_SERVER_SENT and answer is not None:
            self.note(f"Core 5.2 server PDU {pdu.hex()} answered as an unknown request: {answer.hex()}")
        if expect == "none" and answer is not None:
            self.unexpected("random (never answered)", pdu, answer, "responses, notifications, confirmations and commands are never answered")
        if answer is None and expect == "reply" and not self.link_lost.is_set():
            self.note(f"random request {pdu.hex()} went unanswered")

    # MARK: LE signalling abuse

    async def signaling_round(self):
        rng = self.rng

        def packet(code, identifier, body, length=None):
            return bytes([code, identifier]) + struct.pack("<H", len(body) if length is None else length) + body

        async def expect_reject(case, sent, identifier, reasons, strict=True, rule=""):
            answer = await self.signaling(sent, self.timeout)
            ok = answer is not None and len(answer) >= 6 and answer[0] == COMMAND_REJECT and answer[1] == identifier \
                and struct.unpack_from("<H", answer, 4)[0] in reasons
            if answer is not None and answer[0] == COMMAND_REJECT:
                self.detail["signalingRejects"] += 1
            if not ok:
                if answer is None and self.link_lost.is_set():
                    return
                if strict:
                    self.unexpected(case, sent, answer, rule)
                else:
                    self.note(f"{case} {sent.hex()}: {answer.hex() if answer else 'no answer'} ({rule})")

        # Unknown command codes: Command Reject, Command Not Understood, same identifier (Core Vol 3 Part A §4.1).
        unknown = [c for c in range(0x00, 0x100) if c not in KNOWN_SIGNALING and c not in range(0x02, 0x12)]
        for code in rng.sample(unknown, 4):
            identifier = rng.randint(1, 255)
            await expect_reject(f"unknown code 0x{code:02X}", packet(code, identifier, rng.randbytes(rng.randint(0, 8))), identifier, {0x0000},
                                rule="an unknown signalling command gets Command Reject 0x0000 with its identifier")
        # BR/EDR-only commands on the LE signalling channel are not understood either.
        code = rng.choice([0x02, 0x04, 0x08, 0x0A, 0x0C, 0x0E, 0x10])
        identifier = rng.randint(1, 255)
        await expect_reject(f"BR/EDR code 0x{code:02X}", packet(code, identifier, rng.randbytes(4)), identifier, {0x0000},
                            rule="a BR/EDR-only signalling command on LE gets Command Reject 0x0000")
        # Identifier 0 is never valid; whatever the answer, it is only noted.
        sent = packet(PARAM_UPDATE_REQ, 0, struct.pack("<HHHH", 6, 6, 0, 100))
        answer = await self.signaling(sent, QUIET * 3)
        if answer is not None:
            self.note(f"identifier 0 {sent.hex()} answered {answer.hex()}")
        # Length fields that disagree with the payload.
        identifier = rng.randint(1, 255)
        body = rng.randbytes(rng.randint(0, 6))
        await expect_reject("length too long", packet(rng.choice(sorted(KNOWN_SIGNALING)), identifier, body, len(body) + rng.randint(1, 10)),
                            identifier, {0x0000}, strict=False, rule="a length past the payload is not understood")
        identifier = rng.randint(1, 255)
        body = rng.randbytes(rng.randint(4, 10))
        await expect_reject("length too short", packet(PARAM_UPDATE_REQ, identifier, body, rng.randint(0, len(body) - 1)),
                            identifier, {0x0000}, strict=False, rule="a length short of the payload is not understood")
        # Truncated: under the 4-byte command header.
        sent = rng.randbytes(rng.randint(0, 3))
        answer = await self.signaling(sent, QUIET * 3)
        if answer is not None:
            self.note(f"signalling fragment {sent.hex()} answered {answer.hex()}")
        # Over the LE signalling MTU (23): Signaling MTU Exceeded 0x0001 (Core Vol 3 Part A §4.1).
        identifier = rng.randint(1, 255)
        await expect_reject("over signalling MTU", packet(rng.choice([0x18, 0x20, 0x14]), identifier, rng.randbytes(rng.randint(20, 60))),
                            identifier, {0x0001}, strict=False, rule="a command over the signalling MTU gets Command Reject 0x0001")
        # Connection Parameter Update Request to a peripheral, invalid values: Command Reject 0x0000 (§4.20).
        identifier = rng.randint(1, 255)
        values = rng.choice([(0, 0, 0, 0), (3200, 6, 500, 5), (0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF), (6, 7, 499, 10), (5, 4000, 1000, 3201)])
        await expect_reject("parameter update request (invalid values)", packet(PARAM_UPDATE_REQ, identifier, struct.pack("<HHHH", *values)),
                            identifier, {0x0000},
                            rule="a peripheral answers any Connection Parameter Update Request with Command Reject 0x0000 (Core Vol 3 Part A §4.20)")
        identifier = rng.randint(1, 255)
        await expect_reject("parameter update request (bad length)", packet(PARAM_UPDATE_REQ, identifier, rng.randbytes(rng.choice([0, 3, 7, 9]))),
                            identifier, {0x0000}, rule="a malformed signalling command gets Command Reject 0x0000")
        # Unsolicited response and a Command Reject: not answered.
        for sent in (packet(PARAM_UPDATE_RSP, rng.randint(1, 255), struct.pack("<H", rng.randint(0, 2))),
                     packet(COMMAND_REJECT, rng.randint(1, 255), struct.pack("<H", rng.randint(0, 3)) + rng.randbytes(rng.choice([0, 2, 4])))):
            answer = await self.signaling(sent, QUIET * 3)
            if answer is not None:
                self.unexpected("unsolicited response / Command Reject", sent, answer, "responses and Command Rejects are not answered")
        # Disconnection Request for a channel that does not exist: Command Reject, Invalid CID in Request 0x0002 (§4.6).
        identifier = rng.randint(1, 255)
        await expect_reject("disconnect unknown CID", packet(DISCONNECTION_REQ, identifier, struct.pack("<HH", rng.randint(0x40, 0x7F), rng.randint(0x40, 0x7F))),
                            identifier, {0x0002}, strict=False, rule="a Disconnection Request for a channel not in use gets Command Reject 0x0002")
        # LE Credit Based Connection Request on an unknown SPSM: refused somehow (response 0x0002 or Command Reject).
        identifier = rng.randint(1, 255)
        sent = packet(LE_CREDIT_CONN_REQ, identifier, struct.pack("<HHHHH", rng.randint(0x80, 0xFF), 0x40, 23, 23, 1))
        answer = await self.signaling(sent, self.timeout)
        if answer is None and not self.link_lost.is_set():
            self.unexpected("LE credit based connection request", sent, None, "a signalling request is answered")
        elif answer is not None and not (answer[0] == COMMAND_REJECT or (answer[0] == 0x15 and len(answer) >= 14 and struct.unpack_from("<H", answer, 12)[0] != 0)):
            self.unexpected("LE credit based connection request", sent, answer, "a connection on an unknown SPSM is refused")
        # Random bytes.
        for _ in range(8):
            sent = rng.randbytes(rng.randint(0, 30))
            answer = await self.signaling(sent, QUIET * 3)
            if answer is not None and answer[0] == COMMAND_REJECT:
                self.detail["signalingRejects"] += 1

    # MARK: SMP abuse

    async def smp_round(self):
        rng = self.rng

        def pairing_request(io=0x03, oob=0x00, auth=0x01, key=16, initiator=0x00, responder=0x00):
            return bytes([PAIRING_REQ, io, oob, auth, key, initiator, responder])

        async def must_not_pair(case, pdu, rule, reasons):
            answer = await self.smp(pdu, self.timeout)
            if answer is not None and answer[0] == PAIRING_RSP:
                self.unexpected(case, pdu, answer, rule)
                # Pairing started after all: end it, so the next abuse starts from idle.
                await self.smp(bytes([PAIRING_FAILED, 0x08]), QUIET)
            elif answer is None:
                if not self.link_lost.is_set():
                    self.note(f"{case} {pdu.hex()}: no answer")
            elif answer[0] != PAIRING_FAILED or len(answer) != 2 or answer[1] not in reasons:
                self.note(f"{case} {pdu.hex()}: {answer.hex()}")

        # Pairing Failed reasons: 0x06 Encryption Key Size, 0x0A Invalid Parameters (Core Vol 3 Part H §3.5.5).
        cases = [
            ("pairing request max key 0", pairing_request(key=0), "a maximum key size of 0 is refused (Pairing Failed, Core Vol 3 Part H §3.5.1)", {0x06, 0x0A}),
            ("pairing request max key 6", pairing_request(key=6), "a maximum key size under 7 is refused", {0x06, 0x0A}),
            ("pairing request max key 17", pairing_request(key=rng.randint(17, 255)), "a maximum key size over 16 is refused", {0x06, 0x0A}),
            ("pairing request reserved IO capability", pairing_request(io=rng.randint(0x05, 0xFF)), "a reserved IO capability is refused", {0x0A}),
            ("pairing request reserved OOB flag", pairing_request(oob=rng.randint(0x02, 0xFF)), "a reserved OOB flag is refused", {0x0A}),
            ("pairing request truncated", pairing_request()[:rng.randint(1, 6)], "a truncated Pairing Request is refused", {0x0A}),
            ("pairing request overlong", pairing_request() + rng.randbytes(rng.randint(1, 8)), "an overlong Pairing Request is refused", {0x0A}),
        ]
        for case, pdu, rule, reasons in rng.sample(cases, len(cases)):
            await must_not_pair(case, pdu, rule, reasons)
        # Out of order: nothing under way.
        for case, pdu in [("pairing confirm out of order", bytes([PAIRING_CONFIRM]) + rng.randbytes(16)),
                          ("pairing random out of order", bytes([PAIRING_RANDOM]) + rng.randbytes(16)),
                          ("DHKey check out of order", bytes([PAIRING_DHKEY_CHECK]) + rng.randbytes(16)),
                          ("pairing response to a responder", bytes([PAIRING_RSP, 0x03, 0, 0x01, 16, 0, 0]))]:
            answer = await self.smp(pdu, QUIET * 3)
            if answer is not None and answer[0] not in (PAIRING_FAILED,):
                self.unexpected(case, pdu, answer, "an out-of-order SMP command is refused or ignored")
            elif answer is not None:
                self.note(f"{case}: {answer.hex()}")
        # Unknown command code: Pairing Failed, Command Not Supported 0x07.
        code = rng.randint(0x0F, 0xFF)
        pdu = bytes([code]) + rng.randbytes(rng.randint(0, 10))
        answer = await self.smp(pdu, self.timeout)
        if answer is None and not self.link_lost.is_set():
            self.note(f"unknown SMP command {pdu.hex()}: no answer")
        elif answer is not None and answer != bytes([PAIRING_FAILED, 0x07]):
            self.note(f"unknown SMP command {pdu.hex()}: {answer.hex()} (expected Pairing Failed 0x07)")
        # Pairing Failed with nothing under way, an empty PDU, and random bytes.
        for pdu in [bytes([PAIRING_FAILED, rng.randint(0, 255)]), b""] + [rng.randbytes(rng.randint(1, 70)) for _ in range(5)]:
            answer = await self.smp(pdu, QUIET * 3)
            if answer is not None and answer[0] == PAIRING_RSP:
                self.note(f"random SMP {pdu.hex()} started pairing: {answer.hex()}")
                await self.smp(bytes([PAIRING_FAILED, 0x08]), QUIET)

    # MARK: Raw ACL abuse

    async def acl_round(self):
        rng = self.rng
        read = bytes([READ_REQ]) + struct.pack("<H", self.readable)

        def header(length, cid=ATT_CID):
            return struct.pack("<HH", length & 0xFFFF, cid)

        async def then_probe(case, sent_description):
            await asyncio.sleep(QUIET)
            if not self.att_inbox.empty():
                self.note(f"malformed frame ({case}: {sent_description}) was answered: {self.att_inbox.get_nowait().hex()}")
            before = len(self.detail["probeFailures"])
            await self.probe()
            if len(self.detail["probeFailures"]) > before:
                self.detail["probeFailures"][-1] += f" after {case} ({sent_description})"

        await self.ensure_link()
        self.drain(self.att_inbox)
        # Header longer than the payload: a start that never completes, then a new start.
        data = header(len(read) + rng.randint(1, 40)) + read
        self.send_acl(data)
        await then_probe("header longer than payload", data.hex())
        # Header shorter than the payload: dropped, never answered as a Read.
        data = header(rng.randint(0, len(read) - 1)) + read + rng.randbytes(rng.randint(0, 6))
        self.send_acl(data)
        await then_probe("header shorter than payload", data.hex())
        # A start and a continuation that overshoots what the header promised.
        split = rng.randint(4, len(read) + 3)
        data = header(len(read)) + read
        self.send_acl(data[:split])
        overshoot = data[split:] + rng.randbytes(rng.randint(1, 20))
        self.send_acl(overshoot, continuation=True)
        await then_probe("continuation past the header's length", data[:split].hex() + " + " + overshoot.hex())
        # A huge length, continuations of garbage, then a new start.
        data = header(rng.choice([0xFFFF, 0x0400, 0x8000, 522])) + rng.randbytes(rng.randint(0, 40))
        self.send_acl(data)
        for _ in range(rng.randint(1, 3)):
            self.send_acl(rng.randbytes(rng.randint(1, 200)), continuation=True)
        await then_probe("huge length", data.hex())
        # A continuation with no start.
        data = rng.randbytes(rng.randint(1, 30))
        self.send_acl(data, continuation=True)
        await then_probe("continuation with no start", data.hex())
        # A zero-length start, and a start carrying only part of a basic header.
        self.send_acl(b"")
        await then_probe("zero-length start", "")
        data = header(len(read))[: rng.randint(1, 3)]
        self.send_acl(data)
        await then_probe("partial header then a new start", data.hex())
        # A well-formed request in 1-byte fragments: reassembled and answered.
        whole = header(len(read)) + read
        self.drain(self.att_inbox)
        self.send_acl(whole[:1])
        for byte in whole[1:]:
            self.send_acl(bytes([byte]), continuation=True)
        answer = await self.next_from(self.att_inbox, self.timeout)
        if answer is None and not self.link_lost.is_set():
            self.unexpected("1-byte fragments", whole, None, "a request reassembled from 1-byte ACL fragments is answered")
        # PDUs on unassigned fixed channels: silently dropped.
        for cid in [0x0007] + rng.sample([0x0000, 0x0001, 0x0002, 0x0003, 0x0008, 0x001F, 0x0020, 0x003E, 0x003F, 0x0040, 0x0041, 0x007F, 0xFFFF], 3):
            payload = rng.choice([read, rng.randbytes(rng.randint(0, 30)), bytes([PAIRING_REQ, 3, 0, 1, 16, 0, 0])])
            self.send_acl(header(len(payload), cid) + payload)
            await asyncio.sleep(QUIET)
            if not self.att_inbox.empty() or not self.smp_inbox.empty():
                self.note(f"a PDU to channel 0x{cid:04X} ({payload.hex()}) was answered")
                self.drain(self.att_inbox)
                self.drain(self.smp_inbox)
        await then_probe("unassigned channels", "")

    # MARK: Final checks

    async def final_checks(self):
        """Exchange MTU and a full primary service discovery, well-formed; both must be answered properly."""
        self.counting = False
        self.section = "final"
        result = {"mtuAnswered": False, "discoveryAnswered": False, "services": []}
        try:
            await self.ensure_link()
        except LinkLost as error:
            result["error"] = str(error)
            return result
        self.drain(self.att_inbox)
        pdu = bytes([MTU_REQ]) + struct.pack("<H", 247)
        answer = await self.att(pdu, count=False)
        if answer is not None and answer[0] == MTU_RSP and len(answer) == 3 and struct.unpack_from("<H", answer, 1)[0] >= 23:
            result["mtuAnswered"] = True
        else:
            result["error"] = f"Exchange MTU {pdu.hex()} got {answer.hex() if answer else 'no answer'}"
        services = []
        start = 0x0001
        while True:
            pdu = bytes([READ_BY_GROUP_REQ]) + struct.pack("<HHH", start, 0xFFFF, PRIMARY_SERVICE)
            answer = await self.att(pdu, count=False)
            if answer is None:
                result.setdefault("error", f"discovery request {pdu.hex()} got no answer")
                break
            if answer[0] == ERROR_RSP and len(answer) == 5 and answer[4] == 0x0A:
                result["discoveryAnswered"] = bool(services)
                if not services:
                    result.setdefault("error", "discovery found no primary service")
                break
            if answer[0] != READ_BY_GROUP_RSP or len(answer) < 2 or answer[1] not in (6, 20) or (len(answer) - 2) % answer[1]:
                result.setdefault("error", f"discovery request {pdu.hex()} got {answer.hex()}")
                break
            size = answer[1]
            end = start
            entries = [struct.unpack_from("<HH", answer, offset) + (answer[offset + 4: offset + size],) for offset in range(2, len(answer), size)]
            if any(handle < start or group_end < handle for handle, group_end, _ in entries):
                result.setdefault("error", f"discovery request {pdu.hex()} got services out of range: {answer.hex()}")
                break
            services += [uuid_string(uuid) for _, _, uuid in entries]
            end = entries[-1][1]
            if end == 0xFFFF:
                result["discoveryAnswered"] = True
                break
            start = end + 1
        result["services"] = services
        return result

    # MARK: Run

    async def run(self):
        sections = [("att", self.att_round), ("signaling", self.signaling_round), ("smp", self.smp_round), ("acl", self.acl_round)]
        self.section = "recon"
        await self.recon()
        for self.round in range(self.args.rounds):
            for name, section in sections:
                self.section = name
                began = time.monotonic()
                await section()
                self.detail["sectionSeconds"][name] = round(self.detail["sectionSeconds"].get(name, 0) + time.monotonic() - began, 2)
                self.section = f"{name} probe"
                await self.probe()
            log(f"round {self.round} done: sent {self.stats['sent']}, {self.stats['errorResponses']} error responses, "
                f"{len(self.detail['unexpected'])} unexpected, {self.stats['disconnectedUs']} disconnections")


def answers(request, answer):
    """Whether `answer` is the answer to the ATT `request` (its Error Response, or its response opcode)."""
    if not request:
        return False
    if answer[0] == ERROR_RSP:
        return len(answer) >= 2 and answer[1] == request[0]
    return answer[0] == request[0] + 1


def uuid_string(value):
    value = bytes(value)
    if len(value) == 2:
        return f"{struct.unpack('<H', value)[0]:04X}"
    if len(value) == 16:
        h = value[::-1].hex().upper()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return value.hex()


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse(argv):
    parser = Parser(prog="bumble_rogue.py", description="A rogue remote device sending malformed PDUs to a Beryl peripheral.")
    parser.add_argument("--transport", required=True, help="Bumble transport, e.g. tcp-client:127.0.0.1:PORT")
    parser.add_argument("--peer", required=True, help="the peripheral's address, AA:BB:CC:DD:EE:FF")
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each answer")
    parser.add_argument("--verbose", action="store_true", help="Bumble's own warnings on stderr")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}", args.peer):
        raise UsageError(f"--peer {args.peer!r} is not an address like AA:BB:CC:DD:EE:FF")
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    if not args.timeout > 0:
        raise UsageError("--timeout must be positive")
    return args


async def main(args):
    started = time.monotonic()
    rogue = Rogue(args)
    result = {}
    try:
        async with await open_transport(args.transport) as transport:
            await rogue.open(transport)
            rogue.section = "connect"
            await rogue.connect()  # no first connection: nothing to judge (exit 1 with the reason)
            try:
                await rogue.run()
            except LinkLost as error:
                rogue.detail["abuseStopped"] = str(error)
                log(str(error))
            final = await rogue.final_checks()
            await rogue.close()
    except Exception as error:  # no transport, no peer, no first connection (or a fault of the rogue's own: see stderr)
        final = {"mtuAnswered": False, "discoveryAnswered": False, "services": [], "error": f"{type(error).__name__}: {error}"}
        log(f"rogue failed: {error!r}")
        if not isinstance(error, (LinkLost, OSError, asyncio.TimeoutError)):
            traceback.print_exc(file=sys.stderr)
    still_serving = final["mtuAnswered"] and final["discoveryAnswered"]
    result.update(rogue.stats)
    result["stillServing"] = still_serving
    result["services"] = final["services"]
    result["seed"] = args.seed
    result["rounds"] = args.rounds
    result["mtu"] = rogue.mtu
    result["seconds"] = round(time.monotonic() - started, 2)
    result["sentDigest"] = rogue.digest.hexdigest()[:16]
    if "error" in final:
        result["error"] = final["error"]
    result["detail"] = rogue.detail
    print(json.dumps(result), flush=True)
    return 0 if still_serving else 1


if __name__ == "__main__":
    try:
        arguments = parse(sys.argv[1:])
    except UsageError as usage:
        print(f"usage error: {usage}", file=sys.stderr)
        print(json.dumps({"error": f"usage: {usage}", "stillServing": False}), flush=True)
        sys.exit(2)
    logging.basicConfig(level=logging.WARNING if arguments.verbose else logging.CRITICAL, stream=sys.stderr)
    sys.exit(asyncio.run(main(arguments)))
