#!/usr/bin/env bash
# malloc-programs: the programs of ci/malloc.sh (scripts/programs.sh) under
# glibc's malloc, mm-malloc, and mimalloc and jemalloc where their shared
# libraries are installed (Debian: libmimalloc2.0, libjemalloc2; pass
# --install to apt-get them), each by LD_PRELOAD. Rounds interleave the
# allocators (program by program, round by round); each cell is the median
# of the rounds' wall time and peak RSS (GNU time, the largest process of
# the run), with the ratio to glibc; the last line is the geometric mean
# of the time ratios.
#
#   bash crates/malloc/scripts/bench.sh [--install] [ROUNDS]
#
# Environment: SCALE (input size factor, default 1), MM_MALLOC_SO (default:
# the release build, built first), ONLY (space-separated program names:
# run only these), RAW (a file: one line "program allocator secs kib ok"
# per run is appended to it, ok 1 or 0; mm-bench's malloc-programs table
# reads it), EXTRA (space-separated NAME=PATH: more libraries preloaded
# in the same interleaved rounds, e.g. a variant of mm-malloc to compare).
set -euo pipefail
cd "$(dirname "$0")/../../.."
if [[ ${1:-} == --install ]]; then
    shift
    apt-get install -y -qq libmimalloc2.0 libjemalloc2 >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq libmimalloc2.0 libjemalloc2 >/dev/null; }
fi
ROUNDS=${1:-3}
if [[ -z ${MM_MALLOC_SO:-} ]]; then
    cargo build -q --profile malloc -p mm-malloc
    MM_MALLOC_SO=$(realpath "${CARGO_TARGET_DIR:-target}/malloc/libmm_malloc.so")
fi
names=(glibc mm-malloc)
libs=("" "$MM_MALLOC_SO")
for cand in mimalloc:libmimalloc.so.2 jemalloc:libjemalloc.so.2; do
    # (awk reads everything: an early exit would SIGPIPE ldconfig)
    f=$(ldconfig -p | awk -v l="${cand#*:}" '$1 == l && !f { f = $NF } END { if (f) print f }')
    if [[ -n $f ]]; then
        names+=("${cand%%:*}")
        libs+=("$f")
    fi
done
for e in ${EXTRA:-}; do
    names+=("${e%%=*}")
    libs+=("$(realpath "${e#*=}")")
done

source crates/malloc/scripts/programs.sh
if [[ -n ${ONLY:-} ]]; then
    keep=()
    for p in "${PROGRAMS[@]}"; do
        [[ " $ONLY " == *" ${p%%|*} "* ]] && keep+=("$p")
    done
    PROGRAMS=("${keep[@]}")
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make_inputs "$work/input"

# run PROGRAM_INDEX ALLOCATOR_INDEX: one timed run; appends "secs kib".
run() {
    local p=${PROGRAMS[$1]} d="$work/run"
    rm -rf "$d"
    cp -r "$work/input" "$d"
    local pre=()
    [[ -n ${libs[$2]} ]] && pre=(env "LD_PRELOAD=${libs[$2]}")
    local ok=1 t0 t1
    # Wall time from bash's microsecond clock around the run (GNU time's
    # %e has 10 ms steps: 7% of sort's 0.15 s, which decided its ratio);
    # GNU time for the peak RSS (%M, of the run's largest process).
    t0=$EPOCHREALTIME
    (cd "$d" && /usr/bin/time -f '%M' -o "$d.time" "${pre[@]}" sh -c "${p#*|}" >/dev/null 2>&1) ||
        { echo "warning: ${p%%|*} under ${names[$2]} failed" >&2; ok=0; }
    t1=$EPOCHREALTIME
    local line
    line="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }') $(tail -1 "$d.time")"
    echo "$line" >>"$work/r.$1.$2"
    if [[ -n ${RAW:-} ]]; then
        echo "${p%%|*} ${names[$2]} $line $ok" >>"$RAW"
    fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-16s' program
for n in "${names[@]}"; do printf ' | %-28s' "$n: s, MiB (x glibc)"; done
echo
for i in "${!PROGRAMS[@]}"; do
    for ((r = 0; r < ROUNDS; r++)); do
        for a in "${!names[@]}"; do run "$i" "$a"; done
    done
    printf '%-16s' "${PROGRAMS[$i]%%|*}"
    gs=$(awk '{print $1}' "$work/r.$i.0" | median)
    gr=$(awk '{print $2}' "$work/r.$i.0" | median)
    for a in "${!names[@]}"; do
        s=$(awk '{print $1}' "$work/r.$i.$a" | median)
        m=$(awk '{print $2}' "$work/r.$i.$a" | median)
        echo "$a $s $gs" >>"$work/ratios"
        printf ' | %6.3f %6.1f (%4.2f, %4.2f)' "$s" "$(awk -v k="$m" 'BEGIN{print k/1024}')" \
            "$(awk -v a="$s" -v b="$gs" 'BEGIN{print (b > 0 ? a / b : 0)}')" \
            "$(awk -v a="$m" -v b="$gr" 'BEGIN{print (b > 0 ? a / b : 0)}')"
    done
    echo
done
printf '%-16s' "geomean time"
for a in "${!names[@]}"; do
    printf ' | %-28s' "$(awk -v a="$a" '$1 == a && $3 > 0 && $2 > 0 { s += log($2 / $3); n++ } END { printf "%.3f x glibc", exp(s / n) }' "$work/ratios")"
done
echo
