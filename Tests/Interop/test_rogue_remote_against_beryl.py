"""Fault injection: a rogue remote device (bumble_rogue.py) sends malformed ATT, LE signalling, SMP and raw ACL to a
Beryl peripheral (hcid + attd + managerd + `beryl serve heart-rate.json`) on berylsim; the stack must keep serving.

Beryl runs on berylsim controller 0 (unix socket); the rogue, then a well-behaved Bumble central, drive controller 1 over TCP.
"""
import asyncio
import json
import os
import subprocess
import sys

import bumble_central
from beryl_stack import BerylStack, events_in

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEART_RATE = os.path.join(ROOT, "Examples/profiles/heart-rate.json")
ROGUE = os.path.join(HERE, "bumble_rogue.py")
SEEDS = (1, 2)
SERVICES = {"1800", "1801", "180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"}


def daemon_pids(stack):
    daemons = stack.status().get("daemons", [])
    assert all(d.get("state") == "running" for d in daemons), daemons
    return {d["name"]: d["pid"] for d in daemons}


def logs(stack):
    return "\n".join(f"--- {name}.log (tail)\n" + "\n".join(line[:300] for line in stack.log(name).splitlines()[-40:])
                     for name in ("hcid", "attd", "managerd", "serve"))


def run_rogue(port, peer, seed):
    completed = subprocess.run([sys.executable, ROGUE, "--transport", f"tcp-client:127.0.0.1:{port}", "--peer", peer, "--seed", str(seed)],
                               capture_output=True, text=True, timeout=300)
    lines = completed.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    return completed, result


def test_rogue_remote_device_cannot_take_beryl_down(berylsim, capsys):
    with BerylStack(berylsim) as stack:
        stack.start()
        serve = stack.start_process("serve", ["beryl", "serve", HEART_RATE, "--runtime-dir", stack.run, "--json"])
        stack.wait_event("serve", "advertising")
        peer = stack.address
        pids = daemon_pids(stack)
        assert set(pids) == {"hcid", "attd", "managerd"}, pids

        unexpected, summaries = [], []
        for seed in SEEDS:
            completed, result = run_rogue(berylsim["base"] + 1, peer, seed)
            context = f"seed {seed}: exit {completed.returncode}\n{completed.stdout[-6000:]}\n--- rogue stderr (tail)\n{completed.stderr[-3000:]}\n{logs(stack)}"
            summaries.append(f"seed {seed}: " + json.dumps({k: v for k, v in result.items() if k != "detail"}))
            assert completed.returncode == 0, context
            assert result["stillServing"] is True and result["seed"] == seed, context
            assert result["sent"] > 500 and result["invalidHandleErrors"] > 0, context
            assert SERVICES <= set(result["services"]), context
            assert result["detail"]["probeFailures"] == [], context
            # Answers that break a rule the Core spec states, each with the bytes sent and received and the rule: judged
            # last, so a finding there does not hide whether the stack survived.
            unexpected += [dict(entry, seed=seed) for entry in result["detail"]["unexpected"]]
            # The same daemons, never restarted; the app still publishing.
            assert daemon_pids(stack) == pids, context
            assert serve.poll() is None, context

        # A well-behaved central still gets the full service: discovery, reads, writes, notifications, indications.
        capsys.readouterr()
        assert asyncio.run(bumble_central.main(berylsim["base"] + 1)) == 0
        out = capsys.readouterr().out
        steps = {e["event"]: e for e in events_in(out)}
        for step in ["discovered", "read-name-and-cached-value", "writes-and-long-read-round-trip", "indication-confirmed"]:
            assert step in steps, out + logs(stack)
        assert steps["discovered"]["name"] == "Beryl HR", out + logs(stack)
        assert daemon_pids(stack) == pids, logs(stack)

        # Flow control held on both sides through the abuse.
        controllers = json.loads(subprocess.check_output(
            [os.path.join(berylsim["bin"], "beryl"), "sim", "list", "--dir", berylsim["dir"], "--json"], text=True))["controllers"]
        assert all(c.get("aclOverflows", 0) == 0 and c.get("commandFlowViolations", 0) == 0 for c in controllers), controllers

        assert unexpected == [], "\n".join(summaries + ["the peer broke Core spec rules:"] + [json.dumps(entry) for entry in unexpected])
