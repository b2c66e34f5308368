//! Misuse of slub's public API: each case ends in an error, `None` or an
//! abort with a message, never a hang, a crash or memory handed out twice
//! (issue #14). One named test per case; the name says what is expected.
#![cfg(not(loom))]

use std::sync::mpsc;
use std::time::Duration;

use slub::GlobalSlub;

/// The heap the kmalloc cases run on (not this binary's global allocator:
/// a bug here must not take the test harness down with it).
static HEAP: GlobalSlub = GlobalSlub::new();

/// Runs `f` on a thread and fails if it does not return within 10 s (the
/// cases below used to spin forever).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no answer within 10 s ({e})"),
    }
}

#[test]
fn kmalloc_of_sizes_above_2_pow_63_returns_none() {
    for size in [(1usize << 63) + 1, usize::MAX - 4095, usize::MAX] {
        let got = within_10s("kmalloc", move || {
            HEAP.kmalloc().kmalloc(size, 8).map(|p| p.addr())
        });
        assert_eq!(got, None, "kmalloc({size:#x}, 8)");
        let got = within_10s("kzalloc", move || {
            HEAP.kmalloc().kzalloc(size, 8).map(|p| p.addr())
        });
        assert_eq!(got, None, "kzalloc({size:#x}, 8)");
    }
}

#[test]
fn kmalloc_with_alignment_of_2_pow_63_or_above_returns_none() {
    // Above 2^63 no alignment is a power of two; the old order loop spun on
    // `size.max(align)`.
    let got = within_10s("kmalloc", || {
        HEAP.kmalloc().kmalloc(1, 3 << 62).map(|p| p.addr())
    });
    assert_eq!(got, None);
    let got = within_10s("kmalloc", || {
        HEAP.kmalloc().kmalloc(1, 1 << 63).map(|p| p.addr())
    });
    assert_eq!(got, None);
    let got = within_10s("kzalloc", || {
        HEAP.kmalloc().kzalloc(64, 1 << 63).map(|p| p.addr())
    });
    assert_eq!(got, None);
}

#[test]
fn kmalloc_beyond_the_largest_block_returns_none_and_the_heap_still_works() {
    // 4 MiB is the largest block; the next order up has no block.
    assert_eq!(HEAP.kmalloc().kmalloc((4 << 20) + 1, 8), None);
    assert_eq!(HEAP.kmalloc().kmalloc(1 << 40, 8), None);
    let p = HEAP
        .kmalloc()
        .kmalloc(100, 8)
        .expect("a small object after the refusals");
    // SAFETY: ours, freed once.
    unsafe { HEAP.kmalloc().kfree(p.as_ptr()) };
}

#[test]
fn kmalloc_with_alignment_not_a_power_of_two_returns_none() {
    let k = HEAP.kmalloc();
    for (size, align) in [(5, 48), (1, 3), (64, 24), (100, 0), (8192, 3 << 12)] {
        assert_eq!(k.kmalloc(size, align), None, "kmalloc({size}, {align})");
        assert_eq!(k.kzalloc(size, align), None, "kzalloc({size}, {align})");
    }
    // Powers of two are honoured.
    for align in [1, 8, 64, 4096, 1 << 16] {
        let p = k.kmalloc(40, align).unwrap();
        assert_eq!(p.addr().get() % align, 0, "kmalloc(40, {align})");
        // SAFETY: ours, freed once.
        unsafe { k.kfree(p.as_ptr()) };
    }
}
