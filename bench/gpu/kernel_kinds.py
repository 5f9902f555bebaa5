"""Where a GPU's time goes, by kind of kernel: for torch.profiler's events (pytorch_vlm.py) and for
the Chrome traces Tandem writes with `tandem run --colocated --profile` (platform/trace.h), which
are the same Kineto format."""
import json


def kernel_kind(name):
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "attention", "attn")):
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "cublas", "matmul")):
        return "matmul"
    if any(k in n for k in ("adam", "multi_tensor")):
        return "optimizer"
    if any(k in n for k in ("memcpy", "memset")):
        return "copy"
    return "elementwise and other"


def summarize_trace(path, top=12):
    """GPU time by kind, the busiest kernels, and how much of the traced window the GPU was idle,
    from a Kineto Chrome trace (durations in microseconds)."""
    with open(path) as f:
        events = json.load(f).get("traceEvents", [])
    spans, kinds, kernels = [], {}, {}
    first, last = None, None
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        start, duration = float(e["ts"]), float(e["dur"])
        first = start if first is None else min(first, start)
        last = start + duration if last is None else max(last, start + duration)
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        spans.append((start, start + duration))
        kind = "copy" if e["cat"] != "kernel" else kernel_kind(e.get("name", ""))
        kinds[kind] = kinds.get(kind, 0.0) + duration
        name = e.get("name", "")[:120]
        total, calls = kernels.get(name, (0.0, 0))
        kernels[name] = (total + duration, calls + 1)
    busy, end = 0.0, None  # the union of the device's intervals
    for start, stop in sorted(spans):
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    window = (last - first) if first is not None else 0.0
    device_time = sum(kinds.values())
    return {
        "window_ms": window / 1e3,
        "gpu_busy_ms": busy / 1e3,
        "gpu_idle_fraction": max(0.0, 1 - busy / window) if window > 0 else None,
        "share_by_kind": {k: round(t / device_time, 4) for k, t in sorted(kinds.items())} if device_time else {},
        "top_kernels": [{"ms": round(t / 1e3, 3), "calls": c, "name": n}
                        for n, (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]],
    }
