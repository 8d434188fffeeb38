"""The harness itself: hosts with their own addresses, names and directories, commands with exit codes
and logs, and a teardown that leaves nothing behind, also when the test process is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from netns_hosts import BASE, cleanup_stale

HERE = Path(__file__).resolve().parent


def test_hosts_have_their_own_address_name_and_directory(cluster2):
    a, b = cluster2.hosts
    script = ("hostname; ip -4 -o addr show dev eth0 | awk '{{print $4}}'; echo mine > note; ls {disks}; "
              "python -c \"import socket; socket.create_connection(('{peer}', 9), 2)\" 2>&1 | tail -1; exit {rc}")
    results = cluster2.run({
        "hostA": ["sh", "-c", script.format(disks=cluster2.root / "disks", peer="hostB", rc=3)],
        "hostB": ["sh", "-c", script.format(disks=cluster2.root / "disks", peer="hostA", rc=0)],
    }, timeout_s=30)
    assert [r.returncode for r in results] == [3, 0]
    for result, host in zip(results, (a, b)):
        lines = result.log.splitlines()
        assert lines[:2] == [host.name, f"{host.addr}/24"], result.log
        # the other hosts' directories are hidden; the peer answers (connection refused: no listener on port 9)
        assert "Connection refused" in lines[-1], result.log
        assert (host.disk / "note").read_text() == "mine\n"
    assert sorted(p.name for p in a.disk.iterdir()) == ["note"] == sorted(p.name for p in b.disk.iterdir())


def test_a_command_past_its_deadline_is_killed_and_reported(cluster2):
    start = time.monotonic()
    [result] = cluster2.run({"hostB": ["sh", "-c", "echo started; sleep 600"]}, timeout_s=1)
    assert result.returncode is None and result.log == "started\n"
    assert time.monotonic() - start < 10


def _owner(log_dir: Path) -> subprocess.Popen:
    # a process that builds a cluster, starts a long command on each host and then waits to be killed
    code = (f"import sys, time; sys.path.insert(0, {str(HERE)!r}); from netns_hosts import Cluster\n"
            f"c = Cluster(2, {str(log_dir)!r}); c.open()\n"
            f"[c.spawn(h, ['sleep', '600']) for h in c.hosts]\nprint(c.tag, flush=True); time.sleep(600)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _remains(tag: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = [line.split()[0] for line in out.splitlines() if line.startswith(f"gpmh{tag}-")]
    left += [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if f"{BASE}/{tag}/" in line]
    sleepers = subprocess.run(["pgrep", "-f", "^sleep 600$"], capture_output=True, text=True).stdout.split()
    left += [str(BASE / tag)] if (BASE / tag).exists() else []
    return left + [f"process {p}" for p in sleepers if _in_netns_of(int(p), tag)]


def _in_netns_of(pid: int, tag: str) -> bool:
    try:
        return f"gpmh{tag}-" in subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True).stdout
    except OSError:
        return False


def test_sigterm_tears_down_and_sigkill_is_cleaned_by_the_next_run(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        owner = _owner(tmp_path)
        tag = owner.stdout.readline().strip()
        assert _remains(tag), "the owner built nothing"
        owner.send_signal(sig)
        owner.wait(timeout=30)
        if sig == signal.SIGKILL:  # no handler ran: the namespaces, their processes and the directory remain
            assert _remains(tag)
            cleanup_stale()  # what every new cluster runs first
        assert _remains(tag) == [], (sig, _remains(tag))
