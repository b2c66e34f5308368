#!/usr/bin/env bash
# The benchmark runner in its quick mode: every table runs end to end and
# writes its CSV and JSON lines and its SVG chart, index.html shows every
# chart, and the run is appended to history.jsonl (figures are not judged
# here).
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
    if ! grep -q '<svg' "$out/$t.svg" 2>/dev/null; then
        echo "FAIL: table $t wrote no chart $out/$t.svg"
        exit 1
    fi
    if ! grep -q "src=\"$t.svg\"" "$out/index.html"; then
        echo "FAIL: $out/index.html does not show the chart of $t"
        exit 1
    fi
    echo "table $t: $(($(wc -l <"$out/$t.csv") - 1)) rows in $out/$t.csv, chart $out/$t.svg"
done
if ! tail -n 1 "$out/history.jsonl" | grep -q '"type":"run"'; then
    echo "FAIL: no run appended to $out/history.jsonl"
    exit 1
fi

ci_pass
