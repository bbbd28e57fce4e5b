"""Interop: a Bumble central against a Beryl peripheral (hcid + attd + `beryl serve`) on berylsim and on Root Canal."""
import asyncio
import json
import re
import os
import subprocess
import time

import bumble_central
from beryl_stack import attached_to, events_in, stack_status

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_bumble_central_discovers_reads_writes_and_subscribes(air, capsys):
    binaries = air["bin"]
    run = os.path.join(air["dir"], "run")
    state = os.path.join(air["dir"], "state")
    processes = []
    logs = []

    def start(name, arguments):
        log = open(os.path.join(air["dir"], f"{name}.log"), "w")
        logs.append(log)
        processes.append(subprocess.Popen([os.path.join(binaries, arguments[0])] + arguments[1:], stdout=log, stderr=subprocess.STDOUT))

    try:
        start("hcid", ["hcid", "--runtime-dir", run, "--state-dir", state, "--transport", air.transport(0)])
        start("attd", ["attd", "--runtime-dir", run, "--state-dir", state])

        wait_for(lambda: stack_status(binaries, run).get("controller", {}).get("state") == "poweredOn", 10, "hcid poweredOn")
        wait_for(lambda: os.path.exists(os.path.join(run, "attd.sock")), 10, "attd")
        wait_for(lambda: "hcid" in attached_to(stack_status(binaries, run), "attd"), 10, "attd attached to hcid")
        start("managerd", ["managerd", "--runtime-dir", run, "--state-dir", state])
        wait_for(lambda: os.path.exists(os.path.join(run, "managerd.sock")), 10, "managerd")
        # beryl serve is an app of managerd: a PeripheralManager publishing the profile and answering its dynamic values.
        start("serve", ["beryl", "serve", os.path.join(ROOT, "Examples/profiles/heart-rate.json"), "--runtime-dir", run, "--json"])
        serve_log = os.path.join(air["dir"], "serve.log")
        served = lambda event: events_in(open(serve_log).read(), event)  # noqa: E731
        wait_for(lambda: served("advertising"), 10, "beryl serve advertising")

        assert asyncio.run(bumble_central.main(air.port(1))) == 0
        out = capsys.readouterr().out
        steps = {e["event"]: e for e in events_in(out)}
        for step in ["discovered", "connected", "read-name-and-cached-value", "writes-and-long-read-round-trip",
                     "reliable-write-applied", "notifications", "indication-confirmed", "disconnected"]:
            assert step in steps, out
        assert steps["discovered"]["name"] == "Beryl HR" and steps["connected"]["mtu"] == 185, out

        uuid = lambda attribute: re.fullmatch(r"[0-9A-F-]+", attribute) is not None  # noqa: E731
        # The long write reached the app as one batch of prepared writes, answered once.
        assert any(len(e["writes"]) >= 3 and uuid(e["writes"][0]["attribute"])
                   and [(w["attribute"], w["offset"], w["bytes"]) for w in e["writes"][:3]]
                   == [(e["writes"][0]["attribute"], 0, 180), (e["writes"][0]["attribute"], 180, 180), (e["writes"][0]["attribute"], 360, 40)]
                   for e in served("write-requested")), open(serve_log).read()
        # The long read came back in blobs from offsets; the app answered each from its offset on.
        assert any(uuid(e["attribute"]) and e["offset"] == 184 and e["bytes"] == 400 for e in served("read-requested")), open(serve_log).read()
        assert served("subscribed"), open(serve_log).read()
        if air.name == "berylsim":
            # berylsim counts what a host sent beyond the controller's buffers and command credits; Root Canal does not.
            controllers = json.loads(subprocess.check_output(
                [os.path.join(binaries, "beryl"), "sim", "list", "--dir", air["dir"], "--json"], text=True))["controllers"]
            assert all(c.get("aclOverflows", 0) == 0 and c.get("commandFlowViolations", 0) == 0 for c in controllers), controllers
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
