//! The child processes of the tables that measure peak RSS per allocator
//! (`slub-larson`, `slub-threads`): the runner re-executes itself with a
//! hidden first argument (recognised by [`child_main`]), the child runs
//! one allocator's workload, prints one `TAG key=value ...` line and exits
//! without freeing, so that its `VmHWM` is that allocator's alone. Where
//! there is no runner binary to re-execute (the unit tests), a table runs
//! the workload in its own process instead, without RSS figures.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::heaps::{Caches, Competitors, Kind, ObjHeap, Visit};

/// `VmRSS` and `VmHWM` of this process, KiB.
pub fn rss_kb() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The runner's hidden child modes: `mm-bench --slub-larson-child ...`
/// ([`larson_child_main`](super::larson_child_main)) and
/// `mm-bench --slub-threads-child ...`
/// ([`threads_child_main`](super::threads_child_main)). `None` when the
/// arguments are not a child's (the runner goes on as usual).
pub fn child_main() -> Option<ExitCode> {
    count_cpus_init();
    super::larson::larson_child_main().or_else(super::threads::threads_child_main)
}

/// Set when a child counts under callgrind ([`count_cpus_init`]).
static COUNT_CPUS: AtomicBool = AtomicBool::new(false);

/// `MM_BENCH_COUNT_CPUS=1` in a child run under valgrind (which implements
/// no rseq, so glibc could not register it): `GlobalSlub`'s restartable
/// paths are counted as if each worker thread ran alone on its own CPU
/// (worker `t` on CPU `t`, see [`count_cpu_enter`]), so that callgrind
/// counts the per-CPU paths of a run with as many CPUs as threads (at
/// most 64) instead of the fallback's. Valgrind runs one thread at a time
/// and no two threads share a CPU's records, so no section needs a
/// restart. Ignored where rseq is registered.
fn count_cpus_init() {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if std::env::var_os("MM_BENCH_COUNT_CPUS").is_some() && !local_lock::rseq::available() {
        // SAFETY: this thread is the only one so far; it gives CPU 0 back
        // at once (below), and the workers each take their own CPU record
        // in `count_cpu_enter`.
        let ok = unsafe { local_lock::rseq::assume_cpu0_for_counting() };
        // glibc starts a thread with rseq when its creator's area has a
        // CPU (and aborts when that fails): the main thread's area says
        // "registration failed" again (so it uses the fallback).
        set_cpu_id(RSEQ_CPU_ID_REGISTRATION_FAILED);
        COUNT_CPUS.store(ok, Ordering::Relaxed);
        eprintln!("mm-bench: rseq unavailable (valgrind?): worker t counted as CPU t: {ok}");
    }
}

/// glibc's `cpu_id` of a thread whose rseq registration failed.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const RSEQ_CPU_ID_REGISTRATION_FAILED: u32 = -2i32 as u32;

/// Writes `cpu` as the `cpu_id` of this thread's (unregistered) rseq area.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn set_cpu_id(cpu: u32) {
    // SAFETY: dlsym with a NUL-terminated name; checked for null.
    let o = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) };
    assert!(!o.is_null(), "counting mode without __rseq_offset");
    // SAFETY: glibc's `__rseq_offset`; the rseq area at the thread pointer
    // plus it is this thread's (glibc keeps it when the registration
    // failed), and without the kernel nothing else writes it. `cpu_id` is
    // its second 32-bit field.
    unsafe {
        let off = *(o as *const isize);
        let tp: usize;
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
        ((tp as isize + off) as *mut u32).add(1).write_volatile(cpu);
    }
}

/// Worker thread `t` of a child counting under callgrind
/// ([`count_cpus_init`]) takes CPU `t`'s records: it writes `t` as the
/// `cpu_id` of its (unregistered) rseq area. Nothing otherwise.
pub(super) fn count_cpu_enter(t: usize) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if COUNT_CPUS.load(Ordering::Relaxed) {
        assert!(t < 64, "counting mode: worker {t} past the 64 CPU records");
        set_cpu_id(t as u32);
    }
    let _ = t;
}

/// `MM_BENCH_REPORT=1`: a child that ran the `GlobalSlub` row prints its
/// report (slabinfo, the SLUB counters of its slow paths: sheaf swaps,
/// refills and flushes, barn, slabs; the pages) on stderr.
pub(super) fn report_if_asked(name: &str) {
    if name == super::heaps::GLOBAL_SLUB_ROW && std::env::var_os("MM_BENCH_REPORT").is_some() {
        eprintln!("{}", super::heaps::GLOBAL_SLUB.report());
    }
}

/// A workload run on one competitor chosen by its row name at run time
/// ([`run_on`]): generic over the allocator, so it is monomorphised for
/// each (no `dyn` call per object).
pub(super) trait HeapJob {
    /// What the workload measured.
    type Out;

    /// Runs the workload on `a`.
    fn run<A: ObjHeap>(&mut self, a: &Arc<A>) -> Self::Out;
}

struct On<'a, J: HeapJob> {
    name: &'a str,
    job: Option<J>,
    out: Option<J::Out>,
}

impl<J: HeapJob> Visit for On<'_, J> {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        if name == self.name {
            if let Some(mut job) = self.job.take() {
                self.out = Some(job.run(a));
            }
        }
    }
}

/// Runs `job` on the competitor of `comp` called `name` (random sizes:
/// no `KmemCache` rows); `None` if there is none.
pub(super) fn run_on<J: HeapJob>(comp: &Competitors, name: &str, job: J) -> Option<J::Out> {
    let mut v = On {
        name,
        job: Some(job),
        out: None,
    };
    comp.visit(0, Caches::None, &mut v);
    v.out
}

struct Names(Vec<&'static str>);

impl Visit for Names {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, _a: &Arc<A>) {
        self.0.push(name);
    }
}

/// The row names of `comp`'s competitors for random sizes (no `KmemCache`
/// rows), in print order.
pub(super) fn names(comp: &Competitors) -> Vec<&'static str> {
    let mut n = Names(Vec::new());
    comp.visit(0, Caches::None, &mut n);
    n.0
}

/// This executable if it is the runner (`mm-bench`, or a renamed copy such
/// as `mm-bench-old`; the test binaries, `mm_bench-<hash>`, are not).
pub(crate) fn runner_exe() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let is_runner = exe
        .file_stem()
        .is_some_and(|s| s.to_string_lossy().starts_with("mm-bench"));
    is_runner.then_some(exe)
}

/// Why a child gave no result line.
#[derive(Debug)]
pub(crate) enum ChildError {
    /// It could not be started.
    Spawn(String),
    /// It failed (its exit status and standard error).
    Failed(String),
    /// It was still running at the deadline and was killed.
    TimedOut(Duration),
}

impl std::fmt::Display for ChildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChildError::Spawn(e) => write!(f, "cannot start: {e}"),
            ChildError::Failed(e) => write!(f, "failed: {e}"),
            ChildError::TimedOut(d) => write!(f, "still running after {} s, killed", d.as_secs()),
        }
    }
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    })
}

/// Runs `exe` with `args` and returns its standard output; kills it if it
/// is still running after `timeout`.
pub(crate) fn run_child(
    exe: &Path,
    args: &[String],
    timeout: Duration,
) -> Result<String, ChildError> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ChildError::Spawn(e.to_string()))?;
    // Read both pipes on their own threads, so a child that writes a lot
    // never blocks on a full pipe while we wait for it.
    let out = child.stdout.take().map(read_all);
    let err = child.stderr.take().map(read_all);
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let err = err.and_then(|h| h.join().ok()).unwrap_or_default();
    match status {
        None => Err(ChildError::TimedOut(timeout)),
        Some(st) if st.success() => Ok(out),
        Some(st) => Err(ChildError::Failed(format!("{st}: {}", err.trim()))),
    }
}

/// The result line `TAG k1=v1 k2=v2 ...` a child prints.
pub(crate) fn result_line(tag: &str, fields: &[(&str, String)]) -> String {
    let mut s = tag.to_string();
    for (k, v) in fields {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// Ends a child run: its result line on stdout, then exit without
/// unwinding the heaps (the objects stay allocated); or, when the run had
/// no allocator of that `name`, the error and exit status 2 for the
/// child's `main` to return.
pub(super) fn finish_child(
    flag: &str,
    name: &str,
    tag: &str,
    fields: Option<&[(&str, String)]>,
) -> Option<ExitCode> {
    match fields {
        Some(f) => {
            println!("{}", result_line(tag, f));
            std::process::exit(0)
        }
        None => {
            eprintln!("mm-bench {flag}: no allocator {name:?}");
            Some(ExitCode::from(2))
        }
    }
}

/// The value of `key` on the first line of `out` that starts with
/// `TAG `, parsed.
pub(crate) fn field<T: FromStr>(out: &str, tag: &str, key: &str) -> Option<T> {
    let line = out
        .lines()
        .find(|l| l.strip_prefix(tag).is_some_and(|r| r.starts_with(' ')))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))?
        .parse()
        .ok()
}

/// A CPU list as a child's argument: `0,1,...`, or `-` for none.
pub(super) fn cpus_arg(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        "-".into()
    } else {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The CPU list of [`cpus_arg`].
pub(super) fn parse_cpus(s: &str) -> Option<Vec<usize>> {
    match s {
        "-" => Some(Vec::new()),
        s => s.split(',').map(|c| c.parse().ok()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_and_cpu_lists_round_trip() {
        let line = result_line("t", &[("a", "1".into()), ("bb", "2.5".into())]);
        assert_eq!(line, "t a=1 bb=2.5");
        let out = format!("noise\ntt a=9\n{line}\n");
        assert_eq!(field::<u64>(&out, "t", "a"), Some(1));
        assert_eq!(field::<f64>(&out, "t", "bb"), Some(2.5));
        assert_eq!(field::<u64>(&out, "t", "b"), None);
        assert_eq!(field::<u64>(&out, "x", "a"), None);
        for cpus in [vec![], vec![3], vec![0, 1, 7]] {
            assert_eq!(parse_cpus(&cpus_arg(&cpus)), Some(cpus));
        }
        assert_eq!(parse_cpus("1,x"), None);
        assert!(runner_exe().is_none(), "the test binary is not the runner");
    }
}
