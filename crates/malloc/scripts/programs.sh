# shellcheck shell=bash
# The programs of ci/malloc.sh (output compared with glibc's) and of
# crates/malloc/scripts/bench.sh (wall time and peak RSS against glibc,
# mimalloc and jemalloc): sourced by both.
#
# make_inputs DIR: writes the inputs into DIR (a 16 MB text file to sort,
# a python workload, a SQL script, a git session, a fork-heavy loop).
# PROGRAMS: "name|command" lines, each run with DIR (a fresh copy) as its
# working directory. SCALE (default 1) scales the inputs.

make_inputs() {
    mkdir -p "$1"
    (
        cd "$1"

# Inputs.
awk -v n=$((400000 * ${SCALE:-1})) 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "%08x %d line-%d\n", int(rand() * 4294967295), int(rand() * 1000), i }' >big.txt
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
    )
}

export PYTHONMALLOC=malloc
# (python-stdlib: the random seed, load average and durations vary from
# run to run and are left out)
PROGRAMS=(
    "python-workload|python3 workload.py ${SCALE:-1}"
    "python-stdlib|python3 -m test -q --randseed=1 test_json test_re test_collections test_dict test_set test_threading_local 2>&1 | grep -vE 'random seed|load avg|duration|^[0-9:]+ '"
    "sqlite3|sqlite3 :memory: -init /dev/null '.read script.sql'"
    "git|bash git.sh"
    "sort|sort big.txt"
    "sort-parallel|sort --parallel=2 -S 32M -k2,2n -k1,1 big.txt"
    "xz-T2|head -c 6000000 big.txt | xz -T2 -3 -c | xz -d | sha256sum"
    "forks|bash forks.sh"
)
