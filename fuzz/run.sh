#!/bin/sh
# Builds the libFuzzer harnesses with clang + ASan + UBSan and runs each for
# FUZZ_SECONDS (default 60) seeded with the committed corpus, then prints the
# executions run and the crashes found. New inputs go to a scratch corpus,
# never into fuzz/corpus; crash files land in the build dir.
#   fuzz/run.sh [harness...]            fuzz (default: every harness)
#   fuzz/run.sh --replay [harness...]   run each committed corpus once, no
#                                       fuzzing: one line per harness, exit 1
#                                       on any crash, leak or sanitizer report
#                                       (what CI runs)
# Harnesses: safetensors text_data gpt_resume gpt_sample.
# Env: FUZZ_SECONDS, FUZZ_BUILD (build dir, default build-fuzz), CC (clang),
# FUZZ_FLAGS (more libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" to go on
# past crashes and collect them all).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$src/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
mode=fuzz
if [ "${1:-}" = --replay ]; then
    mode=replay
    shift
fi
harnesses=${*:-safetensors text_data gpt_resume gpt_sample}

if [ ! -f "$build/build.ninja" ]; then
    CC=${CC:-clang} meson setup "$build" "$src" -Dwerror=true -Db_sanitize=address,undefined \
        -Db_lundef=false -Dblas=disabled -Dopenmp=disabled -Dbuildtype=debugoptimized >/dev/null
fi
targets=$(for h in $harnesses; do printf 'fuzz/fuzz_%s ' "$h"; done)
if ! ninja -C "$build" $targets >"$build/fuzz-ninja.log" 2>&1; then
    tail -40 "$build/fuzz-ninja.log"
    echo "fuzz harnesses did not build (is CC clang with libFuzzer?)" >&2
    exit 1
fi

# Any UBSan report is a failure, and leaks are checked by the harnesses too.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
# The GPT harnesses run the example, which talks on stderr about every
# checkpoint it refuses; libFuzzer's own lines and sanitizer reports still
# reach the log through the descriptor it keeps.
quiet_flag() {
    case $1 in
        gpt_*) echo -close_fd_mask=2 ;;
    esac
}

replay() {
    h=$1
    log=$build/fuzz-work/$h/replay.txt
    mkdir -p "$(dirname "$log")"
    inputs=$(find "$src/fuzz/corpus/$h" -type f | sort)
    count=$(echo "$inputs" | grep -c . || true)
    start=$(date +%s.%N)
    rc=0
    # shellcheck disable=SC2086
    "$build/fuzz/fuzz_$h" -runs=0 -timeout=30 $(quiet_flag "$h") $inputs >"$log" 2>&1 || rc=$?
    secs=$(echo "$(date +%s.%N) $start" | awk '{printf "%.1f", $1 - $2}')
    if [ "$rc" -eq 0 ] && [ "$count" -gt 0 ]; then
        echo "fuzz_$h: replayed $count corpus inputs in ${secs}s: ok"
        return 0
    fi
    echo "fuzz_$h: replayed $count corpus inputs: FAILED, exit $rc (log $log)"
    tail -40 "$log"
    return 1
}

fuzz() {
    h=$1
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
    # shellcheck disable=SC2086
    "$build/fuzz/fuzz_$h" "$work/corpus" "$src/fuzz/corpus/$h" $dict $(quiet_flag "$h") \
        ${FUZZ_FLAGS:-} -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$work/crashes/" -print_final_stats=1 \
        >"$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    # -fork=N prints no final stats; its progress lines start "#<executions>:"
    [ -n "$runs" ] || runs=$(sed -n 's/^#\([0-9]*\): .*/\1/p' "$log" | tail -1)
    crashes=$(find "$work/crashes" -type f | wc -l)
    echo "fuzz_$h: executions ${runs:-?}, crashes/timeouts/leaks found $crashes, exit $rc" \
         "(log $log)"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        tail -40 "$log"
        return 1
    fi
}

status=0
for h in $harnesses; do
    "$mode" "$h" || status=1
done
exit $status
