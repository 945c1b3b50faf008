"""One rank of preflight's smoke.allreduce: rendezvous, all_reduce, check the sum, print one JSON line.

Shipped to the node inline (base64 inside the probe) and run with the node's own python inside its
launch environment, so it may use nothing but the standard library and torch (torch_npu for hccl).
Usage: python allreduce_worker.py '<json config>'; config keys: rank, world, addr, port, backend
(auto|gloo|nccl|hccl), size_mib, warmup, iters, timeout_s (rendezvous), run_timeout_s, node.

Why the shape: the check must tell *where* a launch would break, so every phase is named (import,
backend, store, init, warmup, timed, verify) and the one JSON line on the real stdout carries the
phase, the error's first lines, or the measurements. stdout is redirected to stderr at start so
library chatter cannot corrupt that line. A watchdog bounds the whole run and a parent watcher exits
when the probe's shell goes away, so no rank outlives its probe.
"""
import json
import os
import sys
import threading
import time
import traceback

MARK = "pf_smoke"
_out = [sys.stdout]  # the real stdout once take_stdout() ran (the worker's own line goes there only)
_lock = threading.Lock()
_printed = [False]
state = {"phase": "start"}

# The known pattern, fp32: element i of rank r is (1 + r % RANK_PERIOD) * (1 + i % 4). Every partial
# sum of a sum all-reduce is then an integer no larger than the full sum, 4 * rank_sum(world) at
# most, so the result is exact in fp32 as long as that stays within 2**24 (integers up to 2**24 are
# exact in fp32, whatever order the library adds them in): up to MAX_EXACT_WORLD (493,450) ranks.
# (r+1) instead of (1 + r % 16) would pass 2**24 at about 2,900 ranks: 256 nodes x 16 NPUs is 4,096.
# HCCL verifies a bf16 sum only up to 63 ranks, fp16 up to 511, which is why the pattern is fp32.
# The period in i catches a shifted or misplaced chunk that a constant fill would not. Each rank
# checks every element itself, so a wrong element still names the rank (and node) that saw it.
RANK_PERIOD = 16
FP32_EXACT = 1 << 24


def contribution(rank):
    """What rank `rank` contributes, times (1 + i % 4) at element i."""
    return 1 + rank % RANK_PERIOD


def rank_sum(world):
    """The sum of every rank's contribution: element i of the result is rank_sum(world) * (1 + i % 4)."""
    q, m = divmod(int(world), RANK_PERIOD)
    return q * RANK_PERIOD * (RANK_PERIOD + 1) // 2 + m * (m + 1) // 2


def exact_in_fp32(world):
    """Whether every partial sum of the pattern over `world` ranks is exact in fp32."""
    return 4 * rank_sum(world) <= FP32_EXACT


def _max_exact_world():
    lo, hi = 1, FP32_EXACT
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if exact_in_fp32(mid) else (lo, mid - 1)
    return lo


MAX_EXACT_WORLD = _max_exact_world()


VISIBLE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def visible_devices(env, index):
    """What a rank of `ranks_per_node: devices` sets so that it sees only its own device: for each of
    VISIBLE_VARS, the index-th entry of the list the launch environment already set (the job's own
    devices: ASCEND_RT_VISIBLE_DEVICES=8,9,10,11 gives local rank 1 device 9), else the bare index."""
    out = {}
    for var in VISIBLE_VARS:
        listed = [x.strip() for x in str(env.get(var) or "").split(",") if x.strip()]
        if not listed:
            out[var] = str(index)
        elif index < len(listed):
            out[var] = listed[index]
        else:
            raise RuntimeError("visible devices: %s=%s lists only %d device(s), and this node runs a rank for "
                               "device %d" % (var, env.get(var), len(listed), index + 1))
    return out


HCCL_BUFFSIZE_DEFAULT_MB = 200  # docs/ENV.md A.6


def hccl_buffsize(size_mib, env):
    """(the HCCL_BUFFSIZE this rank sets, or None; the MB in effect). HCCL_BUFFSIZE (MB, default 200)
    is the per-communicator buffer; a message above it is reduced in several passes, which is not the
    bandwidth being measured. Raised to ceil(size_mib) + 1 only when the message would not fit and
    the job did not set it: the job's own value is the job's shape, kept (the check notes it)."""
    need = int(-(-float(size_mib) // 1)) + 1
    own = str(env.get("HCCL_BUFFSIZE") or "").strip()
    if own:
        try:
            return None, int(own)
        except ValueError:
            return None, None  # not a number: HCCL's problem to report (env.comm flags it)
    if need > HCCL_BUFFSIZE_DEFAULT_MB:
        return str(need), need
    return None, HCCL_BUFFSIZE_DEFAULT_MB


def take_stdout():
    """Keep the real stdout for the one JSON line; whatever torch or a library prints goes to stderr."""
    _out[0] = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def emit(record):
    """Print the single JSON line (first caller wins) and flush."""
    with _lock:
        if _printed[0]:
            return
        _printed[0] = True
        _out[0].write(json.dumps(record, sort_keys=True) + "\n")
        _out[0].flush()


def error_record(cfg, phase, text, kind="error"):
    lines = [ln.rstrip() for ln in str(text).splitlines() if ln.strip()]
    return {MARK: 1, "rank": cfg.get("rank"), "node": cfg.get("node"), "backend": state.get("backend"),
            "ok": False, "phase": phase, "kind": kind, "error": (lines[0] if lines else kind)[:500],
            "error_lines": [ln[:300] for ln in lines[:8]], "pid": os.getpid(),
            "elapsed_s": round(time.time() - T0, 3)}


def watchdog(cfg, limit):
    """Exit with a 'hang' record if the rank is still busy after `limit` seconds."""
    def fire():
        emit(error_record(cfg, state["phase"], "no progress in phase %s after %.0fs (rank %s hung)"
                          % (state["phase"], limit, cfg.get("rank")), kind="hang"))
        os._exit(3)
    t = threading.Timer(limit, fire)
    t.daemon = True
    t.start()


def parent_watch():
    """The probe shell died (Ctrl-C, remote timeout): do not linger as an orphan."""
    parent = os.getppid()
    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(4)
    threading.Thread(target=loop, daemon=True).start()


def pick_backend(torch, wanted):
    """hccl when torch_npu imports and NPUs are present, nccl with CUDA, else gloo."""
    if wanted in ("hccl", "auto"):
        try:
            import torch_npu  # noqa: F401
            if torch.npu.is_available() and torch.npu.device_count() > 0:
                return "hccl"
        except Exception as exc:  # noqa: BLE001
            if wanted == "hccl":
                raise RuntimeError("backend hccl asked for, but torch_npu does not work: %s" % exc)
        if wanted == "hccl":
            raise RuntimeError("backend hccl asked for, but no NPU is visible (torch.npu.device_count() == 0)")
    if wanted in ("nccl", "auto"):
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return "nccl"
        if wanted == "nccl":
            raise RuntimeError("backend nccl asked for, but CUDA is not available")
    return "gloo"


def main():
    cfg = json.loads(sys.argv[1])
    rank, world = int(cfg["rank"]), int(cfg["world"])
    rdv = float(cfg.get("timeout_s", 60))
    run_s = float(cfg.get("run_timeout_s", 60))
    parent_watch()
    if not exact_in_fp32(world):  # the check refuses such a plan; this is the rank's own guard
        raise RuntimeError("a world of %d ranks is past the %d whose fp32 sum of the known pattern is exact"
                           % (world, MAX_EXACT_WORLD))
    if cfg.get("visible_device") is not None:  # one rank per NPU/GPU: this rank sees only its own
        state["visible_devices"] = visible_devices(os.environ, int(cfg["visible_device"]))
        os.environ.update(state["visible_devices"])
    # torch_npu builds its global HCCL communicator from the file RANK_TABLE_FILE names when the
    # launch environment sets it, and each rank must then be that table's rank_id (Ascend Extension
    # for PyTorch, environment variable RANK_TABLE_FILE: hiascend.com/document/detail/zh/Pytorch/600/
    # apiref/Envvariables/Envir_017.html; "ranktable" link setup). A pair or a group
    # of this check is not the table's job: its ranks build their communicator through the store.
    # The table itself is hccl.ranktable's to check.
    table = os.environ.pop("RANK_TABLE_FILE", None)
    state["phase"] = "import"
    import datetime
    import torch
    import torch.distributed as dist
    watchdog(cfg, rdv + run_s + 5)
    state["phase"] = "backend"
    backend = pick_backend(torch, cfg.get("backend", "auto"))
    state["backend"] = backend
    state["phase"] = "store"
    timeout = datetime.timedelta(seconds=rdv)
    store = dist.TCPStore(cfg["addr"], int(cfg["port"]), world, rank == 0, timeout=timeout,
                          wait_for_workers=False)
    store.set("pf_backend_%d" % rank, backend)
    peers = [store.get("pf_backend_%d" % r).decode() for r in range(world)]
    if len(set(peers)) != 1:
        raise RuntimeError("ranks picked different backends: %s" % ", ".join(
            "rank %d %s" % (r, b) for r, b in enumerate(peers)))
    state["phase"] = "init"
    if backend == "hccl":
        raise_to, state["hccl_buffsize_mb"] = hccl_buffsize(cfg.get("size_mib", 64), os.environ)
        if raise_to is not None:  # this rank only
            os.environ["HCCL_BUFFSIZE"] = raise_to
        device = torch.device("npu", int(cfg.get("device", 0)))
        torch.npu.set_device(device)
        sync = torch.npu.synchronize
    elif backend == "nccl":
        device = torch.device("cuda", int(cfg.get("device", 0)))
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
    else:
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    if table and "RANK_TABLE_FILE" not in os.environ:  # what the backend sees as it builds the communicator
        state["rank_table_unset"] = table
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=timeout)  # the watchdog bounds the run phase
    numel = max(1, int(float(cfg.get("size_mib", 64)) * (1 << 20)) // 4)
    fill = float(contribution(rank))  # the known pattern (see RANK_PERIOD)
    unit = (torch.arange(numel, dtype=torch.float32) % 4 + 1).to(device)
    pattern = unit * fill
    expected = float(rank_sum(world))
    t = torch.empty(numel, dtype=torch.float32, device=device)
    state["phase"] = "warmup"
    for _ in range(max(1, int(cfg.get("warmup", 2)))):
        t.copy_(pattern)
        dist.all_reduce(t)
    sync()
    state["phase"] = "timed"
    iters = max(1, int(cfg.get("iters", 5)))
    times = []
    for _ in range(iters):
        t.copy_(pattern)
        sync()
        dist.barrier() if backend == "gloo" else None
        t0 = time.perf_counter()
        dist.all_reduce(t)
        sync()
        times.append(time.perf_counter() - t0)
    state["phase"] = "verify"
    per_unit = t / unit
    got_min, got_max = float(per_unit.min().item()), float(per_unit.max().item())
    bad = (t != unit * expected).nonzero()
    sum_ok = bad.numel() == 0
    wrong = None
    if not sum_ok:
        i = int(bad[0].item())
        wrong = {"index": i, "value": float(t[i].item()), "expected": float(unit[i].item()) * expected,
                 "count": int(bad.numel())}
    small = torch.full((1,), fill, dtype=torch.float32, device=device)
    lat = []
    for _ in range(max(3, iters)):
        small.fill_(fill)
        sync()
        t0 = time.perf_counter()
        dist.all_reduce(small)
        sync()
        lat.append(time.perf_counter() - t0)
    size_bytes = numel * 4
    avg = sum(times) / len(times)
    algbw = size_bytes / avg / 1e9
    busbw = algbw * 2.0 * (world - 1) / world
    record = {MARK: 1, "rank": rank, "node": cfg.get("node"), "world": world, "backend": backend,
              "ok": bool(sum_ok), "phase": "done", "sum_ok": bool(sum_ok), "expected": expected,
              "got": [got_min, got_max], "size_bytes": size_bytes, "iters": iters,
              "time_ms": round(avg * 1e3, 4), "time_min_ms": round(min(times) * 1e3, 4),
              "algbw_gbps": round(algbw, 4), "busbw_gbps": round(busbw, 4),
              "latency_ms": round(sorted(lat)[len(lat) // 2] * 1e3, 4),
              "torch": getattr(torch, "__version__", ""), "pid": os.getpid(),
              "hccl_buffsize_mb": state.get("hccl_buffsize_mb"), "visible_devices": state.get("visible_devices"),
              "rank_table_unset": state.get("rank_table_unset"), "elapsed_s": round(time.time() - T0, 3)}
    if not sum_ok:
        record.update(kind="wrong_sum", wrong=wrong,
                      error="all_reduce result wrong on rank %d (%s): element %d is %g, expected %g "
                      "(%d of %d elements wrong)" % (rank, cfg.get("node"), wrong["index"], wrong["value"],
                                                     wrong["expected"], wrong["count"], numel))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the measurement is done; teardown noise is not a verdict
        pass
    emit(record)


T0 = time.time()
if __name__ == "__main__":
    take_stdout()
    try:
        main()
        code = 0 if _printed[0] else 1
    except BaseException as exc:  # noqa: BLE001 - everything becomes the one JSON line
        cfg = {}
        try:
            cfg = json.loads(sys.argv[1])
        except Exception:  # noqa: BLE001
            pass
        text = "%s: %s" % (type(exc).__name__, exc)
        emit(error_record(cfg, state["phase"], text + "\n" + "".join(traceback.format_exc().splitlines(True)[-3:])))
        code = 2
    sys.stderr.flush()
    os._exit(code if _printed[0] else 1)
