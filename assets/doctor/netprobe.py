# argus doctor's network probe: run by argus in a short-lived container of the cluster's image
# with the host's network and PID namespaces (and CAP_SYS_PTRACE, to read other processes'
# descriptors). Reads only; prints one JSON object on stdout.
#
#   netprobe.py HEAD GCS_PORT CONNECT RANGES OWN_IDS DEADLINE_S
#
# HEAD: the head's address; GCS_PORT: its GCS port; CONNECT: "1" to dial it; RANGES:
# "20000-20999,21000-21999" (ports to look at, may be empty); OWN_IDS: comma-separated ids of
# the cluster's own containers on this host (their listeners are not findings); DEADLINE_S:
# the time the probe may take.
#
# Out: {"route": {"iface", "source", "error"}, "connect": {"ms" | "error"} | null,
#       "listeners": [{"port", "address", "pids": [{"pid", "comm", "cmdline", "container"}],
#                      "own": bool}], "partial": bool}
import fcntl
import ipaddress
import json
import os
import re
import socket
import struct
import sys
import time

SIOCGIFADDR = 0x8915
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


def iface_with_address(address):
    """The interface whose (primary) IPv4 address is `address`."""
    for _, name in socket.if_nameindex():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            if socket.inet_ntoa(packed[20:24]) == address:
                return name
        except OSError:
            pass
        finally:
            s.close()
    return None


def iface_by_route_table(dest):
    """Longest prefix match of `dest` in /proc/net/route (the main table)."""
    best = None
    target = int(ipaddress.IPv4Address(dest))
    with open("/proc/net/route") as f:
        next(f)
        for line in f:
            cols = line.split()
            if len(cols) < 8:
                continue
            net = socket.ntohl(int(cols[1], 16))
            mask = socket.ntohl(int(cols[7], 16))
            if target & mask == net and (best is None or mask > best[0]):
                best = (mask, cols[0])
    return best[1] if best else None


def route(head, port):
    try:
        dest = socket.gethostbyname(head)
    except OSError as e:
        return {"iface": None, "source": None, "error": f"cannot resolve {head}: {e}"}
    if ipaddress.IPv4Address(dest).is_loopback:
        return {"iface": "lo", "source": dest, "error": None}
    source = None
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((dest, port))  # no packet: the kernel only picks the route
        source = s.getsockname()[0]
        s.close()
    except OSError as e:
        return {"iface": None, "source": None, "error": f"no route to {dest}: {e}"}
    iface = iface_with_address(source) or iface_by_route_table(dest)
    return {"iface": iface, "source": source, "error": None if iface else "no interface found"}


def connect(head, port, timeout):
    started = time.monotonic()
    try:
        with socket.create_connection((head, port), timeout=timeout):
            pass
    except socket.timeout:
        return {"error": f"no answer within {timeout:g}s"}
    except OSError as e:
        return {"error": e.strerror or str(e)}
    return {"ms": round((time.monotonic() - started) * 1000, 2)}


def parse_ranges(text):
    ranges = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return ranges


def listeners(ranges):
    """TCP sockets in LISTEN state whose port is in one of `ranges`: inode -> (port, address)."""
    found = {}
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(path) as f:
                next(f)
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != "0A":
                continue
            addr_hex, port_hex = cols[1].split(":")
            port = int(port_hex, 16)
            if not any(lo <= port <= hi for lo, hi in ranges):
                continue
            raw = bytes.fromhex(addr_hex)
            if v6:
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                address = str(ipaddress.IPv6Address(raw))
            else:
                address = str(ipaddress.IPv4Address(raw[::-1]))
            found[cols[9]] = (port, address)
    return found


def read(path, limit=4096):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def holders(inodes, deadline):
    """inode -> [pid]; partial when the deadline came first."""
    wanted = {f"socket:[{i}]": i for i in inodes}
    out = {i: [] for i in inodes}
    if not inodes:
        return out, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        if time.monotonic() > deadline:
            return out, True
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(link)
            if inode is not None and int(pid) not in out[inode]:
                out[inode].append(int(pid))
    return out, False


def describe(pid):
    comm = read(f"/proc/{pid}/comm").decode(errors="replace").strip()
    cmdline = read(f"/proc/{pid}/cmdline", 400).replace(b"\0", b" ").decode(errors="replace").strip()
    match = CONTAINER_ID.search(read(f"/proc/{pid}/cgroup").decode(errors="replace"))
    return {"pid": pid, "comm": comm, "cmdline": cmdline, "container": match.group(0) if match else None}


def main():
    head, gcs, dial, ranges, own, budget = sys.argv[1:7]
    started = time.monotonic()
    deadline = started + float(budget)
    own_ids = set(filter(None, own.split(",")))
    out = {"route": route(head, int(gcs)), "connect": None, "listeners": [], "partial": False}
    if dial == "1":
        out["connect"] = connect(head, int(gcs), min(2.0, max(0.2, deadline - time.monotonic())))
    sockets = listeners(parse_ranges(ranges))
    pids, out["partial"] = holders(list(sockets), deadline)
    for inode, (port, address) in sorted(sockets.items(), key=lambda kv: kv[1]):
        described = [describe(p) for p in sorted(pids[inode])]
        own_socket = bool(described) and all(d["container"] in own_ids for d in described)
        out["listeners"].append({"port": port, "address": address, "pids": described, "own": own_socket})
    print(json.dumps(out))


main()
