"""A Beryl stack (hcid + attd, optionally `beryl serve`) on one berylsim controller, for the interop tests.

Every process it starts logs to DIR/NAME.log and is stopped by pid in stop() (use it as a context manager).
"""
import json
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK_PROFILE = os.path.join(ROOT, "Examples/profiles/secure-lock.json")


def events_in(text, event=None):
    """The JSON objects among a log's lines (what --json writes), or only those whose "event" is `event`."""
    found = []
    for line in text.splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and (event is None or parsed.get("event") == event):
            found.append(parsed)
    return found


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stop_process(process, grace=5):
    """SIGTERM to a process this test started, SIGKILL if it has not gone within `grace` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)



def stack_status(bin_dir, run):
    """beryl status --json for the stack whose runtime directory is `run`; {} while nothing answers."""
    out = subprocess.run([os.path.join(bin_dir, "beryl"), "status", "--runtime-dir", run, "--json"],
                         capture_output=True, text=True, timeout=10).stdout
    return json.loads(out) if out.strip() else {}


def attached_to(status, daemon):
    """The daemons `daemon` is attached to in a stack_status answer; empty while it is not up."""
    return next((d.get("attachedTo", []) for d in status.get("daemons", []) if d["name"] == daemon), [])

class BerylStack:
    def __init__(self, env, controller=0, attd_args=(), transport=None, managerd_args=()):
        self.env = env
        self.dir = env["dir"]
        self.bin = env["bin"]
        self.run = os.path.join(self.dir, "run")
        self.state = os.path.join(self.dir, "state")
        self.controller = controller
        self.attd_args = list(attd_args)
        self.managerd_args = list(managerd_args)
        air = env.get("air") if hasattr(env, "get") else None
        self.transport = transport or (air.transport(controller) if air else f"unix:{self.dir}/controller-{controller}.sock")
        self.processes = []  # (name, Popen, log file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def log_path(self, name):
        return os.path.join(self.dir, f"{name}.log")

    def log(self, name):
        try:
            with open(self.log_path(name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_log(self, name, text, timeout=10):
        wait_for(lambda: text in self.log(name), timeout, f"{text!r} in {name}.log:\n{self.log(name)}")

    def events(self, name, event=None):
        """What a program started with --json reported, one object per line (other lines passed over), or only
        the events named `event`."""
        return events_in(self.log(name), event)

    def wait_event(self, name, event, match=lambda _: True, timeout=10):
        """Waits for an event named `event` that `match` accepts; returns the first."""
        wait_for(lambda: any(match(e) for e in self.events(name, event)), timeout, f"a {event!r} event in {name}.log:\n{self.log(name)}")
        return next(e for e in self.events(name, event) if match(e))

    def start_process(self, name, arguments):
        log = open(self.log_path(name), "w")
        process = subprocess.Popen([os.path.join(self.bin, arguments[0])] + arguments[1:], stdout=log, stderr=subprocess.STDOUT)
        self.processes.append((name, process, log))
        return process

    def status(self):
        return stack_status(self.bin, self.run)

    def attached(self, daemon):
        return attached_to(self.status(), daemon)

    def start(self):
        self.start_process("hcid", ["hcid", "--runtime-dir", self.run, "--state-dir", self.state,
                                    "--transport", self.transport])
        wait_for(lambda: self.status().get("controller", {}).get("state") == "poweredOn", 10, "hcid poweredOn")
        self.start_process("attd", ["attd", "--runtime-dir", self.run, "--state-dir", self.state] + self.attd_args)
        wait_for(lambda: os.path.exists(os.path.join(self.run, "attd.sock")), 10, "attd listening")
        wait_for(lambda: "hcid" in self.attached("attd"), 10, f"attd attached to hcid:\n{self.log('attd')}")
        self.start_process("managerd", ["managerd", "--runtime-dir", self.run, "--state-dir", self.state] + self.managerd_args)
        wait_for(lambda: os.path.exists(os.path.join(self.run, "managerd.sock")), 10, "managerd listening")
        return self

    @property
    def address(self):
        """The controller's address, as Beryl prints it (AA:BB:CC:DD:EE:FF, or with /random for hcid's static identity)."""
        return self.status()["controller"]["address"]

    def serve(self, profile=LOCK_PROFILE, *extra):
        """beryl serve --direct --json: these tests read what attd itself reports (link encryption, pairing) as events."""
        self.start_process("serve", ["beryl", "serve", "--direct", "--json", profile, "--runtime-dir", self.run] + list(extra))
        self.wait_event("serve", "advertising")

    def beryl(self, *arguments, timeout=60):
        return subprocess.run([os.path.join(self.bin, "beryl"), *arguments], capture_output=True, text=True, timeout=timeout)

    def bonds(self):
        listed = self.beryl("bonds", "list", "--runtime-dir", self.run, "--json")
        assert listed.returncode == 0, listed.stderr
        return json.loads(listed.stdout)["bonds"]

    def displayed_passkey(self, name="serve"):
        """The passkey `beryl serve` last displayed, or None."""
        shown = [e["number"] for e in self.events(name, "pairing") if e.get("kind") == "displayPasskey"]
        return shown[-1] if shown else None

    def kill(self, name):
        """SIGKILL to the process this stack started as `name`: a crash, not a shutdown."""
        for entry in self.processes:
            if entry[0] == name and entry[1].poll() is None:
                entry[1].kill()
                entry[1].wait(5)

    def stop_process(self, name):
        """Stops the process this stack started as `name`, by its pid."""
        for entry in list(self.processes):
            if entry[0] == name:
                stop_process(entry[1])
                entry[2].close()
                self.processes.remove(entry)

    def stop(self):
        for name, process, log in reversed(self.processes):
            stop_process(process)
            log.close()
        self.processes = []


class HostHeartRatePeripheral:
    """A Beryl stack on the host (the air's controller `transport`) running the heart-rate peripheral example, for a
    central elsewhere (a VM, a chroot) to find; stopped by pid."""

    def __init__(self, directory, bin_dir, transport):
        os.makedirs(directory, exist_ok=True)
        self.stack = BerylStack({"dir": directory, "bin": bin_dir}, transport=transport)
        try:
            self.stack.start()
            self.process = self.stack.start_process("heart-rate-peripheral", ["heart-rate-peripheral", "--runtime-dir", self.stack.run, "--json"])
            self.stack.wait_event("heart-rate-peripheral", "advertising", lambda e: e.get("error") is None, timeout=20)
        except BaseException:
            self.stack.stop()
            raise

    def log(self):
        return self.stack.log("heart-rate-peripheral")

    def events(self, event=None):
        return self.stack.events("heart-rate-peripheral", event)

    def stop(self):
        self.stack.stop()
