//! A fork-safety stress test for any global allocator (issue #14 item
//! 13), shared by the `tests/fork.rs` of every crate: three threads
//! allocate and free all the time (objects of many sizes, some freed by a
//! fourth thread, page blocks, direct mappings) while the calling thread
//! forks; every child allocates (several sizes, a 64 KiB block, a 6 MiB
//! mapping, a new thread) and exits with status 0 through `_exit`. A child
//! that hangs on a lock another thread held at the fork is killed after
//! the timeout and counted.
//!
//! Run it alone in its test binary (`cargo test` runs a binary's tests as
//! threads, and the fork must see only these), with the allocator under
//! test as that binary's `#[global_allocator]`:
//!
//! ```no_run
//! #[test]
//! fn fork_while_threads_allocate_every_child_allocates_and_exits() {
//!     let r = local_lock::fork::stress::run(200, 2, std::time::Duration::from_secs(10));
//!     assert!(r.passed(), "{r}");
//! }
//! ```

use std::format;
use std::string::String;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::time::{Duration, Instant};
use std::vec::Vec;

/// What [`run`] saw.
///
/// ```
/// use std::time::Duration;
/// use local_lock::fork::stress::{run, Outcome};
///
/// let bad = Outcome { forks: 10, hung: 1, failed: vec![(3, 256)] };
/// assert!(!bad.passed());
/// assert_eq!(bad.to_string(), "1 of 10 children hung, failed (fork, status): [(3, 256)]");
/// // The system allocator is fork-safe: every child allocates and exits.
/// # #[cfg(not(miri))] { // miri cannot fork
/// let r = run(3, 2, Duration::from_secs(10));
/// assert!(r.passed(), "{r}");
/// assert_eq!(r.forks, 3);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Children forked.
    pub forks: usize,
    /// Children killed after the timeout (a lock held across the fork).
    pub hung: usize,
    /// Children that exited otherwise than with status 0: (fork number,
    /// `waitpid` status).
    pub failed: Vec<(usize, i32)>,
}

impl Outcome {
    /// No child hung or failed.
    pub fn passed(&self) -> bool {
        self.hung == 0 && self.failed.is_empty()
    }
}

impl core::fmt::Display for Outcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} of {} children hung, failed (fork, status): {:?}",
            self.hung, self.forks, self.failed
        )
    }
}

/// What a child does: allocations through every layer, then `_exit`.
fn child() -> ! {
    let mut v: Vec<Vec<u8>> = Vec::new();
    for i in 0..200usize {
        v.push(std::vec![i as u8; 1 + (i * 97) % 9000]);
    }
    let big = std::vec![1u8; 64 << 10];
    let huge = std::vec![2u8; 6 << 20];
    let t = std::thread::spawn(|| {
        let w: Vec<String> = (0..100).map(|i| format!("{i}")).collect();
        w.len()
    });
    let ok = t.join().map(|n| n == 100).unwrap_or(false)
        && v.iter().all(|x| x.iter().all(|&b| b == x[0]))
        && big[100] == 1
        && huge[5 << 20] == 2;
    // SAFETY: ends the child without running anything of the parent's.
    unsafe { libc::_exit(if ok { 0 } else { 3 }) }
}

/// Background churn of thread `t`: objects of many sizes, some sent to
/// the freeing thread (remote frees, list locks), page blocks (`blocks`
/// sixteenths of the requests, 16..256 KiB: zone locks) and direct
/// mappings.
fn churn(t: usize, blocks: u64, stop: &AtomicBool, tx: SyncSender<Vec<u8>>) {
    let mut i = t as u64;
    let mut keep: Vec<Vec<u8>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let size = match i >> 60 {
            0 if (i >> 50).is_multiple_of(8) => 5 << 20,
            k if (1..=blocks).contains(&k) => (16 << 10) << ((i >> 40) % 5),
            _ => 1 + ((i >> 33) % 4000) as usize,
        };
        let b = std::vec![t as u8; size];
        if (i >> 20).is_multiple_of(3) {
            // Bounded: a full channel drops the block here instead.
            let _ = tx.try_send(b);
        } else {
            keep.push(b);
            if keep.len() > 64 {
                keep.drain(..32);
            }
        }
    }
}

/// Waits for `pid` up to `timeout`: `Some(status)`, or `None` if it hung
/// (then it is killed).
fn wait_or_kill(pid: libc::pid_t, timeout: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(status);
        }
        assert_eq!(r, 0, "waitpid failed");
        if start.elapsed() > timeout {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Forks `forks` children while three threads churn (with `blocks`
/// sixteenths of their requests page blocks, 0..=15) and a fourth frees
/// what they send; each child must allocate and exit 0 within `timeout`.
pub fn run(forks: usize, blocks: u64, timeout: Duration) -> Outcome {
    let stop = AtomicBool::new(false);
    let (tx, rx) = sync_channel::<Vec<u8>>(64);
    let mut out = Outcome {
        forks,
        ..Outcome::default()
    };
    std::thread::scope(|s| {
        for t in 0..3 {
            let tx = tx.clone();
            let stop = &stop;
            s.spawn(move || churn(t, blocks, stop, tx));
        }
        drop(tx);
        // A fourth thread frees what the others send (remote frees).
        s.spawn(move || {
            for b in rx {
                assert!(b.iter().all(|&x| x == b[0]));
            }
        });
        for n in 0..forks {
            // Let the threads get going between forks.
            std::thread::sleep(Duration::from_micros(500));
            // SAFETY: the child only allocates and calls `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                child();
            }
            match wait_or_kill(pid, timeout) {
                None => out.hung += 1,
                Some(st) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => {}
                Some(st) => out.failed.push((n, st)),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    out
}
