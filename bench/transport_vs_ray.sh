#!/usr/bin/env bash
# Tandem's data plane against Ray's object store on one host, in one command and one table:
# tandem-transport-bench (a sender process to a receiver process over a local link and over gRPC on
# 127.0.0.1, with the malloc tuning the actors run with), then bench/ray_transport.py (ray.put in
# one Ray actor, ray.get of the ObjectRef in another, Ray bound to 127.0.0.1), the same float32
# sizes and repeats.
#
#   bench/transport_vs_ray.sh [--sizes-mib 1 16 64] [--repeats 5]
#
# The tandem binary comes from $TANDEM_BUILD_DIR (default build/), Python from $PYTHON (default
# .venv/bin/python, with bench/requirements.txt installed).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=(1 16 64)
repeats=5
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes-mib) shift; sizes=(); while [ $# -gt 0 ] && [[ "$1" != --* ]]; do sizes+=("$1"); shift; done ;;
    --repeats) repeats="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "transport_vs_ray.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench="${TANDEM_BUILD_DIR:-build}/bench/tandem-transport-bench"
python="${PYTHON:-.venv/bin/python}"
[ -x "$bench" ] || { echo "transport_vs_ray.sh: $bench is missing (scripts/build)" >&2; exit 1; }
"$python" -c 'import ray, torch, numpy' 2>/dev/null ||
  { echo "transport_vs_ray.sh: $python lacks ray (pip install -r bench/requirements.txt)" >&2; exit 1; }
work="$(mktemp -d /tmp/tandem-transport-vs-ray-XXXXXX)"
trap 'rm -rf "$work"' EXIT

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" --sizes-mib "${sizes[@]}" --repeats "$repeats" --malloc tuned --path both > "$work/tandem.txt"
"$python" bench/ray_transport.py --sizes-mib "${sizes[@]}" --repeats "$repeats" \
  --tandem-output "$work/tandem.txt" 2> "$work/ray.err" || { cat "$work/ray.err" >&2; exit 1; }
echo
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
  "load average before / after: $load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
