"""Ray's object store as a peer of Tandem's data plane: float32 tensors between two Ray actors.

    python bench/ray_transport.py [--sizes-mib 1 16 64] [--repeats 5] [--tandem-output FILE]

Two actors on this host, one Ray node bound to 127.0.0.1 (no dashboard, no usage reporting). For
each size the sender builds a float32 tensor of that many bytes (before the clock starts, as
tandem-transport-bench does), then per transfer reads the clock, `ray.put`s the tensor's numpy
array into the object store and calls the receiver with the ObjectRef (inside a list, so Ray hands
the receiver the reference, not the value); the receiver `ray.get`s it and reads the clock as soon
as it holds the array. Time = receiver's clock - sender's clock (CLOCK_MONOTONIC, one host), the
median of `repeats` transfers after one warm-up. Two ways to receive, alternating transfer by
transfer:
  - view: what ray.get returns, a read-only numpy array mapped from the store (zero-copy on one
    node), wrapped with torch.from_numpy;
  - owned: the same, then copied into a torch tensor the receiver preallocated, which it owns after
    the object is freed: what a Tandem receiver has (a preallocated tensor it can train with).
The last transfer of each size is checked byte for byte against the pattern.

With --tandem-output, the file holds tandem-transport-bench's output from the same command
(--malloc tuned --path both); the script then prints one table: size, Tandem local link, Tandem
gRPC, Ray view, Ray owned, and local link / Ray view.
"""

import argparse
import os
import re
import statistics
import sys
import time

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # never reports anywhere
# Single-node mode: the node's address is the loopback one (Ray otherwise resolves 127.0.0.1 to the
# host's routable address), so every Ray server listens on 127.0.0.1 only.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402


def pattern(nbytes):
    """The bytes every size sends: a fixed pseudo-random sequence, as float32."""
    return np.random.default_rng(12345).integers(0, 256, size=nbytes, dtype=np.uint8).view(np.float32)


@ray.remote(num_cpus=0)
class Receiver:
    def __init__(self, max_bytes):
        self.expected = pattern(max_bytes)
        self.owned = torch.empty(max_bytes // 4, dtype=torch.float32)
        self.owned.fill_(0)  # touch every page before the clock runs

    def receive(self, refs, mode, check):
        array = ray.get(refs[0])
        if mode == "owned":
            n = array.shape[0]
            self.owned[:n].copy_(torch.from_numpy(array))
            held = self.owned[:n]
        else:
            held = torch.from_numpy(array)  # read-only view of the store's memory
        arrived = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ok = True
        if check:
            ok = bool(np.array_equal(held.numpy().view(np.uint8), self.expected[: held.numel()].view(np.uint8)))
        del array, held
        return arrived, ok


@ray.remote(num_cpus=0)
class Sender:
    def __init__(self, max_bytes, receiver):
        self.source = torch.from_numpy(pattern(max_bytes).copy())
        self.receiver = receiver

    def send(self, nbytes, mode, check):
        tensor = self.source[: nbytes // 4]
        start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ref = ray.put(tensor.numpy())
        arrived, ok = ray.get(self.receiver.receive.remote([ref], mode, check))
        del ref
        return (arrived - start) / 1e9, ok


def measure(sizes_mib, repeats):
    """GB/s per (mode, MiB). Per size: one warm-up of each mode, then the modes alternate."""
    max_bytes = max(sizes_mib) << 20
    receiver = Receiver.remote(max_bytes)
    sender = Sender.remote(max_bytes, receiver)
    results = {}
    for mib in sizes_mib:
        nbytes = mib << 20
        seconds = {"view": [], "owned": []}
        for i in range(repeats + 1):
            for mode in ("view", "owned"):
                elapsed, ok = ray.get(sender.send.remote(nbytes, mode, i == repeats))
                if not ok:
                    sys.exit(f"ray: the {mib} MiB transfer ({mode}) arrived with other bytes")
                if i > 0:
                    seconds[mode].append(elapsed)
        for mode, values in seconds.items():
            results[(mode, mib)] = nbytes / statistics.median(values) / 1e9
    return results


def listening_addresses(root_pid):
    """(address, port) of every socket a process under root_pid listens on (TCP) or binds (UDP)."""
    pids, frontier = set(), {root_pid}
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    while frontier:
        pid = frontier.pop()
        pids.add(pid)
        frontier.update(children.get(pid, []))
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table, listen_state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        with open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != listen_state or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                if len(raw) == 4:
                    text = ".".join(str(b) for b in raw[::-1])
                else:  # four little-endian 32-bit words
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    text = "::ffff:" + ".".join(str(b) for b in words[12:]) if words[:12] == b"\0" * 10 + b"\xff" * 2 \
                        else words.hex()
                found.append((text, int(port, 16)))
    return found


def parse_tandem(path):
    """GB/s per (path, MiB) from tandem-transport-bench's tables."""
    out, current = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("path: "):
                current = "local" if line.startswith("path: local link") else "grpc"
            m = re.match(r"\| (\d+) MiB \| ([0-9.]+) \|", line)
            if m and current:
                out[(current, int(m.group(1)))] = float(m.group(2))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tandem-output", help="tandem-transport-bench's output from the same run")
    args = parser.parse_args()

    ray.init(
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        num_cpus=2,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        listening = listening_addresses(os.getpid())
        exposed = [a for a in listening if a[0] not in ("127.0.0.1", "::ffff:127.0.0.1", "0" * 31 + "1")]
        if exposed:
            sys.exit(f"ray listens beyond loopback: {exposed}")
        results = measure(args.sizes_mib, args.repeats)
    finally:
        ray.shutdown()

    print(f"ray {ray.__version__}: {len(listening)} sockets of the Ray session listen, all on 127.0.0.1; "
          f"{args.repeats} timed transfers per size after one warm-up, median\n")
    if args.tandem_output:
        tandem = parse_tandem(args.tandem_output)
        print("| size | Tandem local link, GB/s | Tandem gRPC, GB/s | Ray object store (view), GB/s "
              "| Ray, copied into an owned tensor, GB/s | local link / Ray (view) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for mib in args.sizes_mib:
            local, grpc = tandem.get(("local", mib)), tandem.get(("grpc", mib))
            view, owned = results[("view", mib)], results[("owned", mib)]
            ratio = f"**{local / view:.2f}**" if local else "-"
            fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
            print(f"| {mib} MiB | {fmt(local)} | {fmt(grpc)} | {view:.2f} | {owned:.2f} | {ratio} |")
    else:
        print("| size | Ray object store (view), GB/s | Ray, copied into an owned tensor, GB/s |")
        print("| --- | --- | --- |")
        for mib in args.sizes_mib:
            print(f"| {mib} MiB | {results[('view', mib)]:.2f} | {results[('owned', mib)]:.2f} |")


if __name__ == "__main__":
    main()
