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

need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
[[ -x /usr/bin/time ]] || need+=(time)
command -v git >/dev/null 2>&1 || need+=(git)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v python3 >/dev/null 2>&1 || need+=(python3)
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

step cargo build --release -p mm-malloc
so="$(realpath "$TARGET_BASE/release/libmm_malloc.so")"

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

mkdir -p "$work/input"
cd "$work/input"

# Inputs.
awk -v n=$((400000 * SCALE)) 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "%08x %d line-%d\n", int(rand() * 4294967295), int(rand() * 1000), i }' >big.txt
cat >workload.py <<'PY'
import collections, json, re, threading, random, sys
random.seed(1)
scale = int(sys.argv[1])
d = {}
for i in range(60000 * scale):
    d["k%d" % i] = [i, str(i) * (i % 7), {"x": i}]
for i in range(0, len(d), 3):
    del d["k%d" % i]
s = json.dumps(d, sort_keys=True)
back = json.loads(s)
words = re.findall(r"k\d+", s)
c = collections.Counter(w[-1] for w in words)
out = []
def work(t):
    acc = []
    for i in range(20000 * scale):
        acc.append(bytes(random.Random(t * 1000 + i).randrange(1, 3000)))
        if len(acc) > 500:
            acc = acc[250:]
    out.append(sum(map(len, acc)))
ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(len(s), len(back), sorted(c.items()), sorted(out))
PY
cat >script.sql <<'SQL'
PRAGMA cache_size = -20000;
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
INSERT INTO t SELECT i, substr(printf('%x%x%x%x', i * 2654435761 % 4294967296, i * 40503, i * 7919, i), 1, i % 50 + 1) || printf('%08d', i), i * 0.5 FROM n;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(length(b)), sum(c) FROM t;
SELECT a, substr(b, -8) FROM t WHERE a % 20000 = 0 ORDER BY b;
UPDATE t SET b = b || 'x' WHERE a % 3 = 0;
DELETE FROM t WHERE a % 5 = 0;
SELECT count(*), max(length(b)) FROM t;
SELECT substr(b, 1, 2) AS k, count(*) FROM t GROUP BY k ORDER BY k LIMIT 10;
VACUUM;
SELECT count(*) FROM t;
SQL
cat >git.sh <<'SH'
set -e
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
export GIT_AUTHOR_NAME=ci GIT_AUTHOR_EMAIL=ci@example.com GIT_COMMITTER_NAME=ci GIT_COMMITTER_EMAIL=ci@example.com
git init -q -b main repo
cd repo
for i in $(seq 1 40); do
    seq $((i * 100)) $((i * 137)) >"f$((i % 7)).txt"
    printf 'commit %d\n' "$i" >>log.txt
    git add -A
    git commit -q -m "commit $i"
done
git log -p --stat | sha256sum
git gc -q --aggressive
git count-objects -v | grep -E '^(count|in-pack)'
git log --oneline | wc -l
git fsck --no-progress 2>&1 | sort | sha256sum
SH
cat >forks.sh <<'SH'
x=0
for i in $(seq 1 400); do
    y=$(echo "$i" | tr 0-9 a-j)
    x=$((x + ${#y}))
    (: "$y") &
    [ $((i % 50)) -eq 0 ] && wait
done
wait
echo "$x $y"
SH
cd - >/dev/null

export PYTHONMALLOC=malloc
compare python-workload python3 workload.py "$SCALE"
# (the random seed, load average and durations vary from run to run)
compare python-stdlib sh -c 'python3 -m test -q --randseed=1 test_json test_re test_collections test_dict test_set test_threading_local 2>&1 | grep -vE "random seed|load avg|duration|^[0-9:]+ "'
compare sqlite3 sqlite3 :memory: -init /dev/null ".read script.sql"
compare git bash git.sh
compare sort sort big.txt
compare sort-parallel sort --parallel=2 -S 32M -k2,2n -k1,1 big.txt
compare xz-T2 sh -c 'head -c 6000000 big.txt | xz -T2 -3 -c | xz -d | sha256sum'
compare forks bash forks.sh

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
