//! The measurement machinery every table shares.
//!
//! # Method
//!
//! Modelled on the kernel's `time_bench` (which seed 000 quotes) with the
//! robustness of criterion, for a small shared machine:
//!
//! 1. A competitor is a [`Case`]: a body that performs the operation `iters`
//!    times in a loop monomorphised around it (the operation is inlined into
//!    the loop; only the batch goes through a `dyn` call). A body that must
//!    leave set-up or tear-down untimed (free what it allocated) times
//!    itself with [`Stopwatch`]es ([`Case::custom`]).
//! 2. **Calibration**: `iters` is chosen per case so one batch lasts about
//!    [`Config::batch`], from the slope between two batch sizes (a
//!    two-thread batch also pays a fixed cost for starting its threads).
//! 3. **Warm-up**: every case runs batches, round robin, for
//!    [`Config::warmup`] (caches, branch predictors, frequency, lazy slots).
//! 4. **Interleaved rounds**: in each of [`Config::rounds`] rounds every case
//!    runs one batch, the order rotated by one each round (A B C, B C A,
//!    C A B, ...), never AAA BBB: a burst of load from another process hits
//!    every competitor alike instead of one of them.
//! 5. **Statistics**: per case the median over rounds, with min and max as
//!    the spread, of ns/op (wall clock, `CLOCK_MONOTONIC` through
//!    [`Instant`]) and of TSC cycles/op (`rdtsc`; the TSC rate is calibrated
//!    against the wall clock and printed with the machine facts). As in
//!    `time_bench`, the loop overhead is not subtracted: a `for_loop` row
//!    shows it.
//! 6. **Pinning**: the measuring thread is pinned to one CPU
//!    ([`pin_current_thread`]); a case with two threads pins them to two
//!    different CPUs, and each round also runs [`two_cpu_check`] (pure
//!    arithmetic on one and on two threads), whose median speed-up is printed
//!    beside every two-thread figure: `2.00x` means both CPUs were really
//!    ours, `1.0x` means the second thread got no CPU of its own and the
//!    two-thread figure measures time sharing, not scaling.
//!
//! 7. **Noise**: a case whose rounds spread beyond [`Config::noise`]
//!    (slowest / fastest) is measured again with twice the rounds;
//!    [`Report::check`] flags what still spreads (no verdict on it), floors
//!    slower than an allocator, and two-thread rows whose two-CPU check is
//!    below [`TWO_CPU_MIN`].
//!
//! 8. **Alloc-N-then-free-N**: the tables that allocate N items, then free
//!    them (seed 000's shape: pages, zeroed pages, SLUB objects) share one
//!    loop, [`alloc_free_case`], which times the two phases apart with a
//!    [`Clock`] (`rdtsc` at each phase boundary) into [`Phases`].
//!
//! # Output
//!
//! A [`Report`] prints as an aligned text table and is written as CSV and
//! JSON lines (one `machine` record, then one record per row) under the
//! output directory (default `target/mm-bench/`).

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Keeps the optimiser from deleting or hoisting a computation
/// (`core::hint::black_box`).
pub use core::hint::black_box;

mod phases;
mod verdict;
pub use phases::{
    alloc_free_case, alloc_free_round, alloc_free_rounds_case, per_item, phase_note, with_phases,
    AllocFree, Clock, Phases,
};
pub use verdict::{summary_order, verdict_line, Status, Verdict, TWO_CPU_MIN};

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// How long and how often to measure, and where to write results.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--quick`: the CI smoke mode (whole runner in a few seconds).
    pub quick: bool,
    /// Target duration of one batch of one case.
    pub batch: Duration,
    /// Round-robin warm-up time per table.
    pub warmup: Duration,
    /// Interleaved rounds per table (the median is over these).
    pub rounds: usize,
    /// Pin the measuring thread(s) to CPUs.
    pub pin: bool,
    /// Directory for the CSV and JSON-lines files.
    pub out_dir: PathBuf,
    /// Noise threshold: a case whose rounds spread more than this
    /// (slowest / fastest) is measured again with twice the rounds, and
    /// flagged noisy (excluded from the verdicts) if it still does.
    /// `1.0` or below: never.
    pub noise: f64,
    /// `--full`: every size and shape of the tables (the default run takes
    /// a subset of the sweeps; see [`Config::sweep`]).
    pub full: bool,
}

impl Config {
    /// The full run: 10 ms batches, 15 rounds.
    pub fn full() -> Self {
        Config {
            quick: false,
            batch: Duration::from_millis(10),
            warmup: Duration::from_millis(300),
            rounds: 15,
            pin: true,
            out_dir: default_out_dir(),
            noise: DEFAULT_NOISE,
            full: true,
        }
    }

    /// The default run (a coffee break: about 3 minutes on two CPUs):
    /// 4 ms batches, 9 rounds, the sweeps thinned ([`Config::full`] false).
    pub fn standard() -> Self {
        Config {
            batch: Duration::from_millis(4),
            warmup: Duration::from_millis(60),
            rounds: 9,
            full: false,
            ..Self::full()
        }
    }

    /// The CI smoke run: 0.5 ms batches, 5 rounds.
    pub fn quick() -> Self {
        Config {
            quick: true,
            batch: Duration::from_micros(500),
            warmup: Duration::from_millis(20),
            rounds: 5,
            full: false,
            ..Self::full()
        }
    }

    /// The run's name: `quick`, `default` or `full`.
    pub fn mode(&self) -> &'static str {
        if self.quick {
            "quick"
        } else if self.full {
            "full"
        } else {
            "default"
        }
    }

    /// `quick`, `default` or `full` of a sweep (sizes, N values) by mode.
    pub fn sweep<T: Clone>(&self, quick: &[T], default: &[T], full: &[T]) -> Vec<T> {
        if self.quick {
            quick.to_vec()
        } else if self.full {
            full.to_vec()
        } else {
            default.to_vec()
        }
    }
}

/// The default [`Config::noise`]: rounds whose slowest is more than twice
/// the fastest are measured again.
pub const DEFAULT_NOISE: f64 = 2.0;

/// `$CARGO_TARGET_DIR/mm-bench` if set at run time, else the workspace's
/// `target/mm-bench`.
pub fn default_out_dir() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join("target"),
    };
    target.join("mm-bench")
}

// ---------------------------------------------------------------------------
// Clocks and CPUs
// ---------------------------------------------------------------------------

/// The time stamp counter (`rdtsc`), or `None` where there is none.
#[inline(always)]
pub fn tsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86-64 (user-mode reads are
        // allowed unless CR4.TSD is set, which Linux does not do by default).
        #[allow(unused_unsafe)]
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// TSC ticks per nanosecond, measured against the wall clock over `span`
/// (`None` without a TSC).
pub fn calibrate_tsc(span: Duration) -> Option<f64> {
    let t0 = Instant::now();
    let c0 = tsc()?;
    while t0.elapsed() < span {
        core::hint::spin_loop();
    }
    let c1 = tsc()?;
    let ns = t0.elapsed().as_nanos() as f64;
    Some((c1.wrapping_sub(c0)) as f64 / ns)
}

/// The CPUs this process may run on (`sched_getaffinity`).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, core::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, the size of the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread to `cpu` (`sched_setaffinity`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    allow_current_thread(&[cpu])
}

/// Lets the calling thread run on the CPUs of `cpus` only
/// (`sched_setaffinity`; one CPU: [`pin_current_thread`]). A thread
/// inherits its creator's CPUs, so an unpinned worker of a pinned thread
/// (or of a child process the pinned runner started) calls this with every
/// allowed CPU to be unpinned again.
pub fn allow_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no cpu, or a cpu id too large",
        ));
    }
    // SAFETY: as in `allowed_cpus`.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the
    // calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pure arithmetic (a non-linear recurrence nothing can vectorise or fold),
/// the yardstick of [`two_cpu_check`].
#[inline(never)]
pub fn arithmetic(work: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..work {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x ^= x >> 29;
    }
    black_box(x)
}

/// Steps of [`arithmetic`] that take about `target` on this CPU now (at
/// least 4096): the `work` of [`two_cpu_check`] for the tables that run it
/// themselves (the child-process tables).
pub fn two_cpu_work(target: Duration) -> u64 {
    let t = Instant::now();
    arithmetic(1 << 16);
    let per = t.elapsed().as_nanos().max(1) as f64 / (1u64 << 16) as f64;
    ((target.as_nanos() as f64 / per) as u64).max(1 << 12)
}

/// Runs `work` steps of [`arithmetic`] on one thread, on two threads at
/// once (pinned to `cpus[0]` and `cpus[1]` if `pin`), and on one thread
/// again, and returns the speed-up `2 * t1 / t2` (`t1` the mean of the
/// one-thread runs, `t2` the slower of the pair): 2.0 when two CPUs are
/// really available, 1.0 when the two threads share one.
pub fn two_cpu_check(cpus: &[usize], pin: bool, work: u64) -> f64 {
    let run = |threads: usize| -> f64 {
        let barrier = Barrier::new(threads);
        let times: Vec<f64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        if pin && !cpus.is_empty() {
                            let _ = pin_current_thread(cpus[t % cpus.len()]);
                        }
                        barrier.wait();
                        let t0 = Instant::now();
                        arithmetic(work);
                        t0.elapsed().as_nanos() as f64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        times.into_iter().fold(0.0, f64::max)
    };
    // One thread before and after the pair, so a drift in load between the
    // runs biases neither side.
    let before = run(1);
    let t2 = run(2);
    let t1 = (before + run(1)) / 2.0;
    if t2 > 0.0 {
        2.0 * t1 / t2
    } else {
        0.0
    }
}

// ---------------------------------------------------------------------------
// Cases and statistics
// ---------------------------------------------------------------------------

/// Time measured by a [`Stopwatch`] (or summed over several).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Elapsed {
    /// Wall-clock nanoseconds.
    pub ns: f64,
    /// TSC cycles (`None` without a TSC).
    pub cycles: Option<f64>,
}

impl core::ops::AddAssign for Elapsed {
    fn add_assign(&mut self, o: Elapsed) {
        self.ns += o.ns;
        self.cycles = self.cycles.zip(o.cycles).map(|(a, b)| a + b);
    }
}

/// Wall clock and TSC read together, for [`Case::custom`] bodies that time
/// only part of their work.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    t0: Instant,
    c0: Option<u64>,
}

impl Stopwatch {
    /// Starts timing.
    #[inline(always)]
    pub fn start() -> Self {
        let t0 = Instant::now();
        Stopwatch { t0, c0: tsc() }
    }

    /// The time since [`start`](Self::start).
    #[inline(always)]
    pub fn stop(self) -> Elapsed {
        let c1 = tsc();
        let ns = self.t0.elapsed().as_nanos() as f64;
        Elapsed {
            ns,
            cycles: self.c0.zip(c1).map(|(a, b)| b.wrapping_sub(a) as f64),
        }
    }
}

/// The body of a case, called as `(thread index, iterations)`.
#[derive(Clone)]
enum Body {
    /// Timed from outside, as a whole.
    Whole(Arc<dyn Fn(usize, u64) + Send + Sync>),
    /// Times itself (untimed set-up and tear-down allowed).
    Custom(Arc<dyn Fn(usize, u64) -> Elapsed + Send + Sync>),
}

/// A figure quoted by a seed, printed beside ours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedRef {
    /// The seed's label for it (e.g. `spin_lock_unlock`).
    pub label: &'static str,
    /// Its cycles per operation.
    pub cycles: f64,
    /// Its nanoseconds per operation.
    pub ns: f64,
}

/// One competitor of a table.
#[derive(Clone)]
pub struct Case {
    /// Section heading it is printed under.
    pub section: String,
    /// Row name.
    pub name: String,
    /// Threads running it at once (1, or 2 for the two-CPU rows).
    pub threads: usize,
    /// The seed's figure for the same operation, if it quotes one.
    pub seed: Option<SeedRef>,
    /// A short remark printed at the end of the row.
    pub note: String,
    /// A floor (the same work without the allocator, or the timer alone):
    /// [`Report::check`] flags it when it is slower than a row of its
    /// section.
    pub floor: bool,
    body: Body,
}

impl Case {
    /// A case whose `op` is run `iters` times in a loop (inlined into it).
    pub fn op<F: Fn() + Send + Sync + 'static>(name: impl Into<String>, op: F) -> Self {
        Self::raw(name, move |_, iters| {
            for _ in 0..iters {
                op();
            }
        })
    }

    /// A case with its own loop: `body(thread_index, iters)` must perform
    /// the operation `iters` times.
    pub fn raw<F: Fn(usize, u64) + Send + Sync + 'static>(
        name: impl Into<String>,
        body: F,
    ) -> Self {
        Case {
            section: String::new(),
            name: name.into(),
            threads: 1,
            seed: None,
            note: String::new(),
            floor: false,
            body: Body::Whole(Arc::new(body)),
        }
    }

    /// A case that times itself: `body(thread_index, iters)` performs the
    /// operation `iters` times and returns the time of the operations only,
    /// summed over [`Stopwatch`]es (set-up and tear-down left untimed, e.g.
    /// freeing the pages whose allocation is measured).
    pub fn custom<F: Fn(usize, u64) -> Elapsed + Send + Sync + 'static>(
        name: impl Into<String>,
        body: F,
    ) -> Self {
        Case {
            body: Body::Custom(Arc::new(body)),
            ..Self::raw(name, |_, _| {})
        }
    }

    /// Runs the body on `n` threads at once, each pinned to its own CPU.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Files the case under `section`.
    pub fn section(mut self, section: impl Into<String>) -> Self {
        self.section = section.into();
        self
    }

    /// The seed's figure for the same operation.
    pub fn seed(mut self, seed: SeedRef) -> Self {
        self.seed = Some(seed);
        self
    }

    /// A remark for the row.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// Marks the case as a floor (see [`Case::floor`](Case#structfield.floor)).
    pub fn floor(mut self) -> Self {
        self.floor = true;
        self
    }
}

/// Median and spread of one quantity over the rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median over rounds.
    pub median: f64,
    /// Fastest round.
    pub min: f64,
    /// Slowest round.
    pub max: f64,
}

impl Spread {
    /// The spread of `xs` (`None` if empty).
    pub fn of(xs: &[f64]) -> Option<Spread> {
        if xs.is_empty() {
            return None;
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// The measured figures of one case.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Nanoseconds per operation (per thread for multi-thread cases).
    pub ns: Spread,
    /// TSC cycles per operation (`None` without a TSC).
    pub cycles: Option<Spread>,
    /// Iterations per batch (per thread).
    pub iters: u64,
    /// Rounds measured.
    pub rounds: usize,
    /// Median [`two_cpu_check`] speed-up, for multi-thread cases.
    pub two_cpu: Option<f64>,
    /// The rounds were taken again (more of them) because the first ones
    /// spread beyond [`Config::noise`] (these figures are the second set).
    pub remeasured: bool,
    /// Warnings attached by [`Report::check`] (`noisy`, `floor slower than
    /// ...`, `2cpu 1.2x`), printed before the row's note.
    pub flags: Vec<String>,
}

impl Stats {
    /// The spread of the rounds: slowest over fastest (1.0 = no spread).
    pub fn spread_ratio(&self) -> f64 {
        if self.ns.min > 0.0 {
            self.ns.max / self.ns.min
        } else {
            f64::INFINITY
        }
    }

    /// Flagged noisy by [`Report::check`]: excluded from the verdicts.
    pub fn is_noisy(&self) -> bool {
        self.flags.iter().any(|f| f.starts_with(NOISY))
    }
}

/// The flag of a noisy row (see [`Report::check`]).
pub const NOISY: &str = "noisy";

#[derive(Clone, Copy)]
struct Sample {
    ns: f64,
    cycles: Option<f64>,
}

/// What a table's `run` gets: the configuration, the machine, and the
/// measuring engine.
pub struct Ctx<'a> {
    /// The run's configuration.
    pub cfg: &'a Config,
    /// The machine facts (CPUs to pin to, TSC rate).
    pub machine: &'a Machine,
}

impl Ctx<'_> {
    fn cpus(&self) -> &[usize] {
        &self.machine.allowed_cpus
    }

    /// One batch of `case` with `iters` iterations per thread.
    fn sample(&self, case: &Case, iters: u64) -> Sample {
        let timed = |t: usize| -> Sample {
            let e = match &case.body {
                Body::Whole(body) => {
                    let sw = Stopwatch::start();
                    body(t, iters);
                    sw.stop()
                }
                Body::Custom(body) => body(t, iters),
            };
            Sample {
                ns: e.ns / iters as f64,
                cycles: e.cycles.map(|c| c / iters as f64),
            }
        };
        if case.threads == 1 {
            return timed(0);
        }
        let barrier = Barrier::new(case.threads);
        let cpus = self.cpus();
        let pin = self.cfg.pin;
        let samples: Vec<Sample> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..case.threads)
                .map(|t| {
                    let (barrier, timed) = (&barrier, &timed);
                    s.spawn(move || {
                        if pin && !cpus.is_empty() {
                            let _ = pin_current_thread(cpus[t % cpus.len()]);
                        }
                        barrier.wait();
                        timed(t)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let n = samples.len() as f64;
        Sample {
            ns: samples.iter().map(|s| s.ns).sum::<f64>() / n,
            cycles: samples
                .iter()
                .map(|s| s.cycles)
                .sum::<Option<f64>>()
                .map(|c| c / n),
        }
    }

    /// Iterations per batch so one batch lasts about `cfg.batch`.
    ///
    /// The batch time is `fixed + per_iter * iters`: besides the work,
    /// a two-thread batch pays a fixed cost (starting and pinning two
    /// threads, the later one's wake-up: milliseconds on a loaded
    /// machine). Sizing from one short batch (`total / iters`) took that
    /// cost for work and chose a dozen iterations (issue #21: 12 objects
    /// per batch in `slub-prodcons`, whose rounds then spread 1000x and
    /// whose floor came out slower than the allocators); so the slope is
    /// taken between two batch sizes, four times apart.
    fn calibrate(&self, case: &Case) -> u64 {
        let target = self.cfg.batch.as_nanos() as f64;
        let mut iters: u64 = 16;
        loop {
            let s = self.sample(case, iters);
            let total = s.ns * iters as f64;
            if total >= target / 4.0 || iters >= 1 << 40 {
                let big = iters.saturating_mul(4).min(1 << 40);
                let total4 = self.sample(case, big).ns * big as f64;
                let per_iter = if total4 > total && big > iters {
                    (total4 - total) / (big - iters) as f64
                } else {
                    total4 / big as f64
                };
                let scaled = (target / per_iter.max(1e-3)).ceil();
                return (scaled as u64).clamp(1, 1 << 40);
            }
            iters = iters.saturating_mul(if total < target / 1000.0 { 16 } else { 4 });
        }
    }

    /// Measures `cases` interleaved (see the module docs) and returns their
    /// statistics in the same order.
    pub fn measure(&self, cases: &[Case]) -> Vec<Stats> {
        let n = cases.len();
        if n == 0 {
            return Vec::new();
        }
        let iters: Vec<u64> = cases.iter().map(|c| self.calibrate(c)).collect();

        // Warm-up, round robin, at least one pass.
        let t0 = Instant::now();
        loop {
            for (c, &it) in cases.iter().zip(&iters) {
                self.sample(c, it);
            }
            if t0.elapsed() >= self.cfg.warmup {
                break;
            }
        }

        let multi = cases.iter().any(|c| c.threads > 1);
        // The yardstick: about half a batch of arithmetic per thread.
        let work = if multi {
            let t = Instant::now();
            arithmetic(1 << 16);
            let per = t.elapsed().as_nanos().max(1) as f64 / (1u64 << 16) as f64;
            ((self.cfg.batch.as_nanos() as f64 / 2.0 / per) as u64).max(1 << 12)
        } else {
            0
        };

        let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(self.cfg.rounds); n];
        let mut ratios = Vec::new();
        for round in 0..self.cfg.rounds.max(1) {
            if multi {
                ratios.push(two_cpu_check(self.cpus(), self.cfg.pin, work));
            }
            for k in 0..n {
                let i = (round + k) % n;
                samples[i].push(self.sample(&cases[i], iters[i]));
            }
        }

        // Noise: a case whose rounds spread beyond `cfg.noise` (slowest over
        // fastest) is measured again, with twice the rounds, interleaved
        // with the other noisy cases only; the second set replaces the first
        // (and `Report::check` flags it if it still spreads).
        let spread = |s: &[Sample]| {
            let ns: Vec<f64> = s.iter().map(|x| x.ns).collect();
            Spread::of(&ns).map_or(1.0, |sp| sp.max / sp.min.max(f64::MIN_POSITIVE))
        };
        let noisy: Vec<usize> = (0..n)
            .filter(|&i| self.cfg.noise > 1.0 && spread(&samples[i]) > self.cfg.noise)
            .collect();
        let mut remeasured = vec![false; n];
        if !noisy.is_empty() {
            let m = noisy.len();
            let multi = noisy.iter().any(|&i| cases[i].threads > 1);
            let mut fresh: Vec<Vec<Sample>> = vec![Vec::new(); m];
            for round in 0..2 * self.cfg.rounds.max(1) {
                if multi {
                    ratios.push(two_cpu_check(self.cpus(), self.cfg.pin, work));
                }
                for k in 0..m {
                    let j = (round + k) % m;
                    let i = noisy[j];
                    fresh[j].push(self.sample(&cases[i], iters[i]));
                }
            }
            for (j, s) in fresh.into_iter().enumerate() {
                samples[noisy[j]] = s;
                remeasured[noisy[j]] = true;
            }
        }
        let two_cpu = Spread::of(&ratios).map(|s| s.median);

        cases
            .iter()
            .zip(samples)
            .zip(iters)
            .zip(remeasured)
            .map(|(((case, s), iters), remeasured)| {
                let ns: Vec<f64> = s.iter().map(|x| x.ns).collect();
                let cyc: Option<Vec<f64>> = s.iter().map(|x| x.cycles).collect();
                Stats {
                    ns: Spread::of(&ns).expect("at least one round"),
                    cycles: cyc.and_then(|c| Spread::of(&c)),
                    iters,
                    rounds: s.len(),
                    two_cpu: (case.threads > 1).then_some(two_cpu).flatten(),
                    remeasured,
                    flags: Vec::new(),
                }
            })
            .collect()
    }

    /// Measures `cases` and files them into a report.
    pub fn report(
        &self,
        table: &'static str,
        title: impl Into<String>,
        cases: Vec<Case>,
    ) -> Report {
        let stats = self.measure(&cases);
        Report {
            table,
            title: title.into(),
            notes: Vec::new(),
            rows: cases
                .into_iter()
                .zip(stats)
                .map(|(case, stats)| Row { case, stats })
                .collect(),
            ..Report::default()
        }
    }
}

// ---------------------------------------------------------------------------
// Machine facts
// ---------------------------------------------------------------------------

/// What was measured on: printed at the top and stored with the results.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs configured (`_SC_NPROCESSORS_CONF`).
    pub nr_cpus: usize,
    /// CPUs this process may run on, in order; the measuring thread is
    /// pinned to the first, two-thread cases to the first two.
    pub allowed_cpus: Vec<usize>,
    /// TSC flags of interest (`constant_tsc nonstop_tsc`) present in
    /// /proc/cpuinfo.
    pub tsc_flags: String,
    /// TSC ticks per ns, calibrated against the wall clock.
    pub tsc_ghz: Option<f64>,
    /// `gnu_get_libc_version()`.
    pub glibc: String,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// rustc that built the runner (recorded by build.rs).
    pub rustc: &'static str,
    /// Cargo profile of the build.
    pub profile: &'static str,
    /// /proc/loadavg when the run started: other processes' load.
    pub loadavg: String,
}

impl Machine {
    /// Probes the machine (calibrates the TSC over 50 ms, 10 ms if quick).
    pub fn probe(cfg: &Config) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |key: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags = field("flags").unwrap_or_default();
        let tsc_flags = ["constant_tsc", "nonstop_tsc", "tsc_known_freq"]
            .into_iter()
            .filter(|f| flags.split_whitespace().any(|x| x == *f))
            .collect::<Vec<_>>()
            .join(" ");
        // SAFETY: sysconf has no preconditions.
        let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let span = Duration::from_millis(if cfg.quick { 10 } else { 50 });
        Machine {
            cpu_model: field("model name").unwrap_or_else(|| "unknown".into()),
            nr_cpus: conf.max(1) as usize,
            allowed_cpus: allowed_cpus(),
            tsc_flags,
            tsc_ghz: calibrate_tsc(span),
            glibc: glibc_version(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            rustc: env!("MM_BENCH_RUSTC_VERSION"),
            profile: env!("MM_BENCH_PROFILE"),
            loadavg: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "?".into()),
        }
    }

    /// The facts as `(key, value)` pairs, in print order.
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cpu", self.cpu_model.clone()),
            (
                "cpus",
                format!(
                    "{} configured, allowed {:?}",
                    self.nr_cpus, self.allowed_cpus
                ),
            ),
            (
                "tsc",
                match self.tsc_ghz {
                    Some(g) => format!(
                        "{g:.3} GHz (calibrated against CLOCK_MONOTONIC) [{}]",
                        self.tsc_flags
                    ),
                    None => "none".into(),
                },
            ),
            ("glibc", self.glibc.clone()),
            ("kernel", self.kernel.clone()),
            ("rustc", self.rustc.to_string()),
            ("profile", self.profile.to_string()),
            ("loadavg", self.loadavg.clone()),
        ]
    }

    /// Prints the facts, one per line.
    pub fn print(&self) {
        for (k, v) in self.facts() {
            println!("{k:>8}: {v}");
        }
    }

    /// The facts as one JSON object (`"type":"machine"`).
    pub fn json(&self) -> String {
        let mut s = String::from("{\"type\":\"machine\"");
        for (k, v) in self.facts() {
            let _ = write!(s, ",{}:{}", json_str(k), json_str(&v));
        }
        s.push('}');
        s
    }
}

/// The C library's version (`gnu_get_libc_version`), or "not glibc".
pub fn glibc_version() -> String {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: returns a pointer to a static NUL-terminated string.
        let p = unsafe { libc::gnu_get_libc_version() };
        if !p.is_null() {
            // SAFETY: non-null, static, NUL-terminated (glibc's contract).
            return unsafe { core::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned();
        }
    }
    "not glibc".into()
}

// ---------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------

/// One measured row.
#[derive(Clone)]
pub struct Row {
    /// What was measured.
    pub case: Case,
    /// Its figures.
    pub stats: Stats,
}

/// A finished table: printed as text, written as CSV and JSON lines.
#[derive(Clone, Default)]
pub struct Report {
    /// The table's registry name (file names derive from it).
    pub table: &'static str,
    /// The heading.
    pub title: String,
    /// Lines printed under the table.
    pub notes: Vec<String>,
    /// The rows, in print order.
    pub rows: Vec<Row>,
    /// The table's targets (settled by [`Report::check`]).
    pub verdicts: Vec<Verdict>,
    /// What [`Report::check`] found suspicious (floor slower than an
    /// allocator, busy second CPU), repeated in the run's summary.
    pub warnings: Vec<String>,
}

/// `x` with about three significant digits.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() < 10.0 {
        format!("{x:.2}")
    } else if x.abs() < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn fmt_spread(s: &Spread) -> (String, String) {
    (
        fmt_num(s.median),
        format!("[{} .. {}]", fmt_num(s.min), fmt_num(s.max)),
    )
}

impl Report {
    /// The row called `name`, if measured.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.case.name == name)
    }

    /// Appends a line printed under the table.
    pub fn note(mut self, line: impl Into<String>) -> Self {
        self.notes.push(line.into());
        self
    }

    /// The aligned text table.
    pub fn to_text(&self) -> String {
        let has_seed = self.rows.iter().any(|r| r.case.seed.is_some());
        let has_multi = self.rows.iter().any(|r| r.case.threads > 1);
        let mut head = vec![
            "",
            "thr",
            "ns/op",
            "(min .. max)",
            "cycles/op",
            "(min .. max)",
        ];
        if has_multi {
            head.push("2cpu");
        }
        if has_seed {
            head.push("seed: cyc    ns  (what)");
        }
        head.push("note");
        enum Line {
            Heading(String),
            Cells(Vec<String>),
        }
        let mut lines: Vec<Line> = Vec::new();
        let mut section: Option<&str> = None;
        for r in &self.rows {
            if section != Some(r.case.section.as_str()) {
                section = Some(&r.case.section);
                if !r.case.section.is_empty() {
                    lines.push(Line::Heading(r.case.section.clone()));
                }
            }
            let (ns, ns_sp) = fmt_spread(&r.stats.ns);
            let (cy, cy_sp) = r
                .stats
                .cycles
                .as_ref()
                .map_or(("-".into(), String::new()), fmt_spread);
            let mut cols = vec![
                format!("  {}", r.case.name),
                r.case.threads.to_string(),
                ns,
                ns_sp,
                cy,
                cy_sp,
            ];
            if has_multi {
                cols.push(
                    r.stats
                        .two_cpu
                        .map_or(String::new(), |x| format!("{x:.2}x")),
                );
            }
            if has_seed {
                cols.push(r.case.seed.map_or(String::new(), |s| {
                    format!("{:>4} {:>7.3}  ({})", s.cycles, s.ns, s.label)
                }));
            }
            let mut note = r.case.note.clone();
            if !r.stats.flags.is_empty() {
                note = format!("[{}] {note}", r.stats.flags.join("; "));
            }
            cols.push(note);
            lines.push(Line::Cells(cols));
        }
        let ncols = head.len();
        let mut width = vec![0; ncols];
        let head: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        let cells = lines.iter().filter_map(|l| match l {
            Line::Cells(c) => Some(c),
            Line::Heading(_) => None,
        });
        for cols in cells.chain([&head]) {
            for (w, c) in width.iter_mut().zip(cols) {
                *w = (*w).max(c.chars().count());
            }
        }
        // Left-align names and free text, right-align numbers.
        let right = |i: usize| (1..=5).contains(&i) || (has_multi && i == 6);
        let fmt_line = |cols: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cols.iter().enumerate() {
                if i + 1 == ncols {
                    s.push_str(c);
                } else if right(i) {
                    let _ = write!(s, "{c:>w$}  ", w = width[i]);
                } else {
                    let _ = write!(s, "{c:<w$}  ", w = width[i]);
                }
            }
            s.trim_end().to_string()
        };
        let mut out = String::new();
        let _ = writeln!(out, "== {} ({}) ==", self.title, self.table);
        out.push_str(&fmt_line(&head));
        out.push('\n');
        for l in &lines {
            match l {
                Line::Cells(cols) => out.push_str(&fmt_line(cols)),
                Line::Heading(h) => out.push_str(h),
            }
            out.push('\n');
        }
        for n in &self.notes {
            let _ = writeln!(out, "{n}");
        }
        if !self.verdicts.is_empty() {
            out.push_str("verdicts (noisy rows give no verdict):\n");
            out.push_str(&self.verdict_lines());
        }
        for w in &self.warnings {
            let _ = writeln!(out, "WARNING: {w}");
        }
        out
    }

    /// The rows as CSV (with a header line).
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "table,section,name,threads,ns_median,ns_min,ns_max,cycles_median,cycles_min,cycles_max,iters,rounds,two_cpu,seed_label,seed_cycles,seed_ns,note\n",
        );
        for r in &self.rows {
            let c = &r.case;
            let s = &r.stats;
            let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.4}"));
            let cols = [
                csv_field(self.table),
                csv_field(&c.section),
                csv_field(&c.name),
                c.threads.to_string(),
                format!("{:.4}", s.ns.median),
                format!("{:.4}", s.ns.min),
                format!("{:.4}", s.ns.max),
                opt(s.cycles.map(|x| x.median)),
                opt(s.cycles.map(|x| x.min)),
                opt(s.cycles.map(|x| x.max)),
                s.iters.to_string(),
                s.rounds.to_string(),
                opt(s.two_cpu),
                csv_field(c.seed.map_or("", |x| x.label)),
                opt(c.seed.map(|x| x.cycles)),
                opt(c.seed.map(|x| x.ns)),
                csv_field(&c.note),
            ];
            out.push_str(&cols.join(","));
            out.push('\n');
        }
        out
    }

    /// The rows as JSON lines (one object per row, `"type":"row"`).
    pub fn to_jsonl(&self) -> String {
        let num = |x: Option<f64>| x.map_or("null".to_string(), |v| format!("{v:.4}"));
        let mut out = String::new();
        for r in &self.rows {
            let c = &r.case;
            let s = &r.stats;
            let _ = writeln!(
                out,
                "{{\"type\":\"row\",\"table\":{},\"section\":{},\"name\":{},\"threads\":{},\
                 \"ns\":{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4}}},\
                 \"cycles\":{{\"median\":{},\"min\":{},\"max\":{}}},\
                 \"iters\":{},\"rounds\":{},\"two_cpu\":{},\"seed\":{},\"note\":{}}}",
                json_str(self.table),
                json_str(&c.section),
                json_str(&c.name),
                c.threads,
                s.ns.median,
                s.ns.min,
                s.ns.max,
                num(s.cycles.map(|x| x.median)),
                num(s.cycles.map(|x| x.min)),
                num(s.cycles.map(|x| x.max)),
                s.iters,
                s.rounds,
                num(s.two_cpu),
                c.seed.map_or("null".to_string(), |x| format!(
                    "{{\"label\":{},\"cycles\":{},\"ns\":{}}}",
                    json_str(x.label),
                    x.cycles,
                    x.ns
                )),
                json_str(&c.note),
            );
        }
        out
    }

    /// Writes `<dir>/<table>.csv` and `<dir>/<table>.jsonl` (the latter
    /// starting with the machine record); returns the two paths.
    pub fn write_files(&self, dir: &Path, machine: &Machine) -> io::Result<[PathBuf; 2]> {
        std::fs::create_dir_all(dir)?;
        let csv = dir.join(format!("{}.csv", self.table));
        let jsonl = dir.join(format!("{}.jsonl", self.table));
        std::fs::write(&csv, self.to_csv())?;
        std::fs::write(&jsonl, format!("{}\n{}", machine.json(), self.to_jsonl()))?;
        Ok([csv, jsonl])
    }
}

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` as a CSV field (quoted when it contains a comma, quote or newline).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn escaping() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    }

    #[test]
    fn measure_interleaves_and_reports_every_case() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static A: AtomicU64 = AtomicU64::new(0);
        static B: AtomicU64 = AtomicU64::new(0);
        let cfg = Config {
            batch: Duration::from_micros(50),
            warmup: Duration::ZERO,
            rounds: 3,
            pin: false,
            noise: 0.0,
            ..Config::quick()
        };
        let machine = Machine::probe(&cfg);
        let cx = Ctx {
            cfg: &cfg,
            machine: &machine,
        };
        let cases = vec![
            Case::op("a", || {
                A.fetch_add(1, Ordering::Relaxed);
            }),
            Case::op("b", || {
                B.fetch_add(1, Ordering::Relaxed);
            })
            .threads(2),
        ];
        let cases = cases
            .into_iter()
            .chain([Case::custom("c", |_, iters| {
                let mut e = Elapsed::default();
                for _ in 0..iters {
                    let sw = Stopwatch::start();
                    black_box(0u64);
                    e += sw.stop();
                }
                e
            })])
            .collect();
        let r = cx.report("unit", "unit test", cases);
        assert_eq!(r.rows.len(), 3);
        assert!(A.load(Ordering::Relaxed) > 0 && B.load(Ordering::Relaxed) > 0);
        assert!(r
            .rows
            .iter()
            .all(|r| r.stats.rounds == 3 && r.stats.ns.median > 0.0));
        assert!(r.rows[1].stats.two_cpu.is_some() && r.rows[0].stats.two_cpu.is_none());
        let text = r.to_text();
        assert!(text.contains("2cpu") && text.contains("  a"));
        assert_eq!(r.to_csv().lines().count(), 4);
        assert_eq!(r.to_jsonl().lines().count(), 3);
    }

    #[test]
    fn noisy_cases_are_remeasured_flagged_and_give_no_verdict() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let cfg = Config {
            batch: Duration::from_micros(50),
            warmup: Duration::ZERO,
            rounds: 4,
            pin: false,
            ..Config::quick()
        };
        let machine = Machine::probe(&cfg);
        let cx = Ctx {
            cfg: &cfg,
            machine: &machine,
        };
        // Every other batch 100 times slower per iteration: always noisy.
        let jumpy = Case::custom("jumpy", |_, iters| {
            let slow = CALLS.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
            Elapsed {
                ns: iters as f64 * if slow { 100.0 } else { 1.0 },
                cycles: None,
            }
        });
        let steady = Case::custom("steady", |_, iters| Elapsed {
            ns: iters as f64 * 50.0,
            cycles: None,
        })
        .floor();
        let mut r = cx.report("unit", "unit test", vec![jumpy, steady]);
        assert!(r.rows[0].stats.remeasured && r.rows[0].stats.rounds == 8);
        assert!(!r.rows[1].stats.remeasured && r.rows[1].stats.rounds == 4);
        r.verdicts
            .push(Verdict::at_most("jumpy <= 1000", 10.0, 1000.0, "ns").on(&r.rows, &["jumpy"]));
        r.verdicts
            .push(Verdict::at_least("steady >= 100", 50.0, 100.0, "ns").on(&r.rows, &["steady"]));
        r.check(&cfg);
        assert!(r.rows[0].stats.is_noisy() && !r.rows[1].stats.is_noisy());
        assert_eq!(r.verdicts[0].status, Status::Noisy);
        assert_eq!(r.verdicts[1].status, Status::Missed);
        // The floor (50 ns) is slower than the jumpy row's median (~50 of
        // 1 and 100): whichever way the median falls, the check is
        // consistent with it.
        let floor_slow = r.rows[1].stats.ns.median > r.rows[0].stats.ns.median;
        assert_eq!(floor_slow, !r.warnings.is_empty());
        assert!(r.to_text().contains("noisy"));
    }
}
