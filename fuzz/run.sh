#!/bin/sh
# Builds the libFuzzer harnesses with clang + ASan + UBSan and runs each for
# FUZZ_SECONDS (default 60) seeded with the committed corpus, then prints the
# executions run and the crashes found. New inputs go to a scratch corpus,
# never into fuzz/corpus; crash files land in the build dir.
#   fuzz/run.sh [harness...]      (harnesses: safetensors text_data)
# Env: FUZZ_SECONDS, FUZZ_BUILD (build dir, default build-fuzz), CC (clang).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$src/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
harnesses=${*:-safetensors text_data}

if [ ! -f "$build/build.ninja" ]; then
    CC=${CC:-clang} meson setup "$build" "$src" -Db_sanitize=address,undefined \
        -Db_lundef=false -Dblas=disabled -Dopenmp=disabled -Dbuildtype=debugoptimized
fi
ninja -C "$build" $(for h in $harnesses; do printf 'fuzz/fuzz_%s ' "$h"; done)

# Any UBSan report is a failure, and leaks are checked by the harnesses too.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
status=0
for h in $harnesses; do
    case $h in
        safetensors) max_len=65536 ;;
        *) max_len=4096 ;;
    esac
    work=$build/fuzz-work/$h
    mkdir -p "$work/corpus" "$work/crashes"
    log=$work/log.txt
    echo "== fuzz_$h: ${seconds}s, max_len $max_len"
    dict=
    [ -f "$src/fuzz/$h.dict" ] && dict=-dict=$src/fuzz/$h.dict
    rc=0
    "$build/fuzz/fuzz_$h" "$work/corpus" "$src/fuzz/corpus/$h" $dict \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/crashes/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    crashes=$(find "$work/crashes" -type f | wc -l)
    echo "fuzz_$h: executions ${runs:-?}, crashes/timeouts/leaks found $crashes, exit $rc" \
         "(log $log)"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        status=1
        tail -40 "$log"
    fi
done
exit $status
