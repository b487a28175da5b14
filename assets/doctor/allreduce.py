# argus doctor --collective: one rank of an all-reduce between the cluster's worker containers,
# run by argus in each worker (docker exec). Prints JSON lines on stdout:
#   {"event": "hb", "rank": r, "pid": p}       every second (argus sees who still answers)
#   {"event": "no_torch", "error": ...}        torch is not in the image (exit 3)
#   {"event": "joined", "rank": r}             reached the rendezvous
#   {"event": "missing", "ranks": [...]}       rank 0: ranks that never reached it (exit 4)
#   {"event": "pair", "a": i, "b": j, "lat_us": .., "gbps": .., "bytes": .., "backend": ..}
#   {"event": "ring", "ranks": n, "lat_us": .., "gbps": .., "bytes": .., "backend": ..}
#   {"event": "error", "rank": r, "error": ...}
#   {"event": "done", "rank": r}
# Everything comes from the environment: ARGUS_RANK, ARGUS_WORLD, ARGUS_MASTER_ADDR,
# ARGUS_MASTER_PORT, ARGUS_BACKEND (gloo | nccl), ARGUS_JOIN_S, ARGUS_TIMEOUT_S, ARGUS_BYTES.
# The process ends by itself at ARGUS_TIMEOUT_S whatever happens.
import json
import os
import sys
import threading
import time

LOCK = threading.Lock()


def emit(**fields):
    with LOCK:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


rank = int(os.environ["ARGUS_RANK"])
world = int(os.environ["ARGUS_WORLD"])
timeout_s = float(os.environ["ARGUS_TIMEOUT_S"])
join_s = float(os.environ["ARGUS_JOIN_S"])
nbytes = int(os.environ.get("ARGUS_BYTES", str(16 << 20)))
started = time.monotonic()

watchdog = threading.Timer(timeout_s, lambda: os._exit(124))
watchdog.daemon = True
watchdog.start()


def beat():
    while True:
        emit(event="hb", rank=rank, pid=os.getpid())
        time.sleep(1)


threading.Thread(target=beat, daemon=True).start()

try:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
except ImportError as e:
    emit(event="no_torch", error=str(e))
    os._exit(3)


def timed(fn, iters):
    fn()
    begin = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - begin) / iters


def measure(group, members, device):
    small = torch.zeros(1, device=device)
    big = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)

    def op(t):
        def run():
            dist.all_reduce(t, group=group)
            if device != "cpu":
                torch.cuda.synchronize()

        return run

    lat = timed(op(small), 20)
    took = timed(op(big), 5)
    n = len(members)
    # nccl-tests' bus bandwidth: what each link carries in a ring all-reduce.
    gbps = nbytes / took * (2 * (n - 1) / n) / 1e9
    return round(lat * 1e6, 1), round(gbps, 3)


try:
    backend = os.environ.get("ARGUS_BACKEND", "gloo")
    device = "cpu"
    if backend == "nccl":
        if torch.cuda.is_available():
            torch.cuda.set_device(0)
            device = "cuda"
        else:
            backend = "gloo"
    addr, port = os.environ["ARGUS_MASTER_ADDR"], int(os.environ["ARGUS_MASTER_PORT"])
    left = max(1.0, join_s - (time.monotonic() - started))
    store = dist.TCPStore(
        addr,
        port,
        world,
        is_master=rank == 0,
        timeout=timedelta(seconds=left),
        wait_for_workers=False,
    )
    store.set(f"argus/joined/{rank}", "1")
    emit(event="joined", rank=rank)
    if rank == 0:
        keys = [f"argus/joined/{r}" for r in range(world)]
        while not store.check(keys) and time.monotonic() - started < join_s:
            time.sleep(0.1)
        missing = [r for r in range(world) if not store.check([f"argus/joined/{r}"])]
        store.set("argus/start", "abort" if missing else "go")
        if missing:
            emit(event="missing", ranks=missing)
            os._exit(4)
    elif store.get("argus/start") != b"go":
        os._exit(4)
    op_timeout = timedelta(seconds=max(5.0, timeout_s - (time.monotonic() - started)))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=op_timeout)
    for a in range(world):
        for b in range(a + 1, world):
            group = dist.new_group([a, b])
            if rank in (a, b):
                lat_us, gbps = measure(group, [a, b], device)
                if rank == a:
                    emit(event="pair", a=a, b=b, lat_us=lat_us, gbps=gbps, bytes=nbytes, backend=backend)
            dist.barrier()
    if world > 2:
        lat_us, gbps = measure(None, list(range(world)), device)
        if rank == 0:
            emit(event="ring", ranks=world, lat_us=lat_us, gbps=gbps, bytes=nbytes, backend=backend)
    dist.barrier()
    emit(event="done", rank=rank)
    os._exit(0)
except Exception as e:  # noqa: BLE001 - reported to argus, which names the rank
    emit(event="error", rank=rank, error=f"{type(e).__name__}: {e}"[:500])
    os._exit(1)
