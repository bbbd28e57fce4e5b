"""hcid brings up Bumble's software controllers (an independent controller implementation) over TCP."""
import json
import os
import subprocess
import sys
import tempfile
import time

from conftest import bin_dir, free_port_pair


def test_hcid_reaches_powered_on_against_bumble_controllers():
    base = free_port_pair()
    directory = tempfile.mkdtemp(prefix="beryl-bumble-ctrl-")
    controllers = subprocess.Popen(
        [sys.executable, "-m", "bumble.apps.controllers", f"tcp-server:127.0.0.1:{base}", f"tcp-server:127.0.0.1:{base + 1}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hcid = None
    try:
        time.sleep(1.5)
        log = open(os.path.join(directory, "hcid.log"), "w")
        hcid = subprocess.Popen(
            [os.path.join(bin_dir(), "hcid"), "--runtime-dir", os.path.join(directory, "run"), "--state-dir",
             os.path.join(directory, "state"), "--transport", f"tcp:127.0.0.1:{base}"],
            stdout=log, stderr=subprocess.STDOUT)
        status = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            run = subprocess.run([os.path.join(bin_dir(), "beryl"), "status", "--runtime-dir", os.path.join(directory, "run"), "--json"],
                                 capture_output=True, text=True)
            if run.stdout.strip():
                status = json.loads(run.stdout)
                if status.get("controller", {}).get("state") == "poweredOn":
                    break
            time.sleep(0.2)
        controller = status.get("controller", {})
        assert controller.get("state") == "poweredOn", (status, open(os.path.join(directory, "hcid.log")).read())
        assert controller["transport"] == f"tcp:127.0.0.1:{base}"
        assert controller["leAclMtu"] > 0 and controller["leAclBuffers"] > 0
        assert controller["profile"] == "none"
    finally:
        if hcid:
            hcid.terminate()
            hcid.wait(5)
        controllers.terminate()
        controllers.wait(5)
