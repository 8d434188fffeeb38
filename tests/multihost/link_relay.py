"""A link with delay, loss and a rate, in user space, for kernels without `tc netem` (sch_netem).

    ip netns exec SWITCH python link_relay.py p1 q1 --delay-ms 50 --loss 0.01 [--rate-mbit 10000]

Forwards every Ethernet frame arriving on one interface out of the other, in
both directions, each frame held `delay` after its arrival and dropped with
probability `loss` (each direction on its own, as netem on both ends of a
cable); `--rate-mbit` spaces frames by their size (a serialisation rate). It
runs inside the cluster's switch namespace only, between a host's cable end
and the bridge, so it sees nothing but the cluster's frames. Frames are as large as the
interfaces' MTU (the harness sets 65535 so the stack's large segments pass whole), and
the hosts compute checksums in software (`--software-checksums eth0`), so
that a copied frame carries a valid one.
"""

from __future__ import annotations

import argparse
import heapq
import random
import select
import socket
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SIOCETHTOOL, ETHTOOL_STXCSUM = 0x8946, 0x17


def _open(ifname: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((ifname, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    sock.setblocking(False)
    return sock


def relay(a: str, b: str, delay_s: float, loss: float, rate_bps: float) -> None:
    socks = {a: _open(a), b: _open(b)}
    other = {socks[a]: socks[b], socks[b]: socks[a]}
    queue: list[tuple[float, int, socket.socket, bytes]] = []  # (due, order, out, frame)
    free_at = {socks[a]: 0.0, socks[b]: 0.0}  # when each direction's "wire" is free again (rate)
    order = 0
    while True:
        wait = max(0.0, queue[0][0] - time.monotonic()) if queue else 1.0
        ready, _, _ = select.select(list(other), [], [], wait)
        now = time.monotonic()
        for sock in ready:
            while True:
                try:
                    frame, addr = sock.recvfrom(1 << 17)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING or random.random() < loss:  # our own sends; a lost frame
                    continue
                out = other[sock]
                start = max(now, free_at[out])
                free_at[out] = start + (len(frame) * 8 / rate_bps if rate_bps else 0.0)
                order += 1
                heapq.heappush(queue, (free_at[out] + delay_s, order, out, frame))
        while queue and queue[0][0] <= time.monotonic():
            _, _, out, frame = heapq.heappop(queue)
            try:
                out.send(frame)
            except OSError:  # the interface went down (a cut): the frame is lost
                pass


def software_checksums(ifname: str) -> None:
    """Make `ifname` compute transmit checksums in software (ethtool -K IF tx off, without ethtool).

    veth hands frames on with checksums still to be filled in (offload); a
    frame a packet socket copies and sends again would arrive with a wrong one.
    """
    import array
    import fcntl
    import struct

    value = array.array("I", [ETHTOOL_STXCSUM, 0])
    ifreq = struct.pack("16sP16x", ifname.encode(), value.buffer_info()[0])  # struct ifreq: name, then ifr_data
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="an interface; with --software-checksums the only one")
    parser.add_argument("b", nargs="?")
    parser.add_argument("--software-checksums", action="store_true", help="only turn off checksum offload on A")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="probability a frame is dropped (0.01: 1%%)")
    parser.add_argument("--rate-mbit", type=float, default=0.0, help="0: no limit")
    args = parser.parse_args()
    if args.software_checksums:
        software_checksums(args.a)
        return
    relay(args.a, args.b, args.delay_ms / 1000, args.loss, args.rate_mbit * 1e6)


if __name__ == "__main__":
    main()
