"""Separate hosts on one Linux machine: a network namespace per host, a bridge between them, a
directory per host that only that host sees, and a teardown that always runs.

    with Cluster(2, log_dir) as cluster:                 # hostA, hostB: 10.251.7.1, 10.251.7.2
        procs = [cluster.spawn(h, ["python", "-c", "..."]) for h in cluster.hosts]
        results = cluster.wait(procs, timeout_s=60)      # exit code, seconds and log of each

Layout (root only; `unavailable()` says why a machine cannot run it):

- a switch namespace holding a bridge, and per host a namespace joined to it by
  a veth pair (`eth0` in the host, `p<i>` on the bridge). The addresses,
  10.251.7.0/24, exist only inside these namespaces: the root namespace gets no
  interface, no address and no route, so nothing can leave the machine, and two
  clusters (two test runs at once) never see each other.
- every command runs as `ip netns exec HOST unshare --mount --uts`: its own
  hostname (hostA ...), an /etc/hosts naming the hosts (and no name server),
  its own directory bind-mounted at `local` (the same path on every host, as
  /local on real machines; the command starts there), and the other hosts'
  directories hidden under an empty tmpfs. A host's directory may be a small
  tmpfs of its own (a disk that fills up). Anything else under the cluster's
  directory (`root / "shared"`) every host sees: a shared file system.
- faults: `shape` (delay, loss, rate: link_relay.py, as netem would) on both
  directions of one host's link, `cut` (the bridge port down), `signal`
  (every process of a host: SIGKILL, SIGSTOP).

Teardown (`Cluster.close`, run by `with`, atexit and SIGTERM/SIGHUP; Ctrl-C
unwinds through `with`) kills every process inside the namespaces, deletes them (their veths and the
bridge go with them), unmounts the disks and removes the cluster's directory.
Names carry the creating process's pid; `cleanup_stale` (run when a cluster
starts) removes what clusters of dead processes left behind, so even a run
killed with SIGKILL leaves nothing past the next run. `leftovers` lists what
remains of one cluster (a test asserts it is empty).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from gpart.formats.files.names import process_alive

PREFIX = "gpmh"  # namespaces gpmh<pid>-sw, gpmh<pid>-h<i>
BASE = Path("/tmp/gpart-multihost")  # BASE/<pid>-<n>/: local (mount point), disks/<host>/, etc-hosts
SUBNET = "10.251.7"  # private, exists only on the cluster's own bridge
MTU = 65535  # the stack's large segments cross whole (also through link_relay.py)
RELAY = Path(__file__).with_name("link_relay.py")
_NAME = re.compile(rf"^{PREFIX}(\d+)-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> Optional[str]:
    """Why this machine cannot build clusters (None: it can)."""
    if os.geteuid() != 0:
        return "multihost tests need root (ip netns, mounts)"
    for tool in ("ip", "tc", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"multihost tests need `{tool}` (apt-get install iproute2 util-linux)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    name: str  # hostA, hostB, ...: hostname and /etc/hosts name inside the cluster
    index: int
    netns: str
    addr: str
    disk: Path  # this host's directory as the test (root namespace) sees it; LOCAL inside the host


@dataclass
class Result:
    host: str
    returncode: Optional[int]  # None: still running at the deadline (then killed)
    seconds: float
    log: str




def _netns_names() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in `ns` (stopped ones too) until none is left, then delete it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.05)
    _ip("netns", "del", ns, check=False)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    return [p for p in points if (p + "/").startswith(prefix)]


def _remove_tree(root: Path) -> None:
    for point in sorted(_mounts_under(root), key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def cleanup_stale() -> list[str]:
    """Remove the namespaces, mounts and directories of clusters whose creating process is gone."""
    removed = []
    for ns in _netns_names():
        match = _NAME.match(ns)
        if match and not process_alive(int(match.group(1))):
            _kill_namespace(ns)
            removed.append(ns)
    if BASE.is_dir():
        for entry in BASE.iterdir():
            pid = entry.name.split("-")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                _remove_tree(entry)
                removed.append(str(entry))
    return removed


_open_clusters: list["Cluster"] = []
_counter = [0]


def _close_all() -> None:
    for cluster in list(_open_clusters):
        cluster.close()


def _on_signal(signum, frame) -> None:
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_handlers_installed = [False]


def _install_handlers() -> None:
    if _handlers_installed[0]:
        return
    _handlers_installed[0] = True
    atexit.register(_close_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_signal)
        except ValueError:  # not the main thread: atexit and the next run's cleanup_stale remain
            pass


class Cluster:
    """`n` hosts (hostA, hostB, ...) on one bridge; `disk_bytes[name]` makes that host's directory a tmpfs."""

    def __init__(self, n: int, log_dir: Path, disk_bytes: Optional[dict[str, int]] = None):
        _counter[0] += 1
        self.tag = f"{os.getpid()}-{_counter[0]}"
        self.root = BASE / self.tag
        self.local = self.root / "local"  # the directory each host's command sees as its own
        self.log_dir = Path(log_dir)
        self.switch = f"{PREFIX}{self.tag}-sw"
        self.hosts = [Host(f"host{chr(65 + i)}", i, f"{PREFIX}{self.tag}-h{i}", f"{SUBNET}.{i + 1}",
                           self.root / "disks" / f"host{chr(65 + i)}") for i in range(n)]
        self.disk_bytes = dict(disk_bytes or {})
        self._netns_inodes: set[int] = set()
        self._relays: dict[str, subprocess.Popen] = {}
        self._procs: list[tuple[Host, subprocess.Popen, float, Path]] = []
        self.closed = True

    def __enter__(self) -> "Cluster":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def open(self) -> None:
        cleanup_stale()
        _install_handlers()
        self.closed = False
        _open_clusters.append(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.local.mkdir(parents=True)
        (self.root / "etc-hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{h.addr} {h.name}\n" for h in self.hosts))
        (self.root / "resolv.conf").write_text("options timeout:1 attempts:1\n")  # no name server: only the hosts file
        _ip("netns", "add", self.switch)
        self._remember(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for h in self.hosts:
            h.disk.mkdir(parents=True)
            if h.name in self.disk_bytes:
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_bytes[h.name]}", "tmpfs", str(h.disk)], check=True)
            _ip("netns", "add", h.netns)
            self._remember(h.netns)
            _ip("-n", self.switch, "link", "add", f"p{h.index}", "mtu", str(MTU), "type", "veth", "peer", "name", "eth0",
                "netns", h.netns, "mtu", str(MTU))
            _ip("-n", self.switch, "link", "set", f"p{h.index}", "master", "br0", "up")
            _ip("-n", h.netns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
            _ip("-n", h.netns, "link", "set", "eth0", "up")
            _ip("-n", h.netns, "link", "set", "lo", "up")
            subprocess.run(["ip", "netns", "exec", h.netns, sys.executable, str(RELAY), "eth0", "--software-checksums"], check=True)

    def _remember(self, ns: str) -> None:
        self._netns_inodes.add(os.stat(f"/run/netns/{ns}").st_ino)

    # ------------------------------------------------------------------ commands

    def spawn(self, host: Host, argv: Sequence[str], env: Optional[dict[str, str]] = None, log_name: str = "") -> subprocess.Popen:
        """Start `argv` on `host` (its hostname, /etc/hosts, LOCAL = its own directory); output to a log file."""
        others = self.root / "disks"
        setup = (f"hostname {host.name} && mount --bind {self.root / 'etc-hosts'} /etc/hosts && "
                 f"mount --bind {self.root / 'resolv.conf'} /etc/resolv.conf && mount --bind {host.disk} {self.local} && mount -t tmpfs -o size=64k,ro tmpfs {others} && "
                 f'cd {self.local} && exec "$@"')
        log = self.log_dir / f"{log_name or host.name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", host.netns, "unshare", "--mount", "--uts", "--propagation",
                                     "private", "sh", "-c", setup, "sh", *map(str, argv)],
                                    env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._procs.append((host, proc, time.monotonic(), log))
        return proc

    def wait(self, procs: Sequence[subprocess.Popen], timeout_s: float) -> list[Result]:
        """Wait for `procs` (all of them together at most `timeout_s`); the ones still running are killed
        and get returncode None. Results in the order of `procs`."""
        deadline = time.monotonic() + timeout_s
        done: dict[int, float] = {}
        while len(done) < len(procs) and time.monotonic() < deadline:
            for proc in procs:
                if proc.pid not in done and proc.poll() is not None:
                    done[proc.pid] = time.monotonic()
            time.sleep(0.05)
        results = []
        for proc in procs:
            host, _, started, log = next(entry for entry in self._procs if entry[1] is proc)
            if proc.pid not in done:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            results.append(Result(host.name, proc.returncode if proc.pid in done else None,
                                  done.get(proc.pid, time.monotonic()) - started, log.read_text(errors="replace")))
        return results

    def wait_for_log(self, proc: subprocess.Popen, text: str, timeout_s: float) -> float:
        """Block until `proc`'s log contains `text` (seconds waited); AssertionError past `timeout_s` or when it exits."""
        log = next(entry[3] for entry in self._procs if entry[1] is proc)
        start = time.monotonic()
        while text not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() - start > timeout_s:
                raise AssertionError(f"{text!r} not in {log} (exit code {proc.returncode}):\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        return time.monotonic() - start

    def run(self, commands: dict[str, Sequence[str]], timeout_s: float, env: Optional[dict[str, str]] = None,
            step: str = "") -> list[Result]:
        """Run one command per host name at once; their results in the order given (logs `<step>-<host>.log`)."""
        return self.wait([self.spawn(self.host(name), argv, env, f"{step}-{name}" if step else "")
                          for name, argv in commands.items()], timeout_s)

    # ------------------------------------------------------------------ faults and counters

    def shape(self, host: Host, delay_ms: float = 0.0, loss: float = 0.0, rate_mbit: float = 0.0) -> None:
        """Delay, loss (a fraction) and rate on both directions of `host`'s link; all zero: a plain cable.

        link_relay.py, in the switch namespace between the host's cable end and
        the bridge, does it (kernels without sch_netem have no `tc netem`).
        """
        i, sw = host.index, self.switch
        relay = self._relays.pop(host.name, None)
        if relay is not None:
            relay.kill()
            relay.wait()
            _ip("-n", sw, "link", "del", f"q{i}")
            _ip("-n", sw, "link", "set", f"p{i}", "master", "br0")
        if not (delay_ms or loss or rate_mbit):
            return
        _ip("-n", sw, "link", "set", f"p{i}", "nomaster")
        _ip("-n", sw, "link", "add", f"q{i}", "mtu", str(MTU), "type", "veth", "peer", "name", f"r{i}", "mtu", str(MTU))
        _ip("-n", sw, "link", "set", f"r{i}", "master", "br0", "up")
        _ip("-n", sw, "link", "set", f"q{i}", "up")
        self._relays[host.name] = subprocess.Popen(
            ["ip", "netns", "exec", sw, sys.executable, str(RELAY), f"p{i}", f"q{i}",
             "--delay-ms", str(delay_ms), "--loss", str(loss), "--rate-mbit", str(rate_mbit)],
            stdin=subprocess.DEVNULL, start_new_session=True)

    def cut(self, host: Host, up: bool = False) -> None:
        """Unplug `host`'s cable at the bridge (up=True plugs it back)."""
        _ip("-n", self.switch, "link", "set", f"p{host.index}", "up" if up else "down")

    def signal(self, host: Host, sig: int) -> list[int]:
        """Send `sig` to every process of `host` (its namespace); the pids signalled."""
        pids = self.pids(host)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def pids(self, host: Host) -> list[int]:
        """Every process in `host`'s namespace."""
        return [int(p) for p in _ip("netns", "pids", host.netns, check=False).stdout.split()]

    def bytes_sent(self, host: Host, device: str = "eth0") -> int:
        """Bytes `host` has sent on its link (eth0's tx counter; "lo": between its own processes)."""
        info = json.loads(_ip("-n", host.netns, "-s", "-j", "link", "show", device).stdout)
        return int(info[0]["stats64"]["tx"]["bytes"])

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Kill every process of the cluster, delete its namespaces, unmount and remove its directory."""
        if self.closed:
            return
        self.closed = True
        for proc in [p for _, p, _, _ in self._procs] + list(self._relays.values()):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for ns in [h.netns for h in self.hosts] + [self.switch]:
            if ns in _netns_names():
                _kill_namespace(ns)
        for proc in [p for _, p, _, _ in self._procs] + list(self._relays.values()):
            proc.wait()
        _remove_tree(self.root)
        if self in _open_clusters:
            _open_clusters.remove(self)

    def leftovers(self) -> list[str]:
        """What is left of this cluster: namespaces, mounts, its directory, processes in its namespaces."""
        left = [ns for ns in _netns_names() if ns.startswith(f"{PREFIX}{self.tag}-")]
        left += _mounts_under(self.root) + ([str(self.root)] if self.root.exists() else [])
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.stat(entry / "ns" / "net").st_ino in self._netns_inodes:
                        left.append(f"process {entry.name}")
                except (FileNotFoundError, PermissionError, ProcessLookupError):
                    pass
        return left
