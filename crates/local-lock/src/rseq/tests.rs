//! Unit tests of the rseq decision (`decide`).

use super::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A thread arriving while another decides waits for the answer
/// (before: it answered `false`, and a slab cache first used then kept
/// its locked path for good); the decider's own reentrant call answers
/// `false` at once.
#[test]
#[cfg_attr(miri, ignore = "sleeps to hold the decision open")]
fn a_second_thread_waits_for_the_decision() {
    static STATE_T: AtomicU8 = AtomicU8::new(UNKNOWN);
    static DECIDER_T: AtomicUsize = AtomicUsize::new(0);
    let deciding = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&deciding);
    let a = std::thread::spawn(move || {
        decide(&STATE_T, &DECIDER_T, 1, || {
            d.store(true, Ordering::Release);
            // Reentrant: answers at once.
            assert!(!decide(&STATE_T, &DECIDER_T, 1, || unreachable!()));
            std::thread::sleep(std::time::Duration::from_millis(10));
            true
        })
    });
    while !deciding.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let b = decide(&STATE_T, &DECIDER_T, 2, || unreachable!("decided once"));
    assert!(a.join().unwrap());
    assert!(b, "the second thread saw the decision, not the wait");
}

/// A decider that cannot finish (its lookup waiting for the caller)
/// gets no deadlock: the caller answers `false` after its bounded wait.
#[test]
#[cfg_attr(miri, ignore = "waits 200 ms")]
fn the_wait_is_bounded() {
    static STATE_T: AtomicU8 = AtomicU8::new(UNKNOWN);
    static DECIDER_T: AtomicUsize = AtomicUsize::new(0);
    static RELEASED: AtomicBool = AtomicBool::new(false);
    let a = std::thread::spawn(|| {
        decide(&STATE_T, &DECIDER_T, 1, || {
            while !RELEASED.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            true
        })
    });
    while STATE_T.load(Ordering::Acquire) == UNKNOWN {
        std::thread::yield_now();
    }
    let b = decide(&STATE_T, &DECIDER_T, 2, || unreachable!("decided once"));
    RELEASED.store(true, Ordering::Release);
    assert!(a.join().unwrap());
    assert!(!b, "answered as before the decision");
}
