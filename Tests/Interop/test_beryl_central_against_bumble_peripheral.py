"""Interop: Beryl as central (hcid + attd + `beryl gatt`) against a Bumble GATT server on berylsim and on Root Canal."""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def test_beryl_central_discovers_reads_writes_and_subscribes(air):
    binaries = air["bin"]
    run = os.path.join(air["dir"], "run")
    state = os.path.join(air["dir"], "state")
    writes = os.path.join(air["dir"], "writes.txt")
    processes = []
    try:
        peripheral = subprocess.Popen([sys.executable, os.path.join(HERE, "bumble_peripheral.py"), str(air.port(1)), writes],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        processes.append(peripheral)
        ready = peripheral.stdout.readline()
        said = json.loads(ready) if ready.startswith("{") else {}
        assert said.get("event") == "ready", ready
        address = said["address"].split("/")[0] + "/random"
        for name in ["hcid", "attd", "managerd"]:
            arguments = [os.path.join(binaries, name), "--runtime-dir", run, "--state-dir", state]
            if name == "hcid":
                arguments += ["--transport", air.transport(0)]
            processes.append(subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while not all(os.path.exists(os.path.join(run, f"{name}.sock")) for name in ["hcid", "attd", "managerd"]):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.5)

        def gatt(*arguments):
            result = subprocess.run([os.path.join(binaries, "beryl"), "gatt", "--runtime-dir", run, "--peer", address, *arguments, "--json"],
                                    capture_output=True, text=True, timeout=30)
            assert result.returncode == 0, result.stderr
            return [json.loads(line) for line in result.stdout.splitlines()]

        services = [e for e in gatt("discover") if e["event"] == "service"]
        uuids = [s["uuid"] for s in services]
        assert "180F" in uuids and "180D" in uuids and "A0B40001-9260-4A9E-8E8A-1F8C2B6A0001" in uuids, uuids
        heart = next(s for s in services if s["uuid"] == "180D")
        assert heart["characteristics"][0]["uuid"] == "2A37"
        assert any(d["uuid"] == "2902" for d in heart["characteristics"][0]["descriptors"]), heart

        assert gatt("read", "2A19")[-1] == {"event": "read", "uuid": "2A19", "value": "4d"}
        assert gatt("read", "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001")[-1]["value"] == b"hello".hex()
        gatt("write", "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001", "0102030405")
        assert open(writes).read().split() == ["0102030405"]
        assert gatt("read", "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001")[-1]["value"] == "0102030405"
        # Reliable write: prepared, echoed and checked, executed; Bumble's server applies the queue as one write.
        written = gatt("write", "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001", "a1a2a3a4", "--reliable")[-1]
        assert written == {"event": "written", "uuid": "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001", "bytes": 4, "withResponse": True, "reliable": True}, written
        assert gatt("read", "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001")[-1]["value"] == "a1a2a3a4"
        assert open(writes).read().split()[-1] == "a1a2a3a4"

        # Descriptors: Bumble's User Description (Core Vol 3 Part G §3.3.3.2) and a custom one, read and written.
        custom = "A0B40002-9260-4A9E-8E8A-1F8C2B6A0001"
        described = "A0B40003-9260-4A9E-8E8A-1F8C2B6A0001"
        assert gatt("read-descriptor", custom, "2901")[-1]["value"] == b"Bumble custom".hex()
        assert gatt("read-descriptor", custom, described)[-1]["value"] == "0102"
        written = gatt("write-descriptor", custom, described, "c0ffee")[-1]
        assert written == {"event": "written", "uuid": custom, "descriptor": described, "bytes": 3}, written
        assert open(writes).read().splitlines()[-1] == "descriptor c0ffee"
        assert gatt("read-descriptor", custom, described)[-1]["value"] == "c0ffee"
        # The same through hcid and attd alone (`--direct`), which read the descriptor from attd's discovered database.
        direct = subprocess.run([os.path.join(binaries, "beryl"), "gatt", "--direct", "--runtime-dir", run, "--peer", address,
                                 "read-descriptor", custom, described, "--json"], capture_output=True, text=True, timeout=30)
        assert direct.returncode == 0, direct.stderr
        assert json.loads(direct.stdout.splitlines()[-1])["value"] == "c0ffee", direct.stdout
        missing = subprocess.run([os.path.join(binaries, "beryl"), "gatt", "--runtime-dir", run, "--peer", address,
                                  "read-descriptor", custom, "2904", "--json"], capture_output=True, text=True, timeout=30)
        failed = [e for e in map(json.loads, missing.stdout.splitlines()) if e["event"] == "failed"]
        assert missing.returncode != 0, missing.stdout
        assert [(e["missing"], e["uuid"]) for e in failed] == [("descriptor", "2904")], missing.stdout + missing.stderr

        beats = [e for e in gatt("subscribe", "2A37", "--count", "3") if e["event"] == "notification"]
        assert len(beats) == 3
        values = [int(b["value"][2:], 16) for b in beats]
        assert all((b - a) % 256 == 1 for a, b in zip(values, values[1:])), values
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
