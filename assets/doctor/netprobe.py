# argus doctor's route and listener probe (and `up`'s interface probe): run by argus as
# `python3 -I -S` (no site-packages, no .pth, no sitecustomize, no PYTHON* variables) in a
# short-lived container of the cluster's image with the host's network namespace and nothing
# else: its own PID namespace, no capability, no-new-privileges, a read-only root file
# system, user nobody. Reads only; prints one JSON object on stdout. Who holds a listening
# socket is holders.py's, run only when this one found a listener.
#
#   netprobe.py HEAD GCS_PORT CONNECT RANGES
#
# HEAD: the head's address; GCS_PORT: its GCS port; CONNECT: "1" to dial it; RANGES:
# "20000-20999,21000-21999" (ports to look at, may be empty).
#
# Out: {"route": {"iface", "source", "error"}, "connect": {"ms" | "error"} | null,
#       "listeners": [{"port", "address", "inode", "uid"}]}
import fcntl
import ipaddress
import json
import socket
import struct
import sys
import time

SIOCGIFADDR = 0x8915


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
    """TCP sockets in LISTEN state whose port is in one of `ranges`: inode -> (port, address, uid)."""
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
            found[cols[9]] = (port, address, int(cols[7]))
    return found


def main():
    head, gcs, dial, ranges = sys.argv[1:5]
    out = {"route": route(head, int(gcs)), "connect": None, "listeners": []}
    if dial == "1":
        out["connect"] = connect(head, int(gcs), 2.0)
    sockets = listeners(parse_ranges(ranges))
    for inode, (port, address, uid) in sorted(sockets.items(), key=lambda kv: kv[1]):
        out["listeners"].append({"port": port, "address": address, "inode": inode, "uid": uid})
    print(json.dumps(out))


main()
