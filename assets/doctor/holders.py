# argus doctor's port-holder scan: which processes hold the listening sockets netprobe.py
# found in the cluster's port ranges. Run by argus only when there is such a socket, as
# `python3 -I -S` (no site-packages, no .pth, no sitecustomize, no PYTHON* variables) in a
# short-lived container of the cluster's image with the host's PID namespace (to see every
# process), no network, CAP_SYS_PTRACE alone (to read other processes' descriptors; with
# CAP_DAC_READ_SEARCH too when a socket belongs to another user than root, whose
# /proc/<pid>/fd root may not list otherwise), no-new-privileges, a read-only root file
# system. Reads only; prints one JSON object on stdout.
#
#   holders.py INODES DEADLINE_S
#
# INODES: comma-separated socket inodes; DEADLINE_S: the time the scan may take.
#
# Out: {"holders": {"<inode>": [{"pid", "comm", "cmdline", "container"}]}, "partial": bool}
import json
import os
import re
import sys
import time

CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


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
    inodes, budget = sys.argv[1:3]
    deadline = time.monotonic() + float(budget)
    pids, partial = holders([i for i in inodes.split(",") if i], deadline)
    out = {"holders": {i: [describe(p) for p in sorted(ps)] for i, ps in pids.items()}, "partial": partial}
    print(json.dumps(out))


main()
