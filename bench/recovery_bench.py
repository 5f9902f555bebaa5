#!/usr/bin/env python3
"""What a failure costs: the main job run three ways in one command, with `tandem run`.

  1. no failures (the baseline);
  2. an actor killed (SIGKILL) every --every seconds, restarts from the last checkpoint;
  3. the same kills with failure.snapshot_every, restarts from the snapshots in peers' memory.

`tandem run` reports each death to its coordinator and starts the actor again; the job restarts on
it. For each run: wall time, the steps it completed, failures, step efficiency (steps completed per
second against the failure-free run's), and per failure the recovery time (from the kill to the
end of the first step trained after the restart) and the steps trained again. A run with failures
stops after --cap times the baseline's wall time: restarts from a checkpoint that come faster than
the run reaches its next checkpoint undo all progress, and such a run never ends.

  bench/recovery_bench.py [--tandem build/tandem] [--spec examples/shapes_vlm.json]
                          [--every 30] [--snapshot-every 50] [--cap 3] [--out DIR]

Needs only Python's standard library and a built `tandem`. Results: bench/README.md.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time


def children(pid):
    """The actor processes `tandem run` started: (pid, its arguments)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"actor" in args:
            found.append((int(entry), [a.decode() for a in args]))
    return found


def last_step(metrics):
    """The last step record of metrics.jsonl (0 if none): its tail is enough."""
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        match = re.match(r'\{"step":(\d+),', line)
        if match:
            return int(match.group(1))
    return 0


def run(tandem, spec_path, run_dir, log_path, kill_every, deadline_s):
    """Runs the job, killing an actor every `kill_every` seconds (0: never), for `deadline_s` at
    most (a run whose restarts undo its progress faster than it is made never ends); returns its
    wall time, per failure (recovery seconds, steps trained again), and the steps it completed."""
    with open(log_path, "w") as log:
        start = time.monotonic()
        process = subprocess.Popen([tandem, "run", spec_path, "--run-dir", run_dir],
                                   stdout=log, stderr=subprocess.STDOUT)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    failures = []  # per kill: seconds to recover, steps trained again
    next_kill = start + kill_every if kill_every > 0 else None
    victim = 0
    # A kill not recovered yet: (time, step at the kill, attempts seen before, and once the next
    # began, (time, its last step) at each look).
    pending = None
    while process.poll() is None:
        now = time.monotonic()
        if now - start > deadline_s:
            completed = last_step(metrics)
            process.send_signal(signal.SIGTERM)  # cancels the job and stops the actors
            process.wait()
            return now - start, failures, completed
        attempts = []  # per attempt the job began: the step it resumed at
        if pending or (next_kill and now >= next_kill):
            with open(log_path) as f:
                for line in f:
                    if "assigned: vision" in line:
                        attempts.append(0)
                    resumed = re.search(r"resumed from .*? at step (\d+)", line)
                    if resumed and attempts:
                        attempts[-1] = int(resumed.group(1))
        if pending:
            killed_at, step_at_kill, seen, seen_steps = pending
            if len(attempts) > seen:
                # The next attempt began: metrics.jsonl was cut back to where it resumed before,
                # and its "resumed from" line (if it has one) follows "assigned" at once.
                seen_steps.append((now, last_step(metrics)))
                if now - seen_steps[0][0] > 0.5:
                    resumed = attempts[seen]
                    done = [t for t, step in seen_steps if step > resumed]
                    if done:
                        failures.append((done[0] - killed_at, step_at_kill - resumed))
                        pending = None
        elif next_kill and now >= next_kill:
            actors = sorted(children(process.pid))
            if actors:
                pid, _ = actors[victim % len(actors)]
                victim += 1
                pending = (time.monotonic(), last_step(metrics), len(attempts), [])
                os.kill(pid, signal.SIGKILL)
            next_kill = now + kill_every
        time.sleep(0.1)
    wall = time.monotonic() - start
    if process.returncode != 0:
        raise SystemExit(f"{run_dir}: tandem run exited {process.returncode}; see {log_path}")
    return wall, failures, last_step(metrics)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tandem", default="build/tandem")
    parser.add_argument("--spec", default="examples/shapes_vlm.json")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between kills")
    parser.add_argument("--snapshot-every", type=int, default=50,
                        help="failure.snapshot_every of the third run")
    parser.add_argument("--out", default=None, help="where the runs go (default: a temp dir)")
    parser.add_argument("--cap", type=float, default=3.0,
                        help="a run with failures stops after this many times the baseline's "
                             "wall time, keeping the steps it completed")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="tandem-recovery-")
    os.makedirs(out, exist_ok=True)
    with open(args.spec) as f:
        base = json.load(f)
    checkpoint_every = base.get("schedule", {}).get("checkpoint_every", 0)
    runs = [("no failures", 0, 0),
            (f"restart from the checkpoint (every {checkpoint_every} steps)", args.every, 0),
            (f"recovery from memory (snapshot_every {args.snapshot_every})", args.every,
             args.snapshot_every)]
    results = []
    deadline = 3600.0
    for i, (what, every, snapshots) in enumerate(runs):
        spec = json.loads(json.dumps(base))
        spec.setdefault("failure", {})["max_restarts"] = 1000
        spec["failure"]["snapshot_every"] = snapshots
        spec_path = os.path.join(out, f"run{i}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        print(f"{what}: running...", file=sys.stderr, flush=True)
        wall, failures, completed = run(args.tandem, spec_path, os.path.join(out, f"run{i}"),
                                        os.path.join(out, f"run{i}.log"), every, deadline)
        if i == 0:
            deadline = args.cap * wall
        results.append((what, wall, failures, completed))
    baseline_rate = results[0][3] / results[0][1]
    print("| run | wall s | steps done | failures | step efficiency | recovery s (mean, max) "
          "| steps trained again (mean) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for what, wall, failures, completed in results:
        recover = [f[0] for f in failures]
        again = [f[1] for f in failures]
        mean = lambda v: sum(v) / len(v) if v else 0.0
        print(f"| {what} | {wall:.1f} | {completed} | {len(failures)} | "
              f"{completed / wall / baseline_rate:.0%} | "
              f"{mean(recover):.1f}, {max(recover, default=0):.1f} | {mean(again):.0f} |")
    print(f"(runs in {out})", file=sys.stderr)


if __name__ == "__main__":
    main()
