"""Interop: hosts Beryl did not write (Bumble) work over berylsim's controllers."""
import asyncio
import json
import os
import subprocess

import bumble_pair


def sim_state(env):
    out = subprocess.check_output([os.path.join(env["bin"], "beryl"), "sim", "list", "--dir", env["dir"], "--json"], text=True)
    return json.loads(out)


def test_two_bumble_hosts_advertise_scan_connect_gatt_and_disconnect(berylsim, capsys):
    assert asyncio.run(bumble_pair.main(berylsim["base"], berylsim["base"] + 1)) == 0
    out = capsys.readouterr().out
    for line in ["central discovered", "connected", "read 100 bytes", "write with response delivered",
                 "notification received", "disconnected"]:
        assert line in out, out
    state = sim_state(berylsim)
    controllers = state["controllers"]
    # Bumble honoured the controllers' command credits and ACL buffers: berylsim counted no violations.
    assert all(c.get("commandFlowViolations", 0) == 0 for c in controllers), controllers
    assert all(c.get("aclOverflows", 0) == 0 for c in controllers), controllers
    assert not state.get("links"), "the link is gone after the disconnection"
