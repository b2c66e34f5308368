//! `slub-larson`: a Larson-style server churn on two threads, ops/s and
//! peak RSS, each allocator in its own child process (the runner
//! re-executed with [`LARSON_CHILD_FLAG`], through the shared machinery
//! of [`child`](super::child)).

use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::child::{
    cpus_arg, field, finish_child, names, parse_cpus, report_if_asked, run_child, run_on,
    runner_exe, HeapJob,
};
use super::heaps::{layout, Competitors, ObjHeap, GLOBAL_SLUB_ROW, PEERS};
use super::rss_kb;
use crate::measure::Verdict;
use crate::measure::{
    fmt_num, pin_current_thread, two_cpu_check, two_cpu_work, Case, Ctx, Report, Row, Spread, Stats,
};
use crate::tables::pages::verdict;
use crate::tables::Table;

/// The shape of one Larson run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LarsonParams {
    /// Threads, each pinned to its own CPU.
    pub threads: usize,
    /// Timed part.
    pub millis: u64,
    /// Slots per thread (each holds one live object).
    pub slots: usize,
    /// Random seed.
    pub seed: u64,
}

/// What one Larson run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LarsonResult {
    /// Replacements (one alloc + one free each), all threads.
    pub ops: u64,
    /// Timed seconds (the slowest thread's).
    pub secs: f64,
    /// Bytes live at the end (sum of the requested sizes).
    pub live: u64,
    /// VmRSS before the workload, KiB (0 in-process).
    pub rss0_kb: u64,
    /// VmHWM after the workload, KiB (0 in-process).
    pub hwm_kb: u64,
}

/// Smallest and largest object of the Larson churn.
pub const LARSON_SIZES: (usize, usize) = (16, 1024);

#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[inline(always)]
fn larson_new<A: ObjHeap>(a: &A, rng: &mut u64) -> *mut u8 {
    let span = (LARSON_SIZES.1 - LARSON_SIZES.0 + 1) as u64;
    let size = LARSON_SIZES.0 + (xorshift(rng) % span) as usize;
    let p = a.alloc(layout(size)).as_ptr();
    // SAFETY: a fresh object of at least 16 bytes aligned to 8: its size
    // goes in the first word (the freeing thread needs it for the Layout).
    unsafe { p.cast::<u64>().write(size as u64) };
    p
}

/// Frees a Larson object (its size is in its first word).
///
/// # Safety
///
/// `p` is a live object of `larson_new` on `a`, not used afterwards.
#[inline(always)]
unsafe fn larson_free<A: ObjHeap>(a: &A, p: *mut u8) {
    // SAFETY: the caller's contract: the first word holds the size.
    unsafe {
        let size = p.cast::<u64>().read() as usize;
        a.free(NonNull::new_unchecked(p), layout(size));
    }
}

/// Runs the churn on `a` (see the [SLUB tables](super)); `keep` leaves the objects
/// allocated at the end (a child process about to exit), else they are
/// freed.
pub fn larson_run<A: ObjHeap>(
    a: &A,
    p: &LarsonParams,
    cpus: &[usize],
    pin: bool,
    keep: bool,
) -> LarsonResult {
    let total = p.threads * p.slots;
    let slots: Vec<AtomicPtr<u8>> = (0..total)
        .map(|_| AtomicPtr::new(core::ptr::null_mut()))
        .collect();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(p.threads + 1);
    let end = Barrier::new(p.threads);
    let results: Vec<(u64, f64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let (slots, stop, start, end) = (&slots, &stop, &start, &end);
                s.spawn(move || {
                    if pin && !cpus.is_empty() {
                        let _ = pin_current_thread(cpus[t % cpus.len()]);
                    }
                    a.enter_thread(t);
                    let mut rng =
                        p.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1)) | 1;
                    let own = t * p.slots;
                    for s in &slots[own..own + p.slots] {
                        s.store(larson_new(a, &mut rng), Ordering::Relaxed);
                    }
                    start.wait();
                    let t0 = Instant::now();
                    let mut ops = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            let r = xorshift(&mut rng);
                            let i = if r & 7 == 0 {
                                ((r >> 3) % total as u64) as usize
                            } else {
                                own + ((r >> 3) % p.slots as u64) as usize
                            };
                            let new = larson_new(a, &mut rng);
                            let old = slots[i].swap(new, Ordering::AcqRel);
                            // SAFETY: taken out of its slot by the swap: ours
                            // alone, a live object of `larson_new`.
                            unsafe { larson_free(a, old) };
                        }
                        ops += 64;
                    }
                    let secs = t0.elapsed().as_secs_f64();
                    end.wait();
                    let live: u64 = slots[own..own + p.slots]
                        .iter()
                        // SAFETY: every thread stopped (barrier): the slots
                        // hold live objects with their size in the first word.
                        .map(|s| unsafe { s.load(Ordering::Acquire).cast::<u64>().read() })
                        .sum();
                    if !keep {
                        for s in &slots[own..own + p.slots] {
                            // SAFETY: as above; each slot freed once, by its
                            // region's owner.
                            unsafe { larson_free(a, s.load(Ordering::Acquire)) };
                        }
                    }
                    (ops, secs, live)
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_millis(p.millis));
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    LarsonResult {
        ops: results.iter().map(|r| r.0).sum(),
        secs: results.iter().map(|r| r.1).fold(0.0, f64::max),
        live: results.iter().map(|r| r.2).sum(),
        rss0_kb: 0,
        hwm_kb: 0,
    }
}

/// The hidden flag that makes the runner a Larson child.
pub const LARSON_CHILD_FLAG: &str = "--slub-larson-child";

struct LarsonJob<'a> {
    p: LarsonParams,
    cpus: &'a [usize],
    pin: bool,
    keep: bool,
}

impl HeapJob for LarsonJob<'_> {
    type Out = LarsonResult;

    fn run<A: ObjHeap>(&mut self, a: &Arc<A>) -> LarsonResult {
        let (rss0, _) = rss_kb();
        let mut r = larson_run(&**a, &self.p, self.cpus, self.pin, self.keep);
        r.rss0_kb = rss0;
        r.hwm_kb = rss_kb().1;
        r
    }
}

/// Runs `name`'s Larson churn in this process.
fn larson_in_process(
    comp: &Competitors,
    name: &str,
    p: LarsonParams,
    cpus: &[usize],
    pin: bool,
    keep: bool,
) -> Option<LarsonResult> {
    let job = LarsonJob { p, cpus, pin, keep };
    run_on(comp, name, job)
}

/// The runner's hidden child mode: `mm-bench --slub-larson-child NAME
/// THREADS MILLIS SLOTS SEED CPUS` (CPUS `0,1` or `-` for unpinned) runs
/// one allocator's Larson churn and prints one `larson ...` line. `None`
/// when the arguments are not a child's (the runner goes on as usual).
pub fn larson_child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(LARSON_CHILD_FLAG) {
        return None;
    }
    let parse = || -> Option<(String, LarsonParams, Vec<usize>)> {
        let name = args.get(1)?.clone();
        let p = LarsonParams {
            threads: args.get(2)?.parse().ok()?,
            millis: args.get(3)?.parse().ok()?,
            slots: args.get(4)?.parse().ok()?,
            seed: args.get(5)?.parse().ok()?,
        };
        let cpus = parse_cpus(args.get(6)?)?;
        Some((name, p, cpus))
    };
    let Some((name, p, cpus)) = parse() else {
        eprintln!("mm-bench {LARSON_CHILD_FLAG}: bad arguments {args:?}");
        return Some(ExitCode::from(2));
    };
    if std::env::var_os("XX_EARLY").is_some() {
        let _ = local_lock::rseq::available();
    }
    let comp = Competitors::new();
    let pin = !cpus.is_empty();
    let r = larson_in_process(&comp, &name, p, &cpus, pin, true);
    report_if_asked(&name);
    let fields = r.map(|r| {
        [
            ("ops", r.ops.to_string()),
            ("secs", r.secs.to_string()),
            ("live", r.live.to_string()),
            ("rss0_kb", r.rss0_kb.to_string()),
            ("hwm_kb", r.hwm_kb.to_string()),
        ]
    });
    finish_child(
        LARSON_CHILD_FLAG,
        &name,
        "larson",
        fields.as_ref().map(|f| &f[..]),
    )
}

/// Parses a child's `larson ...` line.
pub fn parse_larson_line(s: &str) -> Option<LarsonResult> {
    Some(LarsonResult {
        ops: field(s, "larson", "ops")?,
        secs: field(s, "larson", "secs")?,
        live: field(s, "larson", "live")?,
        rss0_kb: field(s, "larson", "rss0_kb")?,
        hwm_kb: field(s, "larson", "hwm_kb")?,
    })
}

/// Runs `name` in a child process (the runner binary re-executed), or in
/// this process if there is no runner binary to re-execute (the
/// result's RSS fields are then 0).
fn larson_child(
    comp: &Competitors,
    name: &str,
    p: LarsonParams,
    cpus: &[usize],
    pin: bool,
) -> Option<LarsonResult> {
    if let Some(exe) = runner_exe() {
        let cpu_arg = if pin && cpus.len() >= 2 {
            cpus_arg(&cpus[..2])
        } else {
            cpus_arg(&[])
        };
        let args = [
            LARSON_CHILD_FLAG.to_string(),
            name.to_string(),
            p.threads.to_string(),
            p.millis.to_string(),
            p.slots.to_string(),
            p.seed.to_string(),
            cpu_arg,
        ];
        // A generous deadline: a run takes `millis` and its start-up.
        let timeout = Duration::from_millis(p.millis) + Duration::from_secs(60);
        return match run_child(&exe, &args, timeout) {
            Ok(out) => parse_larson_line(&out),
            Err(e) => {
                eprintln!("mm-bench: larson child for {name}: {e}");
                None
            }
        };
    }
    let mut r = larson_in_process(comp, name, p, cpus, pin, false)?;
    r.rss0_kb = 0;
    r.hwm_kb = 0;
    Some(r)
}

/// The `slub-larson` table (see the [SLUB tables](super)).
pub struct SlubLarson;

impl Table for SlubLarson {
    fn name(&self) -> &'static str {
        "slub-larson"
    }

    fn about(&self) -> &'static str {
        "Larson-style churn on two threads (random 16..1024 B, a quarter of frees remote), ops/s and peak RSS, one child process per allocator: GlobalSlub, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let names = names(&comp);
        let cpus: Vec<usize> = cx.machine.allowed_cpus.iter().copied().take(2).collect();
        let pin = cx.cfg.pin;
        let (rounds, millis) = if cx.cfg.quick {
            (1, 150)
        } else if cx.cfg.full {
            (cx.cfg.rounds.clamp(1, 5), 600)
        } else {
            (cx.cfg.rounds.clamp(1, 3), 400)
        };
        let p = LarsonParams {
            threads: 2,
            millis,
            slots: 8192,
            seed: 0x5eed_1a25_0000_0001,
        };
        // Yardstick for the two-CPU check: about 5 ms of arithmetic.
        let work = two_cpu_work(Duration::from_millis(5));

        let mut res: Vec<Vec<LarsonResult>> = vec![Vec::new(); names.len()];
        let mut ratios = Vec::new();
        for round in 0..rounds {
            ratios.push(two_cpu_check(&cpus, pin, work));
            for k in 0..names.len() {
                let i = (round + k) % names.len();
                let seed = p.seed.wrapping_add(round as u64);
                if let Some(r) =
                    larson_child(&comp, names[i], LarsonParams { seed, ..p }, &cpus, pin)
                {
                    res[i].push(r);
                }
            }
        }
        let two_cpu = Spread::of(&ratios).map(|s| s.median);
        let section = format!(
            "{} threads x {} slots, random {}..={} B, {} ms per run, one child process per run",
            p.threads, p.slots, LARSON_SIZES.0, LARSON_SIZES.1, p.millis
        );
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        for (name, rs) in names.iter().zip(&res) {
            if rs.is_empty() {
                continue;
            }
            // ns per replacement per thread.
            let ns: Vec<f64> = rs
                .iter()
                .map(|r| r.secs * 1e9 * p.threads as f64 / r.ops.max(1) as f64)
                .collect();
            let mops: Vec<f64> = rs.iter().map(|r| r.ops as f64 / r.secs / 1e6).collect();
            let hwm: Vec<f64> = rs.iter().map(|r| r.hwm_kb as f64 / 1024.0).collect();
            let foot: Vec<f64> = rs
                .iter()
                .map(|r| r.hwm_kb.saturating_sub(r.rss0_kb) as f64 / 1024.0)
                .collect();
            let live =
                rs.iter().map(|r| r.live as f64).sum::<f64>() / rs.len() as f64 / (1 << 20) as f64;
            let (Some(ns), Some(mops), Some(hwm), Some(foot)) = (
                Spread::of(&ns),
                Spread::of(&mops),
                Spread::of(&hwm),
                Spread::of(&foot),
            ) else {
                continue;
            };
            let note = if hwm.median > 0.0 {
                format!(
                    "{} Mops/s; peak RSS {} MiB, {} MiB above the child's start, for {} MiB live",
                    fmt_num(mops.median),
                    fmt_num(hwm.median),
                    fmt_num(foot.median),
                    fmt_num(live)
                )
            } else {
                format!(
                    "{} Mops/s (in-process: no per-allocator RSS)",
                    fmt_num(mops.median)
                )
            };
            summary.push((*name, mops.median, foot.median, live));
            rows.push(Row {
                case: Case::raw(*name, |_, _| {})
                    .threads(p.threads)
                    .section(section.clone())
                    .note(note),
                stats: Stats {
                    ns,
                    cycles: None,
                    iters: rs.iter().map(|r| r.ops).sum::<u64>() / rs.len() as u64,
                    rounds: rs.len(),
                    two_cpu,
                    remeasured: false,
                    flags: Vec::new(),
                },
            });
        }
        let mut notes = vec![
            "each thread owns a region of the slot array and replaces a random slot of it (7 in 8) or of the other thread's \
             region (1 in 8) with a new object of a random size: alloc, write its size in the first word, swap it in, free \
             the old one (Layout from its first word); about a quarter of the frees are of objects the other thread allocated. \
             ns/op = wall time per replacement per thread; Mops/s counts both threads."
                .to_string(),
            "peak RSS: each allocator in its own child process (the runner re-executed with a hidden flag), VmHWM at the end; \
             'above the start' subtracts VmRSS before the workload (the runner's own pages). The no_std heaps' arenas are \
             MAP_NORESERVE: only touched pages count."
                .to_string(),
            "summary (targets, reported not asserted: GlobalSlub's ops/s >= the best peer's; footprint):".to_string(),
        ];
        for (name, mops, foot, live) in &summary {
            notes.push(format!(
                "  {name:<36} {:>7} Mops/s  {:>7} MiB footprint  ({:.2}x the live bytes)",
                fmt_num(*mops),
                fmt_num(*foot),
                if *live > 0.0 { foot / live } else { f64::NAN }
            ));
        }
        let best = summary
            .iter()
            .filter(|s| PEERS.contains(&s.0))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let mut verdicts = Vec::new();
        if let (Some(s), Some(b)) = (summary.iter().find(|s| s.0 == GLOBAL_SLUB_ROW), best) {
            verdicts.push(
                Verdict::at_least("GlobalSlub >= best peer", s.1, b.1, "Mops/s")
                    .vs_peer(s.1 / b.1)
                    .on(&rows, &[GLOBAL_SLUB_ROW, b.0]),
            );
            notes.push(format!(
                "GlobalSlub {} Mops/s vs best peer {} {} Mops/s: {}",
                fmt_num(s.1),
                b.0,
                fmt_num(b.1),
                verdict(s.1 >= b.1)
            ));
        }
        Report {
            table: "slub-larson",
            title: "Larson-style server churn on two CPUs: throughput and peak RSS".into(),
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
    fn larson_runs_and_frees() {
        let comp = Competitors::new();
        let p = LarsonParams {
            threads: 2,
            millis: 20,
            slots: 64,
            seed: 1,
        };
        for name in [GLOBAL_SLUB_ROW, "talc (spin lock)", "rpmalloc"] {
            let r = larson_in_process(&comp, name, p, &[], false, false).expect("a competitor");
            assert!(r.ops > 0 && r.secs > 0.0, "{name}");
            assert!(r.live >= 2 * 64 * 16 && r.live <= 2 * 64 * 1024, "{name}");
        }
        let line = "larson ops=10 secs=0.5 live=100 rss0_kb=3 hwm_kb=9\n";
        assert_eq!(
            parse_larson_line(line),
            Some(LarsonResult {
                ops: 10,
                secs: 0.5,
                live: 100,
                rss0_kb: 3,
                hwm_kb: 9
            })
        );
    }
}
