//! `fork()` from a multithreaded program whose global allocator is
//! `GlobalBitmap` (issue #14 item 13): three threads allocate and free all
//! the time while the main thread forks; every child allocates (small
//! blocks, large mappings, a new thread) and exits with status 0. A child
//! that hangs on a lock another thread held at the fork is killed after
//! 10 s and fails the test. Alone in its binary (tests of a binary are
//! threads). Not under miri (fork, mmap).
#![cfg(not(any(loom, miri)))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static HEAP: percpu_bitmap::GlobalBitmap = percpu_bitmap::GlobalBitmap::new();

const FORKS: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a child does: allocations through every layer, then `_exit`.
fn child() -> ! {
    let mut v: Vec<Vec<u8>> = Vec::new();
    for i in 0..200usize {
        v.push(vec![i as u8; 1 + (i * 97) % 9000]);
    }
    let big = vec![1u8; 64 << 10];
    let huge = vec![2u8; 6 << 20];
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

/// Background churn: objects of many sizes, some freed by another thread
/// (remote frees, list locks), page blocks (zone lock) and direct mappings.
fn churn(t: usize, stop: &AtomicBool, tx: std::sync::mpsc::SyncSender<Vec<u8>>) {
    let mut i = t;
    let mut keep: Vec<Vec<u8>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let size = match i >> 60 {
            0 if (i >> 50).is_multiple_of(8) => 5 << 20,
            1..=2 => 16 << 10 << ((i >> 40) % 4),
            _ => 1 + (i >> 33) % 4000,
        };
        let b = vec![t as u8; size];
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

/// Waits for `pid` up to `TIMEOUT`: `Some(status)`, or `None` if it hung
/// (then it is killed).
fn wait_or_kill(pid: libc::pid_t) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(status);
        }
        assert_eq!(r, 0, "waitpid failed");
        if start.elapsed() > TIMEOUT {
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

#[test]
#[cfg_attr(miri, ignore = "fork")]
fn fork_while_threads_allocate_every_child_allocates_and_exits() {
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
    let (mut hung, mut failed) = (0, Vec::new());
    std::thread::scope(|s| {
        for t in 0..3 {
            let tx = tx.clone();
            let stop = &stop;
            s.spawn(move || churn(t, stop, tx));
        }
        drop(tx);
        // A fourth thread frees what the others send (remote frees).
        s.spawn(move || {
            for b in rx {
                assert!(b.iter().all(|&x| x == b[0]));
            }
        });
        for n in 0..FORKS {
            // Let the threads get going between forks.
            std::thread::sleep(Duration::from_micros(500));
            // SAFETY: the child only allocates and calls `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                child();
            }
            match wait_or_kill(pid) {
                None => hung += 1,
                Some(st) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => {}
                Some(st) => failed.push((n, st)),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        (hung, failed.len()),
        (0, 0),
        "{hung} of {FORKS} children hung, failed (fork, status): {failed:?}"
    );
}
