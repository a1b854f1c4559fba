#!/usr/bin/env bash
# Tessera's all-reduce against Open MPI's own MPI_Allreduce, side by side.
#
#   scripts/allreduce-vs-mpi.sh [BENCH ARGS...]     e.g. --quick, --elements 16Mi
#
# Builds `tessera` with the MPI transport (`--features mpi --release`), then
# runs `tessera bench allreduce --json` three times with the same sizes:
#
#   1. the thread transport (2 and 4 ranks as threads; 2 only with --quick);
#   2. `mpirun -n 2 ... --transport mpi`;
#   3. `mpirun -n 4 --oversubscribe ... --transport mpi` (skipped with --quick).
#
# Each MPI run times, in the same processes and on the same buffers, Tessera's
# all-reduce over MpiCommunicator (every algorithm, and the cost model's
# choice `auto`) and MPI_Allreduce (MPI_SUM, MPI_FLOAT). The JSON lines are
# kept in $OUT (default target/allreduce-vs-mpi/) and joined, with jq, into
# one table per rank count: MPI_Allreduce's time beside Tessera's over MPI
# and over threads, and MPI_Allreduce's time over each (above 1: Tessera is
# faster). Without jq the three runs' JSON lines are printed as they are.
#
# Extra mpirun options go in MPIRUN_ARGS, for instance Open MPI's choice of
# MPI_Allreduce algorithm (4 = ring):
#   MPIRUN_ARGS="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4"
#
# Needs Open MPI (Debian: openmpi-bin libopenmpi-dev) and libclang-dev for the
# bindings. As root, mpirun needs --allow-run-as-root, and with more ranks
# than cores --oversubscribe (4 ranks on 2 cores, where the processes then
# compete for the cores): both are added when needed.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-target/allreduce-vs-mpi}
mkdir -p "$OUT"

cargo build --release --features mpi --bin tessera
bin=${CARGO_TARGET_DIR:-target}/release/tessera

root_args=()
if [ "$(id -u)" = 0 ]; then
    root_args=(--allow-run-as-root)
fi

ranks=(2 4)
for a in "$@"; do
    if [ "$a" = --quick ]; then
        ranks=(2)
    fi
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores" >&2
echo "threads: $bin bench allreduce --json $*" >&2
"$bin" bench allreduce --json "$@" >"$OUT/threads.jsonl"
for p in "${ranks[@]}"; do
    # shellcheck disable=SC2206 # MPIRUN_ARGS is a list of words on purpose
    mpirun_args=(-n "$p" "${root_args[@]}" ${MPIRUN_ARGS:-})
    if [ "$p" -gt "$(nproc)" ]; then
        mpirun_args+=(--oversubscribe)
    fi
    echo "mpi: mpirun ${mpirun_args[*]} $bin bench allreduce --transport mpi --json $*" >&2
    mpirun "${mpirun_args[@]}" "$bin" bench allreduce --transport mpi --json "$@" \
        >"$OUT/mpi-$p.jsonl"
done

if ! command -v jq >/dev/null; then
    echo "jq not found: the raw records follow" >&2
    cat "$OUT/threads.jsonl" "$OUT"/mpi-*.jsonl
    exit 0
fi

for p in "${ranks[@]}"; do
    echo
    echo "== $p ranks: time per all-reduce in us; 'x' = MPI_Allreduce time / Tessera's (above 1: Tessera faster)"
    jq -rs --argjson p "$p" '
        def name: .kernel | sub("^allreduce_"; "") | sub("_p[0-9]+(_mpi)?$"; "");
        def us: . * 1e6 | . * 10 | round / 10;
        def x($ref): ($ref / .) * 100 | round / 100;
        (map(select(.kernel | test("_p\($p)_mpi$")))) as $mpi
        | (map(select(.kernel | test("_p\($p)$")))) as $thr
        | ["bytes", "MPI_Allreduce", "mpi auto", "x", "mpi best", "x", "(algorithm)",
           "threads auto", "x", "threads best", "x", "(algorithm)"],
          ($mpi | map(.elements) | unique | .[] as $n
           | ($mpi | map(select(.elements == $n))) as $m
           | ($thr | map(select(.elements == $n))) as $t
           | ($m[0].reference_seconds) as $ref
           | ($m | map(select(name == "auto"))[0]) as $ma
           | ($m | min_by(.seconds)) as $mb
           | ($t | map(select(name == "auto"))[0]) as $ta
           | ($t | min_by(.seconds)) as $tb
           | [$n * 4, ($ref | us),
              ($ma.seconds | us), ($ma.seconds | x($ref)),
              ($mb.seconds | us), ($mb.seconds | x($ref)), ($mb | name),
              ($ta.seconds // null | if . then us else "-" end),
              ($ta.seconds // null | if . then x($ref) else "-" end),
              ($tb.seconds // null | if . then us else "-" end),
              ($tb.seconds // null | if . then x($ref) else "-" end),
              ($tb // null | if . then name else "-" end)])
        | @tsv' "$OUT/threads.jsonl" "$OUT/mpi-$p.jsonl" | column -t -s $'\t'
done
