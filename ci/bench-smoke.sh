#!/usr/bin/env bash
# The benchmark runner in its quick mode: every table runs end to end and
# writes its CSV and JSON lines (figures are not judged here).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "cargo run --release -p mm-bench -- --quick"

step cargo run --release -p mm-bench -- --quick

out="$TARGET_BASE/mm-bench"
for t in $(cargo run --release -q -p mm-bench -- --list | awk '{print $1}'); do
    for ext in csv jsonl; do
        f="$out/$t.$ext"
        if [[ ! -s $f ]]; then
            echo "FAIL: table $t wrote no $f"
            exit 1
        fi
    done
    echo "table $t: $(($(wc -l <"$out/$t.csv") - 1)) rows in $out/$t.csv"
done

ci_pass
