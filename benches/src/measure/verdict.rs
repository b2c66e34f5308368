//! Verdicts (a table's targets, met or missed) and the checks that flag
//! rows a reader should not trust: noisy rounds, a floor slower than an
//! allocator, a two-thread row whose second CPU was busy.

use std::fmt::Write as _;

use super::{fmt_num, Config, Report, Row, NOISY};

/// The two-CPU check below which a two-thread row is flagged: the second
/// thread did not have a CPU of its own most of the time.
pub const TWO_CPU_MIN: f64 = 1.8;

/// The outcome of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// The target was missed.
    Missed,
    /// A row it depends on was noisy: no verdict.
    Noisy,
    /// The target was met.
    Met,
}

impl Status {
    /// `MISSED`, `noisy` or `met`.
    pub fn label(self) -> &'static str {
        match self {
            Status::Missed => "MISSED",
            Status::Noisy => NOISY,
            Status::Met => "met",
        }
    }
}

/// One target of a table (what its own summary prints as met/MISSED),
/// in a form the run's summary, the charts and the history share.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The table (filled by [`Report::check`]).
    pub table: &'static str,
    /// What is compared, e.g. `N = 64: pcp best <= best peer`.
    pub what: String,
    /// Our figure.
    pub measured: f64,
    /// The figure it must reach.
    pub target: f64,
    /// Unit of both (`ns/page`, `Mobj/s`, `x`).
    pub unit: &'static str,
    /// `true`: met when `measured >= target`; `false`: when `<=`.
    pub higher_is_better: bool,
    /// Our speed relative to the best peer (`> 1`: faster than it), when
    /// the target compares against peers.
    pub vs_best_peer: Option<f64>,
    /// The rows (section, name) the figures come from: a noisy one makes
    /// the verdict [`Status::Noisy`], a flagged one adds a warning.
    pub rows: Vec<(String, String)>,
    /// Set by [`Report::check`].
    pub status: Status,
    /// Flags of the rows it depends on (set by [`Report::check`]).
    pub warnings: Vec<String>,
}

impl Verdict {
    fn new(what: impl Into<String>, measured: f64, target: f64, unit: &'static str) -> Self {
        Verdict {
            table: "",
            what: what.into(),
            measured,
            target,
            unit,
            higher_is_better: false,
            vs_best_peer: None,
            rows: Vec::new(),
            status: Status::Met,
            warnings: Vec::new(),
        }
        .judged()
    }

    /// A target met when `measured <= target` (times, ratios of times).
    pub fn at_most(
        what: impl Into<String>,
        measured: f64,
        target: f64,
        unit: &'static str,
    ) -> Self {
        Self::new(what, measured, target, unit)
    }

    /// A target met when `measured >= target` (throughputs).
    pub fn at_least(
        what: impl Into<String>,
        measured: f64,
        target: f64,
        unit: &'static str,
    ) -> Self {
        Verdict {
            higher_is_better: true,
            ..Self::new(what, measured, target, unit)
        }
        .judged()
    }

    /// Our speed relative to the best peer (`> 1`: faster).
    pub fn vs_peer(mut self, speed: f64) -> Self {
        self.vs_best_peer = Some(speed);
        self
    }

    /// Depends on the rows called `names` in `rows` (all sections of it).
    pub fn on(self, rows: &[Row], names: &[&str]) -> Self {
        self.on_where(rows, |r| names.contains(&r.case.name.as_str()))
    }

    /// Depends on the rows of `rows` that `pick` picks.
    pub fn on_where(mut self, rows: &[Row], pick: impl Fn(&Row) -> bool) -> Self {
        for r in rows.iter().filter(|r| pick(r)) {
            self.rows
                .push((r.case.section.clone(), r.case.name.clone()));
        }
        self
    }

    /// Whether the figures meet the target.
    pub fn met(&self) -> bool {
        if self.higher_is_better {
            self.measured >= self.target
        } else {
            self.measured <= self.target
        }
    }

    fn judged(mut self) -> Self {
        self.status = if self.met() {
            Status::Met
        } else {
            Status::Missed
        };
        self
    }

    /// `measured / target` in the direction of the target (`>= 1`: met).
    pub fn margin(&self) -> f64 {
        if self.higher_is_better {
            self.measured / self.target
        } else {
            self.target / self.measured
        }
    }
}

impl Report {
    /// Flags the rows a reader should not trust and settles the verdicts:
    ///
    /// * a row whose rounds still spread beyond [`Config::noise`] (after
    ///   the runner's re-measure) is flagged `noisy`, and every verdict on
    ///   it becomes [`Status::Noisy`] (no verdict);
    /// * a floor row ([`Case::floor`](super::Case::floor)) slower than an
    ///   allocator row of its section flags both and adds a warning;
    /// * a two-thread row whose two-CPU check is below [`TWO_CPU_MIN`] is
    ///   flagged, with one warning per table.
    ///
    /// Returns nothing; the warnings are in [`Report::warnings`].
    pub fn check(&mut self, cfg: &Config) {
        let table = self.table;
        for r in self.rows.iter_mut() {
            r.stats.flags.clear();
            let sp = r.stats.spread_ratio();
            if cfg.noise > 1.0 && sp > cfg.noise {
                r.stats.flags.push(format!(
                    "{NOISY} (max/min {}x{})",
                    fmt_num(sp),
                    if r.stats.remeasured {
                        " after re-measure"
                    } else {
                        ""
                    }
                ));
            }
        }
        // Floors: per section, the floor must be the fastest row.
        let mut floor_flags: Vec<(usize, String)> = Vec::new();
        for (i, f) in self.rows.iter().enumerate() {
            if !f.case.floor {
                continue;
            }
            let faster: Vec<usize> = (0..self.rows.len())
                .filter(|&j| {
                    let r = &self.rows[j];
                    !r.case.floor
                        && r.case.section == f.case.section
                        && r.stats.ns.median < f.stats.ns.median
                })
                .collect();
            let Some(&fastest) = faster.iter().min_by(|&&a, &&b| {
                self.rows[a]
                    .stats
                    .ns
                    .median
                    .total_cmp(&self.rows[b].stats.ns.median)
            }) else {
                continue;
            };
            for &j in &faster {
                floor_flags.push((j, format!("faster than the floor '{}'", f.case.name)));
            }
            floor_flags.push((i, format!("floor slower than {} row(s)", faster.len())));
            self.warnings.push(format!(
                "{table}: floor '{}' ({} ns) slower than {} row(s) of '{}' (fastest '{}', {} ns): the rounds were disturbed, the floor does not measure what it should, or (memory-bound floors) that allocator's access pattern moves lines more cheaply than the floor's (README, issue #21)",
                f.case.name,
                fmt_num(f.stats.ns.median),
                faster.len(),
                f.case.section,
                self.rows[fastest].case.name,
                fmt_num(self.rows[fastest].stats.ns.median),
            ));
        }
        for (i, flag) in floor_flags {
            if !self.rows[i].stats.flags.contains(&flag) {
                self.rows[i].stats.flags.push(flag);
            }
        }
        let mut low: Vec<f64> = Vec::new();
        for r in self.rows.iter_mut() {
            if let Some(x) = r.stats.two_cpu.filter(|&x| x < TWO_CPU_MIN) {
                r.stats.flags.push(format!("2cpu {x:.2}x < {TWO_CPU_MIN}x"));
                low.push(x);
            }
        }
        if !low.is_empty() {
            let lo = low.iter().copied().fold(f64::INFINITY, f64::min);
            self.warnings.push(format!(
                "{table}: {} two-thread row(s) with the two-CPU check below {TWO_CPU_MIN}x (lowest {lo:.2}x): the second CPU was busy, their figures are time sharing, not scaling",
                low.len()
            ));
        }
        for v in self.verdicts.iter_mut() {
            v.table = table;
            *v = v.clone().judged();
            v.warnings.clear();
            for (section, name) in &v.rows {
                let Some(r) = self
                    .rows
                    .iter()
                    .find(|r| &r.case.section == section && &r.case.name == name)
                else {
                    continue;
                };
                for f in &r.stats.flags {
                    if f.starts_with(NOISY) {
                        v.status = Status::Noisy;
                    }
                    let w = format!("{name}: {f}");
                    if !v.warnings.contains(&w) {
                        v.warnings.push(w);
                    }
                }
            }
        }
    }

    /// The verdicts as text lines (for the table's own printout).
    pub fn verdict_lines(&self) -> String {
        let mut out = String::new();
        for v in &self.verdicts {
            let _ = writeln!(out, "  {}", verdict_line(v));
        }
        out
    }
}

/// One verdict as a line: status, what, measured vs target, ratio to the
/// best peer, warnings.
pub fn verdict_line(v: &Verdict) -> String {
    let mut s = format!(
        "{:<6}  {:<14} {:<58} {:>9} {} {:>9} {:<8}",
        v.status.label(),
        v.table,
        v.what,
        fmt_num(v.measured),
        if v.higher_is_better { ">=" } else { "<=" },
        fmt_num(v.target),
        v.unit,
    );
    match v.vs_best_peer {
        Some(x) => {
            let _ = write!(s, "  {:>6}x best peer", fmt_num(x));
        }
        None => s.push_str("                  "),
    }
    if !v.warnings.is_empty() {
        let _ = write!(s, "  [{}]", v.warnings.join("; "));
    }
    s.trim_end().to_string()
}

/// The run's verdicts in summary order: missed first, then noisy, then
/// met; within each, in table order.
pub fn summary_order(verdicts: &[Verdict]) -> Vec<&Verdict> {
    let mut v: Vec<&Verdict> = verdicts.iter().collect();
    v.sort_by_key(|x| x.status);
    v
}
