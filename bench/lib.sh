# Sourced by every benchmark (POSIX sh). BENCH_SMOKE=1 is the smoke mode that scripts/test runs
# (scripts/test.d/bench-smoke.sh): debug builds (the tests built them already), tiny sizes and
# seconds. Its figures mean nothing; it proves that the benchmark still starts and measures.
BENCH_SMOKE=${BENCH_SMOKE:-0}
if [ "$BENCH_SMOKE" = 1 ]; then BENCH_PROFILE=debug; else BENCH_PROFILE=release; fi
# Where the binaries of the benchmark's profile are.
BENCH_TARGET=${CARGO_TARGET_DIR:-target}/$BENCH_PROFILE
# bench_build CARGO-BUILD-ARGUMENTS...: builds what the benchmark runs, in its profile.
bench_build() {
    if [ "$BENCH_SMOKE" = 1 ]; then
        cargo build --quiet --locked "$@" >&2
    else
        cargo build --quiet --release --locked "$@" >&2
    fi
}
# bench_size SMOKE NORMAL: the size for the mode.
bench_size() {
    if [ "$BENCH_SMOKE" = 1 ]; then echo "$1"; else echo "$2"; fi
}
