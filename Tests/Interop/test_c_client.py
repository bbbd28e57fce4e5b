"""libberyl, the C client, on two Beryl stacks over berylsim: the C heart-rate central against the Swift heart-rate
peripheral and the Swift central against the C peripheral (discovery, read, notifications, write), each plainly,
under Valgrind's memcheck and built with ASan/UBSan; and the C central killed with kill -9 and relaunched by managerd
with its restore identifier, hearing will_restore_state first.

The C build comes from BERYL_C_BUILD_DIR and BERYL_C_ASAN_BUILD_DIR (ci/test builds both); without them the module
builds its own with CMake into temporary directories.
"""
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile

import pytest

from beryl_stack import ROOT, BerylStack, events_in, stop_process, wait_for

APP_ID = "com.example.heartrate-central-c"
RESTORE_ID = "hr-central"
CHEST = 1  # Body Sensor Location (Heart Rate Service §3.2)
VALGRIND = ["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite", "--error-exitcode=99",
            "--track-fds=no", "-q"]


def build(directory_variable, sanitize):
    given = os.environ.get(directory_variable)
    if given:
        assert os.path.exists(os.path.join(given, "heart-rate-central-c")), f"{directory_variable}={given} has no C examples"
        return given, None
    directory = tempfile.mkdtemp(prefix="beryl-c-build-")
    os.chmod(directory, 0o755)  # the relaunched app runs as the manifest's user
    flags = ["-DBERYL_SANITIZE=ON"] if sanitize else []
    subprocess.run(["cmake", "-S", os.path.join(ROOT, "clients/c"), "-B", directory, "-DCMAKE_BUILD_TYPE=Debug"] + flags,
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", directory, "-j2"], check=True, capture_output=True)
    return directory, directory


@pytest.fixture(scope="module")
def c_builds():
    plain, plain_owned = build("BERYL_C_BUILD_DIR", False)
    asan, asan_owned = build("BERYL_C_ASAN_BUILD_DIR", True)
    yield {"plain": plain, "asan": asan}
    for owned in (plain_owned, asan_owned):
        if owned:
            shutil.rmtree(owned, ignore_errors=True)


def two_stacks(air, a_managerd_args=()):
    stacks = []
    for index in range(2):
        directory = os.path.join(air["dir"], "ab"[index])
        os.makedirs(directory, exist_ok=True)
        env = {"dir": directory, "bin": air["bin"], "air": air}
        stacks.append(BerylStack(env, controller=index, transport=air.transport(index),
                                 managerd_args=a_managerd_args if index == 0 else ()))
    return stacks


def command(c_builds, runner, program, *arguments):
    """argv for a C example under `runner`: plain, under memcheck, or the ASan build."""
    if runner == "asan":
        return [os.path.join(c_builds["asan"], program), *arguments]
    binary = os.path.join(c_builds["plain"], program)
    return (VALGRIND if runner == "valgrind" else []) + [binary, *arguments]


def run_env():
    env = dict(os.environ)
    # Leaks are errors; a report ends the process with a failure status.
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=98"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env.pop("BERYL_APP_ID", None)
    return env


def beats(text):
    return [int(n) for n in re.findall(r"^heart rate (\d+) bpm$", text, re.MULTILINE)]


def terminate(process, grace):
    """SIGTERM (the C examples free everything and exit 0 on it), then SIGKILL after `grace` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def assert_clean(runner, output):
    if runner == "valgrind":
        assert "definitely lost" not in output or "definitely lost: 0 bytes" in output, output
        assert "Invalid read" not in output and "Invalid write" not in output, output
    if runner == "asan":
        assert "ERROR: AddressSanitizer" not in output and "runtime error" not in output, output


@pytest.mark.parametrize("runner", ["plain", "valgrind", "asan"])
def test_c_central_against_the_swift_heart_rate_peripheral(berylsim, c_builds, runner):
    a, b = two_stacks(berylsim)
    with a, b:
        a.start()
        b.start()
        b.start_process("heart-rate-peripheral", ["heart-rate-peripheral", "--runtime-dir", b.run, "--json"])
        b.wait_event("heart-rate-peripheral", "advertising", lambda e: e["error"] is None, timeout=20)
        done = subprocess.run(command(c_builds, runner, "heart-rate-central-c", "--runtime-dir", a.run, "--count", "3"),
                              capture_output=True, text=True, timeout=120, env=run_env())
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert_clean(runner, output)
        lines = done.stdout.splitlines()
        assert lines[0] == "state poweredOn", output
        assert "discovered Beryl HR (RSSI" in done.stdout, output
        assert "connected" in lines and "discovered 3 characteristics" in lines, output
        assert "sensor location chest" in lines, output
        measured = beats(done.stdout)
        assert len(measured) == 3 and all(60 <= n <= 100 for n in measured), output
        assert lines.index("reset energy expended") + 1 == lines.index("done"), output
        # What the Swift peripheral saw: a subscription and the control point's 0x01.
        b.wait_event("heart-rate-peripheral", "controlPointWritten", lambda e: e["value"] == [1] and e["accepted"])
        assert len(b.events("heart-rate-peripheral", "subscribed")) == 1, b.log("heart-rate-peripheral")


@pytest.mark.parametrize("runner", ["plain", "valgrind", "asan"])
def test_swift_central_against_the_c_heart_rate_peripheral(berylsim, c_builds, runner):
    a, b = two_stacks(berylsim)
    with a, b:
        a.start()
        b.start()
        log = open(os.path.join(b.dir, "c-peripheral.log"), "w")
        peripheral = subprocess.Popen(command(c_builds, runner, "heart-rate-peripheral-c", "--runtime-dir", b.run),
                                      stdout=log, stderr=subprocess.STDOUT, env=run_env())
        read_log = lambda: open(log.name, errors="replace").read()  # noqa: E731
        try:
            wait_for(lambda: "advertising as Beryl HR" in read_log() or peripheral.poll() is not None, 60, "the C peripheral advertising")
            assert "advertising as Beryl HR" in read_log(), read_log()
            done = subprocess.run([os.path.join(a.bin, "heart-rate-central"), "--runtime-dir", a.run, "--count", "3", "--json"],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr + read_log()
            assert any(e["code"] == CHEST for e in events_in(done.stdout, "sensorLocation")), done.stdout
            measured = [e["bpm"] for e in events_in(done.stdout, "heartRate")]
            assert len(measured) == 3 and measured == sorted(measured), done.stdout
            assert events_in(done.stdout, "energyExpendedReset"), done.stdout
            wait_for(lambda: "control point write [1] accepted" in read_log(), 10, "the C peripheral's answer to the write")
            assert "central subscribed to heart rate measurement" in read_log(), read_log()
        finally:
            terminate(peripheral, 60)
            log.close()
        output = read_log()
        assert peripheral.returncode == 0, output
        assert_clean(runner, output)


def app_user():
    """Apps never run as root (managerd refuses such a manifest): as root, nobody; otherwise the current user."""
    return "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


@pytest.mark.parametrize("runner", ["plain", "asan"])
def test_c_central_is_relaunched_after_kill_9_and_restored(berylsim, c_builds, runner):
    apps = os.path.join(berylsim["dir"], "apps")
    os.makedirs(apps)
    central = os.path.join(c_builds[runner], "heart-rate-central-c")
    a, b = two_stacks(berylsim, a_managerd_args=["--apps-dir", apps])
    manifest = {"id": APP_ID, "user": app_user(), "backgroundModes": ["bluetooth-central"],
                "launch": {"command": [central, "--runtime-dir", a.run, "--forever", "--restore-id", RESTORE_ID]}}
    with open(os.path.join(apps, "heartrate-central-c.json"), "w") as f:
        json.dump(manifest, f)
    os.chmod(os.path.join(apps, "heartrate-central-c.json"), 0o644)
    app_log = os.path.join(a.run, "logs", f"app-{APP_ID}.log")
    read_app_log = lambda: open(app_log, errors="replace").read() if os.path.exists(app_log) else ""  # noqa: E731

    def app():
        listed = a.beryl("app", "list", "--runtime-dir", a.run, "--json", timeout=10)
        assert listed.returncode == 0, listed.stderr
        return next(entry for entry in json.loads(listed.stdout)["apps"] if entry["id"] == APP_ID)

    with a, b:
        a.start()
        b.start()
        # The app's user reaches managerd's socket (and appends to its log) through these.
        os.makedirs(os.path.join(a.run, "logs"), exist_ok=True)
        for directory in (berylsim["dir"], a.dir, a.run, os.path.join(a.run, "logs")):
            os.chmod(directory, 0o755)
        b.start_process("heart-rate-peripheral", ["heart-rate-peripheral", "--runtime-dir", b.run, "--json"])
        b.wait_event("heart-rate-peripheral", "advertising", lambda e: e["error"] is None, timeout=20)
        launched = a.beryl("app", "launch", APP_ID, "--runtime-dir", a.run, timeout=20)
        assert launched.returncode == 0, launched.stderr
        wait_for(lambda: len(beats(read_app_log())) >= 2, 30, f"measurements in the C central's log:\n{read_app_log()}")
        pids = app()["pids"]
        assert len(pids) == 1, app()
        os.kill(pids[0], signal.SIGKILL)
        # managerd keeps the link and the subscription; the next measurement relaunches the app.
        wait_for(lambda: "relaunched by the stack to restore " + RESTORE_ID in read_app_log(), 30,
                 f"a relaunch:\n{read_app_log()}\n{a.log('managerd')[-3000:]}")
        relaunch = read_app_log().split("relaunched by the stack to restore " + RESTORE_ID, 1)[1]
        wait_for(lambda: len(beats(read_app_log().split("relaunched by the stack to restore " + RESTORE_ID, 1)[1])) >= 2,
                 30, f"measurements after the relaunch:\n{read_app_log()}")
        relaunch = read_app_log().split("relaunched by the stack to restore " + RESTORE_ID, 1)[1]
        lines = [line for line in relaunch.splitlines() if line.strip()]
        assert lines[0] == "will restore 1 peripherals", relaunch
        assert lines[1] == "state poweredOn", relaunch
        assert re.match(r"heart rate \d+ bpm", lines[2]), relaunch
        # Restored, not rediscovered: no scan, no connect, no discovery after the relaunch.
        assert "discovered" not in relaunch and "connected" not in relaunch.replace("disconnected", ""), relaunch
        # One relaunch, restored at once; every background wake ended by the library's AppIdle, none overran.
        record = app()
        assert record["restorations"] == 1, record
        assert record["relaunches"]["endedUnrestored"] == 0 and record["wakes"]["overran"] == 0, record
        assert record["wakes"]["begun"] >= 1 and record["wakes"]["endedIdle"] >= 1, record
        quit = a.beryl("app", "quit", APP_ID, "--runtime-dir", a.run, timeout=20)
        assert quit.returncode == 0, quit.stderr
        wait_for(lambda: app()["pids"] == [], 15, "the C central to end")
        # SIGTERM ended it cleanly: under ASan, its exit checked for leaks and errors (into its log).
        assert_clean(runner, read_app_log())


@pytest.mark.parametrize("size", [20, 244])
def test_c_peripheral_flood_arrives_once_and_in_order(berylsim, c_builds, size):
    """update_value pipelined through the real stack: 3,000 values, each numbered, given as fast as the C library takes
    them (it says 0, then is_ready_to_update_subscribers, whenever its 16 are on their way or held back by attd after a
    refusal). The Swift central (`beryl gatt subscribe`) hears every one, once and in order."""
    count = 3000
    a, b = two_stacks(berylsim)
    with a, b:
        a.start()
        b.start()
        log = open(os.path.join(b.dir, "flood.log"), "w")
        flooder = subprocess.Popen(command(c_builds, "plain", "beryl-flood-peripheral-c", "--runtime-dir", b.run, "--count", str(count),
                                           "--size", str(size)), stdout=log, stderr=subprocess.STDOUT, env=run_env())
        read_log = lambda: open(log.name, errors="replace").read()  # noqa: E731
        try:
            wait_for(lambda: "advertising as Beryl flood" in read_log() or flooder.poll() is not None, 60, "the flooder advertising")
            assert "advertising as Beryl flood" in read_log(), read_log()
            done = a.beryl("gatt", "--runtime-dir", a.run, "--peer", b.address, "subscribe", "B0000002-0000-1000-8000-00805F9B34FB",
                           "--count", str(count), "--timeout", "120", "--json", timeout=150)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr + read_log()
            values = [bytes.fromhex(json.loads(line)["value"]) for line in done.stdout.splitlines()
                      if json.loads(line).get("event") == "notification"]
            # ATT_MTU bounds a notification's value: a 244-byte value arrives whole only if the bearer carries it.
            assert all(len(value) == size for value in values), {len(value) for value in values}
            sequence = [int.from_bytes(value[:4], "little") for value in values]
            first_gap = next((i for i, n in enumerate(sequence) if n != i), len(sequence))
            assert sequence == list(range(count)), f"{len(sequence)} values, in order up to {first_gap}"
            wait_for(lambda: f"flooded {count} values" in read_log(), 10, "the flooder's tally")
        finally:
            terminate(flooder, 30)
            log.close()
        assert flooder.returncode == 0, read_log()
