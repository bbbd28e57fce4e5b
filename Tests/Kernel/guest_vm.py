"""Debian's kernel under qemu (TCG) with Beryl in its initramfs: the kernel's Bluetooth core and HCI user channel,
driving a controller on the host through hci_vhci and a virtio-serial port.

The kernel package is downloaded once (`apt-get download`, not installed) into $BERYL_CACHE_DIR/kernel/ (default /var/cache/beryl), and only the image and
the modules the guest loads are kept. Everything else is built per run in the caller's directory.
"""
import os
import re
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUEST = os.path.join(ROOT, "Tests", "Kernel", "guest")
# Machine-wide, outside any clone, so a fresh clone on this machine reuses what an earlier run fetched (ci/setup
# names the same default); a new machine fills it on first use.
CACHE = os.path.join(os.environ.get("BERYL_CACHE_DIR", "/var/cache/beryl"), "kernel")
# The modules the guest loads, with what they need loaded before them.
WANTED_MODULES = ["virtio_pci", "virtio_console", "bluetooth", "hci_vhci"]
MARK = "BERYL-KERNEL "


def kernel_package():
    """The versioned image package linux-image-amd64 names (the flavour with Bluetooth, not -cloud)."""
    out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Depends: (linux-image-[0-9][^\s]*-amd64)", out)
    if not match:
        raise RuntimeError(f"apt-cache names no kernel image for linux-image-amd64:\n{out}")
    return match.group(1)


def _module_index(tree):
    index = {}
    for directory, _, files in os.walk(tree):
        for name in files:
            if name.endswith(".ko"):
                index[name[:-3].replace("-", "_")] = os.path.join(directory, name)
    return index


def _depends(path):
    data = open(path, "rb").read()
    match = re.search(rb"\x00depends=([^\x00]*)\x00", data)
    return [name.replace("-", "_") for name in match.group(1).decode().split(",") if name] if match else []


def module_load_order(index, wanted):
    """The modules in an order insmod accepts: each after those its .modinfo `depends=` names."""
    order = []

    def visit(name, trail=()):
        if name in order:
            return
        if name in trail:
            raise RuntimeError(f"module dependency cycle through {name}")
        if name not in index:
            raise RuntimeError(f"the kernel package has no module {name}")
        for dependency in _depends(index[name]):
            visit(dependency, trail + (name,))
        order.append(name)

    for name in wanted:
        visit(name)
    return order


def fetch_kernel():
    """Returns (kernel image, {module: path}, load order, version), downloading the package on first use."""
    package = kernel_package()
    home = os.path.join(CACHE, package)
    ready = os.path.join(home, "ready")
    if not os.path.exists(ready):
        shutil.rmtree(home, ignore_errors=True)
        work = home + ".download"
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        subprocess.run(["apt-get", "download", package], cwd=work, check=True, capture_output=True)
        deb = next(name for name in os.listdir(work) if name.endswith(".deb"))
        subprocess.run(["dpkg-deb", "-x", deb, "root"], cwd=work, check=True)
        boot = os.path.join(work, "root", "boot")
        image = next(name for name in os.listdir(boot) if name.startswith("vmlinuz-"))
        modules_root = os.path.join(work, "root", "lib", "modules")
        version = os.listdir(modules_root)[0]
        index = _module_index(os.path.join(modules_root, version, "kernel"))
        order = module_load_order(index, WANTED_MODULES)
        os.makedirs(os.path.join(home, "modules"))
        shutil.copy(os.path.join(boot, image), os.path.join(home, "vmlinuz"))
        for name in order:
            shutil.copy(index[name], os.path.join(home, "modules", name + ".ko"))
        with open(os.path.join(home, "modules", "order"), "w") as f:
            f.write("\n".join(order) + "\n")
        with open(os.path.join(home, "version"), "w") as f:
            f.write(version + "\n")
        shutil.rmtree(work)
        open(ready, "w").close()
    order = open(os.path.join(home, "modules", "order")).read().split()
    version = open(os.path.join(home, "version")).read().strip()
    return os.path.join(home, "vmlinuz"), os.path.join(home, "modules"), order, version


def _shared_libraries(binary):
    """The absolute paths of the shared objects `binary` loads, as the host's loader resolves them."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = set()
    for line in out.splitlines():
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            paths.add(match.group(1))
    return paths


def _copy_preserving(path, root):
    target = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.exists(target):
        shutil.copy2(os.path.realpath(path), target)


def build_bridge(out_dir):
    """The guest's vhci bridge, linked statically so it needs nothing from the initramfs."""
    bridge = os.path.join(out_dir, "vhci_bridge")
    subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Werror", "-o", bridge, os.path.join(GUEST, "vhci_bridge.c")],
                   check=True, capture_output=True)
    return bridge


def _base_root(out_dir, modules_dir, init):
    """busybox with its applets, the modules, the bridge, an /etc a launcher can read, and the init script."""
    root = os.path.join(out_dir, "initramfs")
    shutil.rmtree(root, ignore_errors=True)
    for directory in ["bin", "usr/bin", "etc", "proc", "sys", "dev", "tmp", "run", "var/lib", "lib/beryl-modules"]:
        os.makedirs(os.path.join(root, directory), exist_ok=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy(busybox, os.path.join(root, "bin", "busybox"))
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            os.symlink("busybox", os.path.join(root, "bin", applet))
    shutil.copy2(build_bridge(out_dir), os.path.join(root, "usr", "bin", "vhci_bridge"))
    for name in os.listdir(modules_dir):
        shutil.copy(os.path.join(modules_dir, name), os.path.join(root, "lib", "beryl-modules", name))
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\n")
    shutil.copy(init or os.path.join(GUEST, "init"), os.path.join(root, "init"))
    os.chmod(os.path.join(root, "init"), 0o755)
    return root


def _pack(out_dir, root):
    archive = os.path.join(out_dir, "initramfs.cpio")
    files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
    with open(archive, "wb") as f:
        subprocess.run(["cpio", "--quiet", "-o", "-H", "newc"], cwd=root, input=files, stdout=f, check=True)
    return archive, os.path.getsize(archive)


def build_initramfs(out_dir, bin_dir, programs, modules_dir, init=None):
    """A newc cpio: busybox, `programs` from `bin_dir` under /usr/bin with every library they load at its host path,
    the modules under /lib/beryl-modules and the init script. Returns (path, size in bytes)."""
    root = _base_root(out_dir, modules_dir, init)
    libraries = set()
    for program in programs:
        source = os.path.join(bin_dir, program)
        shutil.copy2(source, os.path.join(root, "usr", "bin", program))
        libraries |= _shared_libraries(source)
    for library in sorted(libraries):
        _copy_preserving(library, root)
    return _pack(out_dir, root)


def install_package(root, deb):
    """dpkg -i into `root` as into a board's root file system (maintainer scripts run chrooted in it). The root has no
    package database of its own, so Depends cannot be checked there: --force-depends, and the caller provides the
    libraries those packages would (see package_libraries)."""
    admin = os.path.join(root, "var", "lib", "dpkg")
    for directory in ["info", "updates", "triggers", "alternatives"]:
        os.makedirs(os.path.join(admin, directory), exist_ok=True)
    for name in ["status", "available"]:
        open(os.path.join(admin, name), "a").close()
    for directory in ["usr/sbin", "sbin"]:
        os.makedirs(os.path.join(root, directory), exist_ok=True)
    return subprocess.run(["dpkg", "--root", root, "--force-depends", "--force-not-root", "--log", "/dev/null", "-i", deb],
                          capture_output=True, text=True, env={**os.environ, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})


def installed_programs(root):
    directory = os.path.join(root, "usr", "libexec", "beryl")
    return sorted(os.path.join(directory, name) for name in os.listdir(directory))


def package_libraries(root):
    """The libraries the installed programs load from outside the package, resolved as on the host with the package's
    bundled Swift runtime: {host path: owning Debian package}."""
    bundled = os.path.join(root, "usr", "lib", "beryl", "swift")
    wanted = {}
    for program in installed_programs(root) + [os.path.join(bundled, name) for name in os.listdir(bundled)]:
        out = subprocess.run(["ldd", program], capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": bundled}).stdout
        for line in out.splitlines():
            if "not found" in line:
                raise RuntimeError(f"{program}: {line.strip()}")
            match = re.search(r"(/\S+) \(0x", line)
            if match and not match.group(1).startswith(root) and not match.group(1).startswith(bundled):
                wanted[match.group(1)] = None
    for library in wanted:
        real = os.path.realpath(library)
        owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True).stdout or \
            subprocess.run(["dpkg", "-S", library], capture_output=True, text=True).stdout
        wanted[library] = owner.split(":")[0] if owner else None
    return wanted


def build_package_initramfs(out_dir, deb, modules_dir, init=None):
    """The initramfs with Beryl installed from its .deb and the libraries of the packages it depends on.
    Returns (path, size, dpkg's result, {library: owner})."""
    root = _base_root(out_dir, modules_dir, init)
    installed = install_package(root, deb)
    if installed.returncode != 0:
        return None, 0, installed, {}
    libraries = package_libraries(root)
    for library in libraries:
        _copy_preserving(library, root)
    archive, size = _pack(out_dir, root)
    return archive, size, installed, libraries


class GuestRun:
    """One boot: qemu's console goes to a file; `lines` are the guest's BERYL-KERNEL lines."""

    def __init__(self, out_dir, kernel, initramfs, controller_socket, memory_mb=2048, cpus=2):
        self.console = os.path.join(out_dir, "console.log")
        self.arguments = [
            "qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-m", str(memory_mb), "-smp", str(cpus),
            "-display", "none", "-monitor", "none", "-serial", f"file:{self.console}", "-no-reboot", "-nic", "none",
            "-kernel", kernel, "-initrd", initramfs, "-append", "console=ttyS0 quiet panic=-1",
            # virtio-serial to the host controller's H4 stream; qemu connects as a client.
            "-chardev", f"socket,id=hci,path={controller_socket}",
            "-device", "virtio-serial-pci", "-device", "virtserialport,chardev=hci,name=beryl.hci",
        ]
        self.process = None

    def start(self):
        self.started = time.monotonic()
        self.stderr = open(self.console + ".qemu-stderr", "w")
        self.process = subprocess.Popen(self.arguments, stdout=subprocess.DEVNULL, stderr=self.stderr)
        return self

    def text(self):
        try:
            with open(self.console, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    @property
    def lines(self):
        return [line.strip()[len(MARK):] for line in self.text().splitlines() if line.strip().startswith(MARK)]

    def wait(self, timeout):
        """Until the guest says done and powers off, or `timeout` seconds; then qemu is stopped by its pid."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.2)
        finished = self.process.poll() is not None
        self.stop()
        self.wall = time.monotonic() - self.started
        return finished and "done" in self.lines

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process:
            self.stderr.close()
