//! Bad input, one named test per case (issue #14): what the percpu
//! allocator and `GlobalBitmap` answer to misuse. Refusals are checked to
//! leave the allocator intact (`check_invariants`, counters). Misuse a
//! global allocator must abort on runs in a child process (this binary
//! re-run with `PCPU_SCENARIO` set), which must die with SIGABRT and a
//! message naming GlobalBitmap, the address and what was wrong.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;

use percpu_bitmap::local_lock::std_platform::StdCpu;
use percpu_bitmap::{
    Config, FreeErrorKind, HeapSource, PcpuAllocator, PcpuError, PcpuPtr, MAX_ALLOC_SIZE,
};

// ---------------------------------------------------------------------------
// The percpu allocator: refused with an error, state intact
// ---------------------------------------------------------------------------

fn with_alloc(f: impl FnOnce(&PcpuAllocator<StdCpu, &HeapSource>)) {
    let src = HeapSource::new();
    let a = PcpuAllocator::new(
        StdCpu::new(),
        &src,
        Config::new(32 << 10).units(2).first_chunk(256, 1024, 4096),
    )
    .unwrap();
    f(&a);
    a.check_invariants();
    drop(a);
    assert_eq!(src.pages_in_use(), 0, "pages leaked");
}

fn raw(p: PcpuPtr, off: usize) -> PcpuPtr {
    PcpuPtr::from_raw(NonNull::new(p.as_ptr().as_ptr().wrapping_add(off)).unwrap())
}

/// `try_free(p)` is refused with `kind`, and nothing changed.
fn refused(a: &PcpuAllocator<StdCpu, &HeapSource>, p: PcpuPtr, kind: FreeErrorKind) {
    let before = a.stats();
    let e = a.try_free(p).unwrap_err();
    assert_eq!(e.kind, kind, "{e}");
    assert_eq!(e.addr, p.addr());
    assert!(e.to_string().contains(&format!("{:#x}", p.addr())), "{e}");
    a.check_invariants();
    let after = a.stats();
    assert_eq!(after.nr_cur_alloc, before.nr_cur_alloc);
    assert_eq!(after.nr_dealloc, before.nr_dealloc);
}

#[test]
fn percpu_double_free_is_refused_as_not_allocated() {
    with_alloc(|a| {
        let p = a.alloc(64, 8).unwrap();
        a.free(p);
        refused(a, p, FreeErrorKind::NotAllocated);
    });
}

#[test]
fn percpu_aba_double_free_is_refused_as_not_allocated() {
    with_alloc(|a| {
        let x = a.alloc(64, 8).unwrap();
        let y = a.alloc(64, 8).unwrap();
        a.free(x);
        a.free(y);
        refused(a, x, FreeErrorKind::NotAllocated);
        // Neither is handed out twice afterwards.
        let p = a.alloc(64, 8).unwrap();
        let q = a.alloc(64, 8).unwrap();
        assert_ne!(p, q);
        a.free(p);
        a.free(q);
    });
}

#[test]
fn percpu_interior_free_is_refused_as_interior() {
    with_alloc(|a| {
        let p = a.alloc(64, 8).unwrap();
        refused(a, raw(p, 8), FreeErrorKind::Interior);
        refused(a, raw(p, 2), FreeErrorKind::Misaligned);
        assert_eq!(a.try_free(p), Ok(64));
    });
}

#[test]
fn percpu_foreign_free_is_refused_as_not_percpu() {
    with_alloc(|a| {
        let mut local = 0u64;
        refused(
            a,
            PcpuPtr::from_raw(NonNull::from(&mut local).cast()),
            FreeErrorKind::NotPercpu,
        );
        // Another unit's copy is not the handle.
        let p = a.alloc(16, 4).unwrap();
        refused(
            a,
            PcpuPtr::from_raw(a.per_cpu_ptr(p, 1)),
            FreeErrorKind::NotPercpu,
        );
        a.free(p);
    });
}

#[test]
fn percpu_static_area_free_is_refused_as_static() {
    with_alloc(|a| {
        let (s, _) = a.static_area().unwrap();
        refused(a, s, FreeErrorKind::Static);
    });
}

#[test]
fn percpu_zero_huge_and_bad_alignment_requests_are_refused() {
    with_alloc(|a| {
        let before = a.stats();
        assert_eq!(a.alloc(0, 4), Err(PcpuError::ZeroSize));
        for size in [MAX_ALLOC_SIZE + 1, usize::MAX, usize::MAX / 2 + 1] {
            assert_eq!(a.alloc(size, 4), Err(PcpuError::TooLarge { size }));
        }
        for align in [0usize, 3, 48, 4097, 8192, 1 << 40, usize::MAX] {
            assert_eq!(
                a.alloc(16, align),
                Err(PcpuError::BadAlign { align }),
                "align {align}"
            );
        }
        a.check_invariants();
        assert_eq!(a.stats().nr_alloc, before.nr_alloc);
    });
}

// ---------------------------------------------------------------------------
// GlobalBitmap (mmap, child processes: not under miri)
// ---------------------------------------------------------------------------

#[cfg(not(miri))]
mod global {
    use super::*;
    use percpu_bitmap::GlobalBitmap;

    static G: GlobalBitmap = GlobalBitmap::new();

    const ENV: &str = "PCPU_SCENARIO";

    /// In the child (selected by `PCPU_SCENARIO`): runs `f`, which must
    /// abort. In the parent: runs the child and checks it died with SIGABRT,
    /// naming GlobalBitmap, the address the child printed and `what`.
    fn aborts(name: &str, what: &str, f: impl FnOnce() -> usize) {
        if std::env::var(ENV).as_deref() == Ok(name) {
            let addr = f();
            eprintln!("no abort at {addr:#x}");
            std::process::exit(0);
        }
        let err = local_lock::child::expect_abort(&format!("global::{name}"), ENV, name);
        let addr = err
            .lines()
            .find_map(|l| l.strip_prefix("ADDR "))
            .unwrap_or_else(|| panic!("{name}: no address printed:\n{err}"));
        let msg = err
            .lines()
            .find(|l| l.starts_with("GlobalBitmap"))
            .unwrap_or_else(|| panic!("{name}: no message:\n{err}"));
        assert!(msg.contains(addr), "{name}: address {addr} missing: {msg}");
        assert!(msg.contains(what), "{name}: {what:?} missing: {msg}");
    }

    /// Prints the address the child is about to misuse (read by the parent).
    fn announce(p: *mut u8) -> usize {
        eprintln!("ADDR {p:p}");
        p as usize
    }

    fn large(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    /// Whether glibc's `malloc` refuses `size` bytes on this machine.
    fn malloc_refuses(size: usize) -> bool {
        // SAFETY: plain malloc/free. Through `black_box`: LLVM may elide
        // a `malloc` whose result is only tested and freed, and answer
        // "not null" without asking glibc (what this test ran into on a
        // machine whose glibc refuses 1 TiB).
        unsafe {
            let p = std::hint::black_box(libc::malloc(std::hint::black_box(size)));
            libc::free(p);
            p.is_null()
        }
    }

    /// With `vm.overcommit_memory = 1` ("always") the OS grants any
    /// mapping that fits the address space, and so does glibc's `malloc`.
    fn overcommit_always() -> bool {
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|s| s.trim() == "1")
    }

    #[test]
    fn large_alloc_of_64_tib_returns_null() {
        if overcommit_always() {
            eprintln!("vm.overcommit_memory = 1: the OS grants 64 TiB; skipped");
            return;
        }
        let l = large(64 << 40);
        // SAFETY: a valid layout; nothing is returned to free.
        unsafe {
            assert!(G.alloc(l).is_null());
            assert!(G.alloc_zeroed(l).is_null());
        }
    }

    /// With the default overcommit heuristic the OS refuses one mapping
    /// larger than RAM + swap: glibc's `malloc` returns null for 1 TiB on
    /// the 23 GiB machine this was written on, and GlobalBitmap must agree
    /// with it on whatever machine runs the test.
    #[test]
    fn large_alloc_of_1_tib_returns_null_where_glibc_malloc_does() {
        let size = 1usize << 40;
        let glibc_null = malloc_refuses(size);
        let l = large(size);
        // SAFETY: a valid layout; freed with it if granted.
        let p = unsafe { G.alloc(l) };
        assert_eq!(p.is_null(), glibc_null, "glibc malloc null: {glibc_null}");
        if !p.is_null() {
            // SAFETY: ours, this layout.
            unsafe { G.dealloc(p, l) };
        }
    }

    #[test]
    fn large_alloc_with_huge_size_or_alignment_returns_null() {
        for (size, align) in [
            (isize::MAX as usize - 4095, 4096),
            (isize::MAX as usize / 2, 1 << 20),
            (1 << 20, 1 << 46),
            (40 << 10, 1 << 62),
        ] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a valid layout.
            assert!(unsafe { G.alloc(l) }.is_null(), "{l:?}");
        }
    }

    #[test]
    fn large_block_alloc_free_is_recorded_and_forgotten() {
        let l = Layout::from_size_align(100 << 10, 1 << 16).unwrap();
        // SAFETY: a valid layout.
        let p = unsafe { G.alloc(l) };
        assert!(!p.is_null() && (p as usize).is_multiple_of(1 << 16));
        assert!(G.large_blocks() >= 1);
        // SAFETY: ours.
        unsafe {
            p.write_bytes(1, l.size());
            G.dealloc(p, l);
        }
    }

    /// The record grows past its first page (256 entries) and keeps every
    /// block findable through growth, tombstones and reuse.
    #[test]
    fn many_large_blocks_are_recorded_freed_and_reused() {
        let l = Layout::from_size_align(40 << 10, 8).unwrap();
        let mut v = Vec::new();
        for round in 0..3 {
            for _ in 0..1500 {
                // SAFETY: a valid layout.
                let p = unsafe { G.alloc(l) };
                assert!(!p.is_null());
                // SAFETY: ours.
                unsafe { p.write(round) };
                v.push(p);
            }
            // Free every other one, then the rest in reverse.
            let (odd, even): (Vec<_>, Vec<_>) =
                v.drain(..).enumerate().partition(|(i, _)| i % 2 == 1);
            for (_, p) in odd.into_iter().chain(even.into_iter().rev()) {
                // SAFETY: ours, this layout.
                unsafe {
                    assert_eq!(p.read(), round);
                    G.dealloc(p, l);
                }
            }
        }
    }

    #[test]
    fn page_aligned_small_block_freed_with_large_layout_aborts_with_message() {
        aborts(
            "page_aligned_small_block_freed_with_large_layout_aborts_with_message",
            "not a live large block",
            || {
                let small = Layout::from_size_align(4096, 4096).unwrap();
                // SAFETY: a valid layout.
                let p = unsafe { G.alloc(small) };
                assert!(!p.is_null() && (p as usize).is_multiple_of(4096));
                announce(p);
                // SAFETY: deliberately wrong: a small block, a large layout.
                unsafe { G.dealloc(p, large(64 << 10)) };
                p as usize
            },
        );
    }

    #[test]
    fn large_block_freed_twice_aborts_with_message() {
        aborts(
            "large_block_freed_twice_aborts_with_message",
            "already freed",
            || {
                let l = large(1 << 20);
                // SAFETY: a valid layout.
                let p = unsafe { G.alloc(l) };
                assert!(!p.is_null());
                // SAFETY: ours; the second free is the misuse.
                unsafe { G.dealloc(p, l) };
                // Someone else maps memory there meanwhile.
                // SAFETY: a fresh mapping (at the hint if free).
                let other = unsafe {
                    libc::mmap(
                        p.cast(),
                        1 << 20,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(other, libc::MAP_FAILED);
                announce(p);
                // SAFETY: deliberately wrong.
                unsafe { G.dealloc(p, l) };
                p as usize
            },
        );
    }

    #[test]
    fn large_block_freed_with_another_size_aborts_with_message() {
        aborts(
            "large_block_freed_with_another_size_aborts_with_message",
            "not of this size",
            || {
                let l = large(1 << 20);
                // SAFETY: a valid layout.
                let p = unsafe { G.alloc(l) };
                assert!(!p.is_null());
                announce(p);
                // SAFETY: deliberately wrong: twice the size.
                unsafe { G.dealloc(p, large(2 << 20)) };
                p as usize
            },
        );
    }

    #[test]
    fn foreign_mapping_freed_with_large_layout_aborts_with_message() {
        aborts(
            "foreign_mapping_freed_with_large_layout_aborts_with_message",
            "not a live large block",
            || {
                // SAFETY: a fresh mapping of someone else's.
                let m = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        1 << 20,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(m, libc::MAP_FAILED);
                let p = announce(m.cast());
                // SAFETY: deliberately wrong.
                unsafe { G.dealloc(m.cast(), large(1 << 20)) };
                p
            },
        );
    }

    #[test]
    fn small_block_freed_twice_aborts_with_message() {
        aborts(
            "small_block_freed_twice_aborts_with_message",
            "is not allocated",
            || {
                let l = Layout::from_size_align(48, 8).unwrap();
                // SAFETY: a valid layout; the second free is the misuse.
                unsafe {
                    let p = G.alloc(l);
                    assert!(!p.is_null());
                    G.dealloc(p, l);
                    announce(p);
                    G.dealloc(p, l);
                    p as usize
                }
            },
        );
    }

    #[test]
    fn small_block_aba_double_free_aborts_with_message() {
        aborts(
            "small_block_aba_double_free_aborts_with_message",
            "is not allocated",
            || {
                let l = Layout::from_size_align(48, 8).unwrap();
                // SAFETY: a valid layout; the third free is the misuse.
                unsafe {
                    let a = G.alloc(l);
                    let b = G.alloc(l);
                    G.dealloc(a, l);
                    G.dealloc(b, l);
                    announce(a);
                    G.dealloc(a, l);
                    a as usize
                }
            },
        );
    }

    #[test]
    fn small_interior_pointer_freed_aborts_with_message() {
        aborts(
            "small_interior_pointer_freed_aborts_with_message",
            "inside a live allocation",
            || {
                let l = Layout::from_size_align(64, 8).unwrap();
                // SAFETY: a valid layout; the interior free is the misuse.
                unsafe {
                    let p = G.alloc(l);
                    let q = p.add(16);
                    announce(q);
                    G.dealloc(q, l);
                    q as usize
                }
            },
        );
    }

    #[test]
    fn foreign_pointer_freed_with_small_layout_aborts_with_message() {
        aborts(
            "foreign_pointer_freed_with_small_layout_aborts_with_message",
            "foreign pointer",
            || {
                let b = Box::new([0u64; 4]);
                let p = Box::into_raw(b).cast::<u8>();
                announce(p);
                // SAFETY: deliberately wrong: not GlobalBitmap's.
                unsafe { G.dealloc(p, Layout::from_size_align(32, 8).unwrap()) };
                p as usize
            },
        );
    }
}
