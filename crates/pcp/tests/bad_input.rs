//! Bad input (issue 14): every misuse of the per-CPU lists ends in a
//! returned error or an abort/panic whose message names the allocator, the
//! address and what was wrong; the state is intact after a refused call.
//! One named test per case, the expected outcome in its name.
//!
//! Misuse that must abort (a global allocator's `dealloc`) runs in a child
//! process (this test binary with `BAD_INPUT_SCENARIO` naming the
//! scenario), checked for `SIGABRT` and its stderr.
#![cfg(not(loom))]

use std::alloc::{alloc_zeroed, dealloc, GlobalAlloc, Layout};
use std::ptr::NonNull;

use buddy::{AllocFlags, Buddy, Config, FreeErrorKind, FreeFlags, Order, Tunables, ZoneId};
use local_lock::test_platform::TestPlatform;
use pcp::{BatchHighError, GlobalPcp, Pcp, Policy, MAX_HIGH};

const PAGE: usize = 4096;
const MAX_ORDER: u8 = 6;
const CPUS: usize = 2;

/// A buddy over `blocks` largest blocks of zeroed heap memory.
struct Mem {
    buddy: Buddy<TestPlatform>,
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    fn new(blocks: usize) -> Mem {
        let block = PAGE << MAX_ORDER;
        let layout = Layout::from_size_align(blocks * block, block).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        let cfg = Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN);
        let buddy = Buddy::new(TestPlatform::pinned(CPUS), cfg);
        // SAFETY: the memory outlives the buddy (dropped with `Mem`, the
        // buddy first) and is used by nothing else.
        unsafe { buddy.add_region(ptr, layout.size(), true) }.unwrap();
        Mem { buddy, ptr, layout }
    }

    fn pcp(&self) -> Pcp<&Buddy<TestPlatform>, TestPlatform, CPUS> {
        let p = Pcp::new(
            &self.buddy,
            ZoneId::new(0),
            TestPlatform::pinned(CPUS),
            Policy::IrqSafe,
        );
        p.set_batch_high(Some((4, 256))).unwrap();
        p
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// Everything is accounted for, the lists are consistent, and after a
/// drain the buddy has it all back.
fn intact(m: &Mem, pcp: &Pcp<&Buddy<TestPlatform>, TestPlatform, CPUS>, live: usize) {
    #[cfg(feature = "invariants")]
    pcp.check_local();
    m.buddy.check_invariants();
    assert_eq!(
        m.buddy.total_free_pages() + pcp.total_count() + live,
        m.buddy.total_managed_pages(),
        "every page accounted for"
    );
}

// --- set_batch_high ----------------------------------------------------------

#[test]
fn set_batch_high_with_nonsense_values_is_refused() {
    let m = Mem::new(1);
    let pcp = m.pcp();
    let before = pcp.batch_high();
    for (v, want) in [
        (
            (usize::MAX, usize::MAX),
            BatchHighError::HighTooLarge { high: usize::MAX },
        ),
        ((0, 16), BatchHighError::ZeroBatch),
        ((0, 0), BatchHighError::ZeroBatch),
        (
            (32, 16),
            BatchHighError::BatchAboveHigh {
                batch: 32,
                high: 16,
            },
        ),
        (
            (4, MAX_HIGH + 1),
            BatchHighError::HighTooLarge { high: MAX_HIGH + 1 },
        ),
        (
            (MAX_HIGH, MAX_HIGH),
            BatchHighError::HighTooLarge { high: 2 * MAX_HIGH },
        ),
    ] {
        let e = pcp.set_batch_high(Some(v)).unwrap_err();
        assert_eq!(e, want, "{v:?}");
        assert!(e.to_string().starts_with("pcp: set_batch_high"), "{e}");
        assert_eq!(pcp.batch_high(), before, "{v:?} changed batch/high");
    }
    // Sensible values still work, high raised to two batches.
    pcp.set_batch_high(Some((8, 10))).unwrap();
    assert_eq!(pcp.batch_high(), (8, 16));
    pcp.set_batch_high(None).unwrap();
    // The lists still work.
    let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
    // SAFETY: ours.
    unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
    intact(&m, &pcp, 0);
}

// --- item 7: a page on a per-CPU list freed straight to the buddy -----------

#[test]
fn buddy_free_of_a_page_on_a_pcp_list_is_refused() {
    let m = Mem::new(2);
    let pcp = m.pcp();
    for order in 0..=3u8 {
        let order = Order::new(order).unwrap();
        for zero in [false, true] {
            let p = pcp.alloc(order, AllocFlags::ZEROED).unwrap();
            let ff = if zero {
                FreeFlags::ZERO
            } else {
                FreeFlags::NONE
            };
            // An order-0 free first: only *consecutive* high-order frees
            // are freed at once (Linux 6.7+'s `free_high`), and this page
            // must stay on the list.
            let q = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
            // SAFETY: ours.
            unsafe { pcp.free(q.ptr, Order::ZERO, FreeFlags::NONE) };
            // SAFETY: ours, still zero.
            unsafe { pcp.free(p.ptr, order, ff) };
            // The page now sits on this CPU's (zero or normal) list.
            let free = m.buddy.total_free_pages();
            // SAFETY: refused (that is what is tested).
            let e = unsafe { m.buddy.try_free_pages(p.ptr, order, FreeFlags::NONE) }.unwrap_err();
            assert_eq!(e.kind, FreeErrorKind::OnPcpList, "{e}");
            let msg = e.to_string();
            assert!(msg.contains("buddy"), "{msg}");
            assert!(msg.contains(&format!("{:#x}", p.addr())), "{msg}");
            assert!(msg.contains("per-CPU"), "{msg}");
            // In bulk too, and as zero.
            // SAFETY: refused.
            let e = unsafe { m.buddy.try_free_bulk_keep_zero(ZoneId::new(0), [p]) }.unwrap_err();
            assert_eq!(e.kind, FreeErrorKind::OnPcpList, "{e}");
            assert_eq!(
                m.buddy.total_free_pages(),
                free,
                "a refused free changed the buddy"
            );
            intact(&m, &pcp, 0);
        }
    }
    // The pages still come out of the lists once each.
    let mut seen = std::collections::BTreeSet::new();
    while let Some(p) = pcp.alloc(Order::ZERO, AllocFlags::NONE) {
        assert!(
            seen.insert(p.addr()),
            "page {:#x} handed out twice",
            p.addr()
        );
        if pcp.total_count() == 0 {
            break;
        }
    }
    for a in seen {
        let p = NonNull::new(a as *mut u8).unwrap();
        // SAFETY: ours (allocated above).
        unsafe { pcp.free(p, Order::ZERO, FreeFlags::NONE) };
    }
    pcp.drain_local();
    intact(&m, &pcp, 0);
    assert_eq!(m.buddy.total_free_pages(), m.buddy.total_managed_pages());
}

#[test]
fn pcp_double_free_is_refused() {
    let m = Mem::new(1);
    let pcp = m.pcp();
    let a = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
    let b = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
    // SAFETY: ours.
    unsafe { pcp.free(a.ptr, a.order, FreeFlags::NONE) };
    // SAFETY: ours.
    unsafe { pcp.free(b.ptr, b.order, FreeFlags::NONE) };
    // SAFETY: refused (a free, b free, a again).
    let e = unsafe { pcp.try_free(a.ptr, a.order, FreeFlags::NONE) }.unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("pcp: double free"), "{msg}");
    assert!(msg.contains(&format!("{:p}", a.ptr)), "{msg}");
    intact(&m, &pcp, 0);
}

#[test]
fn pcp_free_of_an_interior_pointer_or_a_wrong_order_is_refused() {
    let m = Mem::new(1);
    let pcp = m.pcp();
    let a = pcp.alloc(Order::new(2).unwrap(), AllocFlags::NONE).unwrap();
    let inner = NonNull::new(a.ptr.as_ptr().wrapping_add(PAGE)).unwrap();
    // SAFETY: refused.
    let e = unsafe { pcp.try_free(inner, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
    assert!(e.to_string().contains("not a block head"), "{e}");
    // SAFETY: refused.
    let e = unsafe { pcp.try_free(a.ptr, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
    assert!(e.to_string().contains("allocated as"), "{e}");
    intact(&m, &pcp, 4);
    // SAFETY: ours.
    unsafe { pcp.free(a.ptr, a.order, FreeFlags::NONE) };
    intact(&m, &pcp, 0);
}

#[test]
fn pcp_free_of_an_address_inside_a_page_is_refused() {
    // The free's check finds the page's descriptor by the address's page
    // frame; only the head's first byte (its `aux`) passes, not a byte
    // inside the page (issue #22: that compare replaced the alignment mask).
    let m = Mem::new(1);
    let pcp = m.pcp();
    let a = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
    for off in [1, 8, PAGE - 1] {
        let inner = NonNull::new(a.ptr.as_ptr().wrapping_add(off)).unwrap();
        // SAFETY: refused.
        let e = unsafe { pcp.try_free(inner, Order::ZERO, FreeFlags::NONE) }.unwrap_err();
        assert!(e.to_string().contains("not a block head"), "{e}");
        assert!(m.buddy.head_owner(inner.as_ptr(), Order::ZERO).is_none());
    }
    assert!(m.buddy.head_owner(a.ptr.as_ptr(), Order::ZERO).is_some());
    intact(&m, &pcp, 1);
    // SAFETY: ours.
    unsafe { pcp.free(a.ptr, a.order, FreeFlags::NONE) };
    intact(&m, &pcp, 0);
}

// --- the GlobalAlloc path: children that must abort --------------------------

const SCENARIO: &str = "BAD_INPUT_SCENARIO";

#[cfg(unix)]
fn run_child_abort(name: &str) -> String {
    local_lock::child::expect_abort("child_scenarios", SCENARIO, name)
}

/// The child side (nothing when the variable is unset).
#[test]
fn child_scenarios() {
    let Ok(name) = std::env::var(SCENARIO) else {
        return;
    };
    match name.as_str() {
        "listed_page_to_global_buddy" => child_listed_page_to_global_buddy(),
        "global_pcp_double_free" => child_global_pcp_double_free(),
        "global_pcp_large_freed_twice" => child_global_pcp_large_freed_twice(),
        "small_requests_without_room_for_a_reservation" => {
            child_small_requests_without_room_for_a_reservation();
            std::process::exit(0)
        }
        other => panic!("unknown scenario {other}"),
    }
    eprintln!("scenario {name}: no abort");
    std::process::exit(3);
}

static HEAP: GlobalPcp = GlobalPcp::new();

fn page_layout() -> Layout {
    Layout::from_size_align(PAGE, PAGE).unwrap()
}

fn child_listed_page_to_global_buddy() {
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(page_layout()) };
    assert!(!p.is_null());
    // SAFETY: ours: onto this thread's list.
    unsafe { HEAP.dealloc(p, page_layout()) };
    eprintln!("listed page at {p:p}");
    // SAFETY: deliberately wrong: the GlobalBuddy underneath must refuse.
    unsafe { HEAP.pcp().source().dealloc(p, page_layout()) };
}

fn child_global_pcp_double_free() {
    // SAFETY: a valid layout.
    let a = unsafe { HEAP.alloc(page_layout()) };
    // SAFETY: a valid layout.
    let b = unsafe { HEAP.alloc(page_layout()) };
    // SAFETY: ours.
    unsafe { HEAP.dealloc(a, page_layout()) };
    // SAFETY: ours.
    unsafe { HEAP.dealloc(b, page_layout()) };
    eprintln!("listed page at {a:p}");
    // SAFETY: deliberately wrong.
    unsafe { HEAP.dealloc(a, page_layout()) };
}

fn child_global_pcp_large_freed_twice() {
    let l = Layout::from_size_align(8 << 20, 8).unwrap();
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(l) };
    assert!(!p.is_null());
    // SAFETY: ours.
    unsafe { HEAP.dealloc(p, l) };
    eprintln!("listed page at {p:p}");
    // SAFETY: deliberately wrong: must abort, never munmap.
    unsafe { HEAP.dealloc(p, l) };
}

#[cfg(unix)]
fn named_addr(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("listed page at"))
        .unwrap_or_else(|| panic!("no address line in:\n{stderr}"));
    line.rsplit(' ').next().unwrap().to_string()
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_buddy_dealloc_of_a_page_on_a_pcp_list_aborts() {
    let err = run_child_abort("listed_page_to_global_buddy");
    let addr = named_addr(&err);
    assert!(err.contains("buddy: bad free of"), "{err}");
    assert!(err.contains(&addr), "address {addr} not named:\n{err}");
    assert!(err.contains("per-CPU"), "{err}");
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_pcp_double_free_aborts() {
    let err = run_child_abort("global_pcp_double_free");
    let addr = named_addr(&err);
    assert!(err.contains("pcp: double free"), "{err}");
    assert!(err.contains(&addr), "address {addr} not named:\n{err}");
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_pcp_large_block_freed_twice_aborts() {
    let err = run_child_abort("global_pcp_large_freed_twice");
    let addr = named_addr(&err);
    assert!(err.contains("GlobalBuddy"), "{err}");
    assert!(err.contains(&addr), "address {addr} not named:\n{err}");
    assert!(err.contains("not a direct mapping"), "{err}");
}

// --- growth failures: small requests still served ----------------------------

/// Maps `len`-byte chunks until `mmap` refuses (at most the Vec's room).
fn fill(out: &mut Vec<*mut libc::c_void>, len: usize) {
    while out.len() < out.capacity() {
        // SAFETY: a fresh anonymous mapping anywhere.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return;
        }
        out.push(p);
    }
}

fn child_small_requests_without_room_for_a_reservation() {
    const BIG: usize = 8 << 20;
    const SMALL: usize = 64 << 10;
    let mut big = Vec::with_capacity(4096);
    let mut small = Vec::with_capacity(1 << 15);
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let vm: usize = statm.split_whitespace().next().unwrap().parse().unwrap();
    let r = libc::rlimit {
        rlim_cur: (vm * PAGE + (256 << 20)) as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) }, 0);
    // Fill the address space, leaving room for small mappings only.
    fill(&mut big, BIG);
    let p = big.pop().unwrap();
    // SAFETY: our own chunk.
    unsafe { libc::munmap(p, BIG) };
    fill(&mut small, SMALL);
    for _ in 0..8 {
        let p = small.pop().unwrap();
        // SAFETY: our own chunk.
        unsafe { libc::munmap(p, SMALL) };
    }
    let mut got = Vec::with_capacity(16);
    for i in 0..16 {
        // SAFETY: a valid layout.
        let p = unsafe { HEAP.alloc_zeroed(page_layout()) };
        assert!(
            !p.is_null(),
            "small request {i} failed with room for small mappings"
        );
        // SAFETY: ours, one page.
        let s = unsafe { std::slice::from_raw_parts_mut(p, PAGE) };
        assert!(s.iter().all(|&b| b == 0));
        s.fill(i as u8);
        got.push(p);
    }
    for (i, p) in got.into_iter().enumerate() {
        // SAFETY: ours.
        let s = unsafe { std::slice::from_raw_parts(p, PAGE) };
        assert!(s.iter().all(|&b| b == i as u8));
        // SAFETY: ours, with its layout.
        unsafe { HEAP.dealloc(p, page_layout()) };
    }
    assert_eq!(HEAP.pcp().source().direct_mappings(), 0);
    for (v, len) in [(&mut big, BIG), (&mut small, SMALL)] {
        for p in v.drain(..) {
            // SAFETY: our own chunk.
            unsafe { libc::munmap(p, len) };
        }
    }
}

#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "spawns a process, setrlimit and mmap")]
fn global_pcp_small_requests_without_room_for_a_reservation_are_served() {
    local_lock::child::expect_success(
        "child_scenarios",
        SCENARIO,
        "small_requests_without_room_for_a_reservation",
    );
}
