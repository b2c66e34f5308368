//! `malloc-programs` (issue #18): real programs under the C drop-in
//! (`mm-malloc`, `LD_PRELOAD`), glibc's malloc, and mimalloc and jemalloc
//! where their shared libraries are installed: wall time and peak RSS per
//! program, medians of interleaved rounds, and the ratios to glibc.
//!
//! The programs and the rounds are `crates/malloc/scripts/bench.sh`'s (the
//! programs of `ci/malloc.sh`, whose output is compared with glibc's);
//! this table runs it with `RAW=` and reads one line per run. It needs the
//! source tree (the script, `cargo` to build `libmm_malloc.so`) and the
//! programs themselves; a program that fails or is missing is left out
//! with a note. Not part of the default run (the programs take minutes):
//! `--table malloc-programs`, or `--full`; `--quick` runs two short
//! programs once (the CI smoke).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::Table;
use crate::measure::{fmt_num, Case, Ctx, Report, Row, Spread, Stats, Verdict};

/// The table.
pub struct MallocPrograms;

/// The allocators in the order the script runs them.
const ALLOCATORS: [&str; 4] = ["glibc", "mm-malloc", "mimalloc", "jemalloc"];

/// Programs of `--quick`.
const QUICK_PROGRAMS: &str = "sort sqlite3";

/// One run as the script writes it: `program allocator secs kib ok`.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Program name.
    pub program: String,
    /// Allocator name.
    pub allocator: String,
    /// Wall time, seconds.
    pub secs: f64,
    /// Peak RSS, KiB.
    pub kib: f64,
    /// The program exited successfully.
    pub ok: bool,
}

/// Parses the script's `RAW` lines (malformed lines are skipped).
pub fn parse_runs(text: &str) -> Vec<Run> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 {
                return None;
            }
            Some(Run {
                program: f[0].to_string(),
                allocator: f[1].to_string(),
                secs: f[2].parse().ok()?,
                kib: f[3].parse().ok()?,
                ok: f[4] == "1",
            })
        })
        .collect()
}

/// Medians per (program, allocator) of the successful runs: (secs, MiB),
/// and the programs that failed under some allocator.
#[allow(clippy::type_complexity)]
pub fn medians(
    runs: &[Run],
) -> (
    BTreeMap<(String, String), (Spread, Spread)>,
    Vec<(String, String)>,
) {
    let mut by: BTreeMap<(String, String), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut failed = Vec::new();
    for r in runs {
        let k = (r.program.clone(), r.allocator.clone());
        if !r.ok {
            if !failed.contains(&k) {
                failed.push(k);
            }
            continue;
        }
        let e = by.entry(k).or_default();
        e.0.push(r.secs);
        e.1.push(r.kib / 1024.0);
    }
    let m = by
        .into_iter()
        .filter(|(k, _)| !failed.contains(k))
        .filter_map(|(k, (s, m))| Some((k, (Spread::of(&s)?, Spread::of(&m)?))))
        .collect();
    (m, failed)
}

/// Geometric mean of `xs` (1.0 when empty).
pub fn geomean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 1.0;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

impl Table for MallocPrograms {
    fn name(&self) -> &'static str {
        "malloc-programs"
    }

    fn about(&self) -> &'static str {
        "issue #18: real programs (python3, sqlite3, git, sort, xz -T2, forks) under LD_PRELOAD=libmm_malloc.so, glibc, mimalloc, jemalloc: wall time and peak RSS (not in the default run)"
    }

    fn in_default_run(&self) -> bool {
        false
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/malloc/scripts/bench.sh");
        let raw = cx.cfg.out_dir.join("malloc-programs.raw");
        let _ = std::fs::create_dir_all(&cx.cfg.out_dir);
        let _ = std::fs::remove_file(&raw);
        let rounds = if cx.cfg.quick {
            1
        } else {
            cx.cfg.rounds.clamp(1, 3)
        };
        let mut cmd = Command::new("bash");
        cmd.arg(&script).arg(rounds.to_string()).env("RAW", &raw);
        if cx.cfg.quick {
            cmd.env("ONLY", QUICK_PROGRAMS);
        }
        let mut notes = vec![format!(
            "{} {rounds} (RAW={}): rounds interleave the allocators program by program; wall time (s) and peak RSS (MiB, the \
             largest process of the run, GNU time) are medians of the rounds; ns/op = the wall time of one run",
            script.display(),
            raw.display()
        )];
        let status = cmd.status();
        let text = std::fs::read_to_string(&raw).unwrap_or_default();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => notes.push(format!("the script exited with {s}")),
            Err(e) => notes.push(format!("could not run the script: {e}")),
        }
        let (med, failed) = medians(&parse_runs(&text));
        for (p, a) in &failed {
            notes.push(format!("{p} failed under {a} (left out; is it installed?)"));
        }
        let programs: Vec<String> = {
            let mut v: Vec<String> = med.keys().map(|k| k.0.clone()).collect();
            v.dedup();
            v
        };
        let mut rows = Vec::new();
        let mut verdicts = Vec::new();
        let mut time_ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for p in &programs {
            let Some(&(gs, gm)) = med.get(&(p.clone(), "glibc".to_string())) else {
                continue;
            };
            for a in ALLOCATORS {
                let Some(&(s, m)) = med.get(&(p.clone(), a.to_string())) else {
                    continue;
                };
                let (tr, mr) = (s.median / gs.median, m.median / gm.median);
                time_ratios.entry(a).or_default().push(tr);
                let ns = |x: Spread| Spread {
                    median: x.median * 1e9,
                    min: x.min * 1e9,
                    max: x.max * 1e9,
                };
                rows.push(Row {
                    case: Case::raw(a, |_, _| {})
                        .section(format!("{p} (ns per run)"))
                        .note(format!(
                            "{} s ({tr:.2}x glibc), peak RSS {} MiB ({mr:.2}x glibc)",
                            fmt_num(s.median),
                            fmt_num(m.median)
                        )),
                    stats: Stats {
                        ns: ns(s),
                        cycles: None,
                        iters: 1,
                        rounds,
                        two_cpu: None,
                        remeasured: false,
                        flags: Vec::new(),
                    },
                });
                if a == "mm-malloc" {
                    verdicts.push(Verdict::at_most(
                        format!("{p}: mm-malloc peak RSS <= 1.1x glibc's"),
                        mr,
                        1.1,
                        "x glibc",
                    ));
                }
            }
        }
        let gm: BTreeMap<&str, f64> = time_ratios.iter().map(|(a, v)| (*a, geomean(v))).collect();
        notes.push(format!(
            "geometric mean of wall time over the programs, x glibc: {}",
            gm.iter()
                .map(|(a, g)| format!("{a} {g:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let (Some(&m), Some(&mi)) = (gm.get("mm-malloc"), gm.get("mimalloc")) {
            verdicts.push(
                Verdict::at_most(
                    "mm-malloc: geometric mean of wall time <= mimalloc's",
                    m,
                    mi,
                    "x glibc",
                )
                .vs_peer(mi / m),
            );
        }
        Report {
            table: "malloc-programs",
            title: "Real programs under the C drop-in: wall time and peak RSS against glibc, mimalloc, jemalloc".into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_parse_and_failures_are_left_out() {
        let text =
            "sort glibc 0.20 36000 1\nsort glibc 0.22 36100 1\nsort mm-malloc 0.21 38000 1\n\
                    git mm-malloc 1.0 9000 0\ngit glibc 1.0 8000 1\nbad line\n";
        let runs = parse_runs(text);
        assert_eq!(runs.len(), 5);
        let (m, failed) = medians(&runs);
        assert_eq!(failed, vec![("git".to_string(), "mm-malloc".to_string())]);
        let (s, r) = m[&("sort".to_string(), "glibc".to_string())];
        assert!((s.median - 0.21).abs() < 1e-9 && (s.min - 0.20).abs() < 1e-9);
        assert!((r.median - 36050.0 / 1024.0).abs() < 1e-9);
        assert!(!m.contains_key(&("git".to_string(), "mm-malloc".to_string())));
        assert!((geomean(&[2.0, 0.5]) - 1.0).abs() < 1e-12);
        assert_eq!(geomean(&[]), 1.0);
    }
}
