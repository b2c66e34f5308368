#!/usr/bin/env bash
# mm-malloc (crates/malloc) under real programs: each program runs plainly
# (glibc malloc) and under LD_PRELOAD=libmm_malloc.so, and the outputs
# must be identical. Programs: python3 (an allocation-heavy workload and
# a few stdlib test modules, PYTHONMALLOC=malloc so every object goes
# through malloc), sqlite3 (a SQL script), git (init, commits, log -p,
# gc of a scratch repository), sort of a large file, sort --parallel=2
# and xz -T2 (threads), and a fork-heavy shell loop. Missing programs are
# installed with apt-get as ci/kernel.sh installs qemu. A run under
# MM_STATS=1 checks that the preload is in effect.
#
# Environment: MALLOC_CI_SCALE (workload size factor, default 1).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "real programs under LD_PRELOAD=libmm_malloc.so, output compared with glibc's"
SCALE="${MALLOC_CI_SCALE:-1}"
export SCALE

need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
[[ -x /usr/bin/time ]] || need+=(time)
command -v git >/dev/null 2>&1 || need+=(git)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v strace >/dev/null 2>&1 || need+=(strace)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import test.support' 2>/dev/null; then
    v=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    need+=("libpython$v-testsuite")
fi
if [[ ${#need[@]} -gt 0 ]]; then
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        as_root=(sudo)
    fi
    step "${as_root[@]}" apt-get update -qq
    step "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

step cargo build --profile malloc -p mm-malloc
so="$(realpath "$TARGET_BASE/malloc/libmm_malloc.so")"
# The library's never-run code is linked apart (crates/malloc/build.rs's
# linker script), so fault-around does not map it into every process.
# (readelf's whole output is read first: `readelf | grep -q` under pipefail
# fails whenever grep exits on its match before readelf's last write, and
# readelf dies of SIGPIPE: 18 times in 200 here.)
if command -v readelf >/dev/null 2>&1 && [[ $(readelf -SW "$so") != *' .text.cold '* ]]; then
    echo "FAIL: no .text.cold section in $so (crates/malloc/build.rs's linker script)"
    exit 1
fi

# The C suite under the library's own profile: its checks of the code
# layout (the code a small process runs within one 64 KiB window: a
# shell's resident text of the library) hold for the optimised library
# only (ci/test.sh runs it in debug).
step cargo test -q --profile malloc -p mm-malloc --test c_suite

# GNU time for the figures (wall time, peak RSS).
timer=(/usr/bin/time -f '%e %M' -o)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=()
summary=()

# compare NAME CMD...: runs CMD in $work/NAME.{plain,mm} (fresh copies of
# $work/input), plainly and preloaded; stdout and the exit status must
# match.
compare() {
    local name=$1
    shift
    local d
    for mode in plain mm; do
        d="$work/$name.$mode"
        rm -rf "$d"
        cp -r "$work/input" "$d"
        local rc=0 pre=()
        if [[ $mode == mm ]]; then
            pre=(env "LD_PRELOAD=$so")
        fi
        (cd "$d" && "${timer[@]}" "$d.time" "${pre[@]}" "$@" >"$d.out" 2>"$d.err") || rc=$?
        echo "$rc" >"$d.rc"
        # wall seconds and peak RSS (KiB) of the program (the largest
        # process of the run, as GNU time reports it)
        read -r secs rss < <(tail -1 "$d.time" 2>/dev/null || echo "? ?")
        echo "$secs $rss" >"$d.stat"
        echo "  $name ($mode): exit $rc, $secs s, peak RSS $rss KiB, $(wc -c <"$d.out") bytes of output"
    done
    local p m
    read -r -a p <"$work/$name.plain.stat"
    read -r -a m <"$work/$name.mm.stat"
    local fig
    fig=$(awk -v ps="${p[0]}" -v pr="${p[1]}" -v ms="${m[0]}" -v mr="${m[1]}" 'BEGIN {
        if (pr + 0 > 0) printf "glibc %5.2f s %7.1f MiB   mm-malloc %5.2f s %7.1f MiB (RSS %.2fx)", ps, pr / 1024, ms, mr / 1024, mr / pr }')
    if cmp -s "$work/$name.plain.out" "$work/$name.mm.out" &&
        cmp -s "$work/$name.plain.rc" "$work/$name.mm.rc" &&
        [[ $(cat "$work/$name.plain.rc") == 0 ]]; then
        summary+=("$(printf '  %-16s identical   %s' "$name" "$fig")")
    else
        summary+=("$(printf '  %-16s DIFFERENT' "$name")")
        fails+=("$name")
        diff <(head -c 20000 "$work/$name.plain.out") <(head -c 20000 "$work/$name.mm.out") | head -20 || true
        echo "--- stderr under mm-malloc:"
        tail -20 "$work/$name.mm.err"
    fi
}

source crates/malloc/scripts/programs.sh
make_inputs "$work/input"
for p in "${PROGRAMS[@]}"; do
    compare "${p%%|*}" sh -c "${p#*|}"
done

# The preload is in effect (its report at exit), and glibc's malloc is not
# behind it (kmalloc-128: glibc's usable size for 100 bytes is 104).
report=$(MM_STATS=1 LD_PRELOAD="$so" python3 -c 'print(1)' 2>&1 >/dev/null)
if ! grep -q '^kmalloc-64 ' <<<"$report"; then
    echo "FAIL: no MM_STATS report under LD_PRELOAD"
    fails+=(mm-stats)
fi
if [[ $(LD_PRELOAD="$so" python3 -c 'import ctypes; l = ctypes.CDLL(None); l.malloc.restype = ctypes.c_void_p; l.malloc_usable_size.argtypes = [ctypes.c_void_p]; print(l.malloc_usable_size(l.malloc(100)))') != 128 ]]; then
    echo "FAIL: malloc_usable_size(malloc(100)) is not kmalloc-128's under LD_PRELOAD"
    fails+=(usable-size)
fi

echo
echo "summary:"
printf '%s\n' "${summary[@]}"
if [[ ${#fails[@]} -gt 0 ]]; then
    echo "FAIL: ${fails[*]}"
    exit 1
fi
ci_pass
