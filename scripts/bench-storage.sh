#!/usr/bin/env bash
# Storage benchmark, one run, one file system, pinned with taskset:
#   1. fio: the disk's sequential direct-IO write limit (io_uring, O_DIRECT, 1 MiB x qd 8 and
#      4 MiB x qd 2, the sizes the flusher uses);
#   2. borges-storage append throughput for 1 KiB, 16 KiB and 1 MiB batches under each
#      durability policy (none, interval, fsync = group commit), acknowledged at AckLevel::All;
#   3. recovery time of a partition of --recovery-gib GiB after SIGKILL of its writer, and the
#      open time of the same log after a clean shutdown.
#
#   scripts/bench-storage.sh [--cpu N] [--dir DIR] [--append-mib N] [--recovery-gib N]
#
# --dir must be on the disk to measure (default: target/bench-storage in this checkout); it is
# emptied afterwards. Results go to stdout and DIR/../bench-storage-results.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

cpu=1
dir="$ROOT/target/bench-storage"
append_mib=1024
recovery_gib=10
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --append-mib) append_mib="$2"; shift 2 ;;
        --recovery-gib) recovery_gib="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

if ! command -v fio >/dev/null; then
    apt-get update -qq && apt-get install -y -qq fio
fi
mkdir -p "$dir"
out="$(dirname "$dir")/bench-storage-results.md"

cargo bench -p borges-storage --bench storage --no-run 2>&1 | tail -1

{
    echo "# borges-storage benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "- machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)"
    echo "- file system: $(df -T "$dir" | awk 'NR==2 {print $2, $1}')"
    echo "- pinned: taskset -c $cpu; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "## fio sequential direct-IO write limit"
    echo
    echo "| fio | MB/s |"
    echo "|---|---|"
    for cfg in "1M 8" "4M 2"; do
        set -- $cfg
        mbps=$(taskset -c "$cpu" fio --name=seq --filename="$dir/fio.dat" --rw=write --bs="$1" \
            --iodepth="$2" --ioengine=io_uring --direct=1 --size=4G --output-format=json 2>/dev/null \
            | python3 -c "import json,sys; print(round(json.load(sys.stdin)['jobs'][0]['write']['bw_bytes']/1e6))")
        rm -f "$dir/fio.dat"
        echo "| write bs=$1 iodepth=$2 io_uring O_DIRECT, 4 GiB | $mbps |"
    done
    echo
    echo "## borges-storage appends"
    echo
    echo "Each configuration appends $append_mib MiB in produce requests of ~64 KiB (one buffer split"
    echo "into its batches), one partition, one core; MB/s until the last append is acknowledged at"
    echo "AckLevel::All (= synced under fsync, flushed otherwise)."
    echo
    taskset -c "$cpu" cargo bench -q -p borges-storage --bench storage -- \
        --dir "$dir" --append-mib "$append_mib" --recovery-gib "$recovery_gib"
    echo
    echo "## fio again, after the appends (the disk's speed drifts on a shared host)"
    echo
    echo "| fio | MB/s |"
    echo "|---|---|"
    mbps=$(taskset -c "$cpu" fio --name=seq --filename="$dir/fio.dat" --rw=write --bs=1M \
        --iodepth=8 --ioengine=io_uring --direct=1 --size=4G --output-format=json 2>/dev/null \
        | python3 -c "import json,sys; print(round(json.load(sys.stdin)['jobs'][0]['write']['bw_bytes']/1e6))")
    rm -f "$dir/fio.dat"
    echo "| write bs=1M iodepth=8 io_uring O_DIRECT, 4 GiB | $mbps |"
    echo
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
rm -rf "$dir"
