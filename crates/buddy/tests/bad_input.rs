//! Bad input (issue 14): every misuse of the buddy ends in a returned
//! error, a `None`/null, or an abort whose message names the allocator,
//! the address and what was wrong; the allocator's state is intact after a
//! refused call. One named test per case, the expected outcome in its name.
//!
//! Misuse that must abort (a `GlobalAlloc::dealloc` of a bad pointer) is
//! tested by re-running this test binary as a child process with
//! `BAD_INPUT_SCENARIO` naming the scenario, and checking that it died with
//! `SIGABRT` and what it wrote on stderr.
#![cfg(not(loom))]

use std::alloc::{alloc_zeroed, dealloc, GlobalAlloc, Layout};
use std::ptr::NonNull;

use buddy::{
    AllocFlags, Buddy, Config, FreeErrorKind, FreeFlags, GlobalBuddy, Order, RegionError, Tunables,
    ZoneId, PCP_TAG,
};
use local_lock::std_platform::StdCpu;

const PAGE: usize = 4096;
const MAX_ORDER: u8 = 4;
const BLOCK: usize = PAGE << MAX_ORDER;

fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

/// A zeroed arena of `blocks` largest blocks, aligned to a block, freed on
/// drop.
struct Arena {
    ptr: *mut u8,
    layout: Layout,
}

impl Arena {
    fn new(blocks: usize) -> Arena {
        let layout = Layout::from_size_align(blocks * BLOCK, BLOCK).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Arena { ptr, layout }
    }
    fn at(&self, off: usize) -> *mut u8 {
        self.ptr.wrapping_add(off)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the buddy using it
        // is dropped first (declared after the arena in each test).
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

fn new_buddy() -> Buddy<StdCpu> {
    Buddy::new(
        StdCpu::new(),
        Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN),
    )
}

/// The full invariant checker where it is built (`--features invariants`),
/// else the free count against the managed count's bounds.
fn invariants(b: &Buddy<StdCpu>) {
    #[cfg(feature = "invariants")]
    b.check_invariants();
    assert!(b.total_free_pages() <= b.total_managed_pages());
}

// --- item 6: add_region of memory already added -----------------------------

#[test]
fn add_region_twice_is_refused() {
    let arena = Arena::new(4);
    let b = new_buddy();
    // SAFETY: the arena is ours, zero, and outlives the buddy.
    let n = unsafe { b.add_region(arena.at(0), 4 * BLOCK, true) }.unwrap();
    let free = b.total_free_pages();
    assert_eq!(free, n);
    // SAFETY: refused before anything is touched (that is what is tested).
    let r = unsafe { b.add_region(arena.at(0), 4 * BLOCK, true) };
    assert_eq!(r, Err(RegionError::Overlap));
    assert_eq!(b.total_free_pages(), free, "state changed by a refused add");
    assert_eq!(b.total_managed_pages(), n);
    invariants(&b);
}

#[test]
fn add_region_overlapping_an_added_region_is_refused() {
    let arena = Arena::new(8);
    let b = new_buddy();
    // SAFETY: the arena is ours, zero, and outlives the buddy.
    let n = unsafe { b.add_region(arena.at(0), 4 * BLOCK, true) }.unwrap();
    let free = b.total_free_pages();
    // Straddles the end of the first region (its last block and beyond).
    // SAFETY: refused before anything is touched.
    let r = unsafe { b.add_region(arena.at(3 * BLOCK), 3 * BLOCK, true) };
    assert_eq!(r, Err(RegionError::Overlap));
    // Lies inside it (not touching its memmap).
    // SAFETY: as above.
    let r = unsafe { b.add_region(arena.at(2 * BLOCK + PAGE), 3 * PAGE, true) };
    assert_eq!(r, Err(RegionError::Overlap));
    // Only its memmap (the first pages of the carved span).
    // SAFETY: as above.
    let r = unsafe { b.add_region(arena.at(0), PAGE, true) };
    assert_eq!(r, Err(RegionError::Overlap));
    assert_eq!(b.total_free_pages(), free);
    assert_eq!(b.total_managed_pages(), n);
    invariants(&b);
    // The part beyond is still accepted.
    // SAFETY: new memory.
    let m = unsafe { b.add_region(arena.at(4 * BLOCK), 4 * BLOCK, true) }.unwrap();
    assert_eq!(b.total_managed_pages(), n + m);
    invariants(&b);
}

#[test]
fn add_region_twice_in_a_declared_span_is_refused() {
    let arena = Arena::new(4);
    let b = new_buddy();
    let mm_len = b.memmap_bytes(4 * BLOCK);
    let mm_layout = Layout::from_size_align(mm_len, Buddy::<StdCpu>::MEMMAP_ALIGN).unwrap();
    // SAFETY: non-zero size.
    let mm = unsafe { alloc_zeroed(mm_layout) };
    // SAFETY: the arena and memmap are ours and outlive the buddy.
    unsafe { b.add_span(arena.at(0), 4 * BLOCK, mm, true) }.unwrap();
    // Two holes-separated regions, then each again and an overlap.
    // SAFETY: ours.
    let a = unsafe { b.add_region(arena.at(PAGE), BLOCK, true) }.unwrap();
    // SAFETY: ours.
    let c = unsafe { b.add_region(arena.at(2 * BLOCK), BLOCK, true) }.unwrap();
    let free = b.total_free_pages();
    // Allocate a block so the descriptors are a mix of free and allocated.
    let p = b.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    for (off, len) in [
        (PAGE, BLOCK),
        (2 * BLOCK, BLOCK),
        (BLOCK, 2 * PAGE),
        (2 * BLOCK - PAGE, 2 * PAGE),
        (0, 4 * BLOCK),
    ] {
        // SAFETY: refused before anything is touched.
        let r = unsafe { b.add_region(arena.at(off), len, true) };
        assert_eq!(
            r,
            Err(RegionError::Overlap),
            "region at +{off:#x}, {len:#x}"
        );
    }
    // SAFETY: ours, from this buddy.
    unsafe { b.free_pages(p.ptr, p.order) };
    assert_eq!(b.total_free_pages(), free);
    assert_eq!(b.total_managed_pages(), a + c);
    invariants(&b);
    // The hole between them is still accepted.
    // SAFETY: ours, never added.
    let h = unsafe { b.add_region(arena.at(BLOCK + PAGE), BLOCK - PAGE, true) }.unwrap();
    assert_eq!(h, BLOCK / PAGE - 1);
    invariants(&b);
    // The buddy is not used after this.
    let _ = b;
    // SAFETY: allocated above with this layout; the buddy is done with it.
    unsafe { dealloc(mm, mm_layout) };
}

// --- item 7: a page on a per-CPU list freed to the buddy --------------------

#[test]
fn free_of_a_page_tagged_on_a_pcp_list_is_refused() {
    let arena = Arena::new(2);
    let b = new_buddy();
    // SAFETY: ours.
    unsafe { b.add_region(arena.at(0), 2 * BLOCK, true) }.unwrap();
    let p = b.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // What pcp does when it links the page into a list.
    let owner = b.owner_of(p.ptr.as_ptr()).unwrap().owner;
    owner
        .tag()
        .store(PCP_TAG | 0x11, std::sync::atomic::Ordering::Relaxed);
    let free = b.total_free_pages();
    // SAFETY: refused (that is what is tested).
    let e = unsafe { b.try_free_pages(p.ptr, p.order, FreeFlags::NONE) }.unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::OnPcpList);
    let msg = e.to_string();
    assert!(
        msg.contains("buddy") && msg.contains(&format!("{:#x}", p.addr())),
        "{msg}"
    );
    assert!(msg.contains("per-CPU"), "{msg}");
    // Of another order: still named as on a pcp list.
    // SAFETY: refused.
    let e = unsafe { b.try_free_pages(p.ptr, o(0), FreeFlags::NONE) }.unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::OnPcpList);
    // In bulk too.
    // SAFETY: refused.
    let e = unsafe { b.try_free_bulk(ZoneId::new(0), [p]) }.unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::OnPcpList);
    assert_eq!(
        b.total_free_pages(),
        free,
        "a refused free changed the state"
    );
    invariants(&b);
    // Handed out by the pcp (tag cleared): the free is accepted.
    owner.tag().store(0, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: ours.
    unsafe { b.free_pages(p.ptr, p.order) };
    invariants(&b);
}

// --- item 10: known-zero claims of bulk frees --------------------------------

#[test]
fn free_bulk_of_written_pages_never_yields_nonzero_zeroed_blocks() {
    let arena = Arena::new(4);
    let b = new_buddy();
    // SAFETY: ours, zero.
    unsafe { b.add_region(arena.at(0), 4 * BLOCK, true) }.unwrap();
    let mut got = Vec::new();
    let n = b.alloc_bulk(ZoneId::new(0), o(0), AllocFlags::ZEROED, 32, |p| {
        got.push(p)
    });
    assert_eq!(n, 32);
    assert!(got.iter().all(|p| p.zero), "fresh memory is known zero");
    for p in &got {
        // SAFETY: ours, one page.
        unsafe { p.ptr.as_ptr().write_bytes(0x5a, PAGE) };
    }
    // Hand back the very `Page`s alloc_bulk returned (zero: true).
    // SAFETY: ours, from this buddy.
    let freed = unsafe { b.free_bulk(ZoneId::new(0), got) };
    assert_eq!(freed, 32);
    invariants(&b);
    let mut held = Vec::new();
    while let Some(p) = b.alloc_pages(o(0), AllocFlags::ZEROED) {
        // SAFETY: ours, one page.
        let s = unsafe { std::slice::from_raw_parts(p.ptr.as_ptr(), PAGE) };
        assert!(
            s.iter().all(|&x| x == 0),
            "ZEROED page {:p} is not zero",
            p.ptr
        );
        held.push(p);
    }
    assert_eq!(held.len(), b.total_managed_pages());
    for p in held {
        // SAFETY: ours.
        unsafe { b.free_pages(p.ptr, p.order) };
    }
    invariants(&b);
}

#[test]
fn free_bulk_keep_zero_keeps_zero_pages_and_free_bulk_does_not() {
    for keep in [true, false] {
        let arena = Arena::new(1);
        let b = new_buddy();
        // SAFETY: ours, zero.
        let n = unsafe { b.add_region(arena.at(0), BLOCK, true) }.unwrap();
        let mut got = Vec::new();
        b.alloc_bulk(ZoneId::new(0), o(0), AllocFlags::ZEROED, n, |p| got.push(p));
        assert_eq!(got.len(), n);
        // SAFETY: ours, untouched (still zero).
        unsafe {
            if keep {
                b.free_bulk_keep_zero(ZoneId::new(0), got)
            } else {
                b.free_bulk(ZoneId::new(0), got)
            }
        };
        let before = b.stat(buddy::Stat::BYTES_CLEARED);
        let held: Vec<_> = (0..n)
            .map(|_| b.alloc_pages(o(0), AllocFlags::ZEROED).unwrap())
            .collect();
        let cleared = b.stat(buddy::Stat::BYTES_CLEARED) - before;
        assert_eq!(
            cleared == 0,
            keep,
            "keep_zero {keep}: cleared {cleared} bytes"
        );
        for p in held {
            // SAFETY: ours.
            unsafe { b.free_pages(p.ptr, p.order) };
        }
        invariants(&b);
    }
}

// --- bad frees (already refused; named here for the "what misuse does" table)

#[test]
fn free_with_a_huge_order_is_refused() {
    let arena = Arena::new(1);
    let b = new_buddy();
    // SAFETY: ours.
    unsafe { b.add_region(arena.at(0), BLOCK, true) }.unwrap();
    let p = b.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let huge = Order::new(buddy::ORDER_LIMIT).unwrap_or(o(MAX_ORDER + 1));
    // SAFETY: refused.
    let e = unsafe { b.try_free_pages(p.ptr, huge, FreeFlags::NONE) }.unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::BadOrder);
    assert!(b.alloc_pages(huge, AllocFlags::NONE).is_none());
    // SAFETY: ours.
    unsafe { b.free_pages(p.ptr, p.order) };
    invariants(&b);
}

#[test]
fn double_free_and_aba_free_are_refused() {
    let arena = Arena::new(1);
    let b = new_buddy();
    // SAFETY: ours.
    unsafe { b.add_region(arena.at(0), BLOCK, true) }.unwrap();
    let x = b.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let y = b.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    // SAFETY: ours.
    unsafe { b.free_pages(x.ptr, x.order) };
    // SAFETY: ours.
    unsafe { b.free_pages(y.ptr, y.order) };
    // SAFETY: refused.
    let e = unsafe { b.try_free_pages(x.ptr, x.order, FreeFlags::NONE) }.unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::DoubleFree { .. }), "{e}");
    invariants(&b);
    assert_eq!(b.total_free_pages(), b.total_managed_pages());
}

#[test]
fn free_of_a_foreign_or_interior_pointer_is_refused() {
    let arena = Arena::new(1);
    let b = new_buddy();
    // SAFETY: ours.
    unsafe { b.add_region(arena.at(0), BLOCK, true) }.unwrap();
    let x = b.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    let mut local = [0u8; 64];
    let foreign = NonNull::new(local.as_mut_ptr()).unwrap();
    // SAFETY: refused.
    let e = unsafe { b.try_free_pages(foreign, o(0), FreeFlags::NONE) }.unwrap_err();
    assert!(
        matches!(e.kind, FreeErrorKind::NotOwned | FreeErrorKind::Misaligned),
        "{e}"
    );
    let interior = NonNull::new(x.ptr.as_ptr().wrapping_add(PAGE)).unwrap();
    // SAFETY: refused.
    let e = unsafe { b.try_free_pages(interior, o(0), FreeFlags::NONE) }.unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::NotHead { .. }), "{e}");
    // SAFETY: ours.
    unsafe { b.free_pages(x.ptr, x.order) };
    invariants(&b);
}

// --- GlobalBuddy misuse that must abort (child processes) --------------------

/// The environment variable that selects a child scenario.
const SCENARIO: &str = "BAD_INPUT_SCENARIO";

/// Runs `name` in a child (this binary, only the `child_scenarios` test)
/// and returns its stderr; asserts it died with SIGABRT.
#[cfg(unix)]
fn run_child_abort(name: &str) -> String {
    local_lock::child::expect_abort("child_scenarios", SCENARIO, name)
}

/// The child side: runs the scenario named by [`SCENARIO`] (nothing when
/// unset, so it passes in the normal run).
#[test]
fn child_scenarios() {
    let Ok(name) = std::env::var(SCENARIO) else {
        return;
    };
    match name.as_str() {
        "small_freed_as_large" => child_small_freed_as_large(),
        "large_freed_twice" => child_large_freed_twice(),
        "large_freed_with_wrong_size" => child_large_freed_with_wrong_size(),
        "regrow_after_full_address_space" => {
            child_regrow_after_full_address_space();
            std::process::exit(0)
        }
        "direct_mappings_under_rlimit" => {
            child_direct_mappings_under_rlimit();
            std::process::exit(0)
        }
        "small_requests_without_room_for_a_reservation" => {
            child_small_requests_without_room_for_a_reservation();
            std::process::exit(0)
        }
        other => panic!("unknown scenario {other}"),
    }
    // Reaching here means the misuse was not caught.
    eprintln!("scenario {name}: no abort");
    std::process::exit(3);
}

/// A layout above the largest block: a direct mapping.
fn large() -> Layout {
    Layout::from_size_align(8 << 20, 8).unwrap()
}

fn child_small_freed_as_large() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    let small = Layout::from_size_align(PAGE, PAGE).unwrap();
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(small) };
    assert!(!p.is_null());
    eprintln!("small block at {p:p}");
    // SAFETY: deliberately wrong (the misuse under test): must abort.
    unsafe { HEAP.dealloc(p, large()) };
}

fn child_large_freed_twice() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(large()) };
    assert!(!p.is_null());
    eprintln!("large block at {p:p}");
    // SAFETY: ours, with its layout.
    unsafe { HEAP.dealloc(p, large()) };
    // Someone else maps memory there meanwhile (another library).
    // SAFETY: a fresh anonymous mapping (the kernel picks the address).
    let other = unsafe {
        libc::mmap(
            p.cast(),
            8 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(other, libc::MAP_FAILED);
    // SAFETY: deliberately wrong: must abort, not unmap `other`.
    unsafe { HEAP.dealloc(p, large()) };
}

fn child_large_freed_with_wrong_size() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(large()) };
    assert!(!p.is_null());
    eprintln!("large block at {p:p}");
    let bigger = Layout::from_size_align(16 << 20, 8).unwrap();
    // SAFETY: deliberately wrong: must abort.
    unsafe { HEAP.dealloc(p, bigger) };
}

#[cfg(unix)]
fn block_addr(stderr: &str, what: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(what))
        .unwrap_or_else(|| panic!("no '{what}' line in:\n{stderr}"));
    line.rsplit(' ').next().unwrap().to_string()
}

/// Runs `scenario` in a child that must abort with a message naming
/// GlobalBuddy, the block the child announced after `marker`, and `what`.
#[cfg(unix)]
fn child_aborts_naming(scenario: &str, marker: &str, what: &str) {
    let err = run_child_abort(scenario);
    let addr = block_addr(&err, marker);
    assert!(err.contains("GlobalBuddy"), "{err}");
    assert!(err.contains(&addr), "address {addr} not named:\n{err}");
    assert!(err.contains(what), "{err}");
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_dealloc_of_a_small_block_with_a_large_layout_aborts() {
    child_aborts_naming(
        "small_freed_as_large",
        "small block at",
        "not a direct mapping",
    );
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_dealloc_of_a_large_block_twice_aborts() {
    child_aborts_naming(
        "large_freed_twice",
        "large block at",
        "not a direct mapping",
    );
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process and uses mmap")]
fn global_dealloc_of_a_large_block_with_another_size_aborts() {
    child_aborts_naming("large_freed_with_wrong_size", "large block at", "bytes");
}

// --- item 8: growth after a failure, and RLIMIT_AS ---------------------------

/// Runs `name` in a child and asserts it exited successfully; returns its
/// stderr.
#[cfg(unix)]
fn run_child_ok(name: &str) -> String {
    local_lock::child::expect_success("child_scenarios", SCENARIO, name)
}

/// The process's address space now (bytes), from `/proc/self/statm`.
fn vm_size() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = s.split_whitespace().next().unwrap().parse().unwrap();
    pages * PAGE
}

/// Sets `RLIMIT_AS` to the current address space plus `extra` bytes.
fn limit_address_space(extra: usize) {
    let lim = (vm_size() + extra) as libc::rlim_t;
    let r = libc::rlimit {
        rlim_cur: lim,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) }, 0);
}

const CHUNK: usize = 8 << 20;

/// Maps 8 MiB chunks until `mmap` refuses; returns them (the Vec's room is
/// reserved before the limit is set by the caller).
fn fill_with_mmap(out: &mut Vec<*mut libc::c_void>) {
    while out.len() < out.capacity() {
        // SAFETY: a fresh anonymous mapping anywhere.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK,
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

fn unmap_all(v: &mut Vec<*mut libc::c_void>) {
    unmap_all_of(v, CHUNK);
}

fn unmap_all_of(v: &mut Vec<*mut libc::c_void>, len: usize) {
    for p in v.drain(..) {
        // SAFETY: our own chunk of `len` bytes.
        unsafe { libc::munmap(p, len) };
    }
}

/// Fills the address space (8 MiB chunks, then 64 KiB ones) and frees
/// eight 64 KiB pieces again: room for small mappings, none for a heap
/// reservation. Returns the chunks (8 MiB, 64 KiB) to unmap later.
pub fn leave_only_small_room() -> (Vec<*mut libc::c_void>, Vec<*mut libc::c_void>) {
    let mut big = Vec::with_capacity(4096);
    let mut small = Vec::with_capacity(1 << 15);
    limit_address_space(256 << 20);
    fill_with_mmap(&mut big);
    // What is left is less than 8 MiB; make it 8 MiB and fill that with
    // 64 KiB pieces (no 4 MiB-aligned reservation fits between them).
    if let Some(p) = big.pop() {
        // SAFETY: our own chunk.
        unsafe { libc::munmap(p, CHUNK) };
    }
    while small.len() < small.capacity() {
        // SAFETY: a fresh anonymous mapping anywhere.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                64 << 10,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            break;
        }
        small.push(p);
    }
    for _ in 0..8 {
        if let Some(p) = small.pop() {
            // SAFETY: our own chunk.
            unsafe { libc::munmap(p, 64 << 10) };
        }
    }
    (big, small)
}

fn child_regrow_after_full_address_space() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    let block = Layout::from_size_align(64 << 10, 8).unwrap();
    let mut chunks = Vec::with_capacity(4096);
    let mut blocks = Vec::with_capacity(1 << 16);
    limit_address_space(256 << 20);
    // Someone else fills the address space.
    fill_with_mmap(&mut chunks);
    eprintln!("filled with {} chunks", chunks.len());
    // The heap cannot grow now: null, no crash.
    loop {
        // SAFETY: a valid layout.
        let p = unsafe { HEAP.alloc(block) };
        if p.is_null() || blocks.len() == blocks.capacity() {
            break;
        }
        blocks.push(p);
    }
    let before = blocks.len();
    eprintln!("blocks while full: {before}");
    // The other mappings go away: the heap must grow again.
    unmap_all(&mut chunks);
    loop {
        // SAFETY: a valid layout.
        let p = unsafe { HEAP.alloc(block) };
        if p.is_null() || blocks.len() == blocks.capacity() {
            break;
        }
        blocks.push(p);
    }
    let after = blocks.len() - before;
    eprintln!("blocks after the address space was freed: {after}");
    // 256 MiB of room: most of it as 64 KiB blocks (glibc: ~3000).
    assert!(
        after >= 2000,
        "only {after} blocks after the address space was freed"
    );
    for p in blocks {
        // SAFETY: ours, with this layout.
        unsafe { HEAP.dealloc(p, block) };
    }
}

fn child_direct_mappings_under_rlimit() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    let big = Layout::from_size_align(CHUNK, 8).unwrap();
    let small = Layout::from_size_align(100, 8).unwrap();
    let mut chunks = Vec::with_capacity(4096);
    let mut blocks = Vec::with_capacity(4096);
    limit_address_space(256 << 20);
    fill_with_mmap(&mut chunks);
    let plain = chunks.len();
    unmap_all(&mut chunks);
    // A program's first small allocation reserves the heap.
    // SAFETY: a valid layout.
    let s = unsafe { HEAP.alloc(small) };
    assert!(!s.is_null(), "the first small allocation failed");
    loop {
        // SAFETY: a valid layout.
        let p = unsafe { HEAP.alloc(big) };
        if p.is_null() || blocks.len() == blocks.capacity() {
            break;
        }
        blocks.push(p);
    }
    let ours = blocks.len();
    eprintln!("8 MiB mappings: plain mmap {plain}, GlobalBuddy {ours}");
    assert!(
        ours + 2 >= plain,
        "GlobalBuddy fits {ours} direct mappings of 8 MiB where mmap fits {plain}"
    );
    for p in blocks {
        // SAFETY: ours, with this layout.
        unsafe { HEAP.dealloc(p, big) };
    }
    // SAFETY: ours.
    unsafe { HEAP.dealloc(s, small) };
    // Still usable: the small path and the direct path.
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(big) };
    assert!(!p.is_null());
    // SAFETY: ours.
    unsafe { HEAP.dealloc(p, big) };
}

#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "spawns a process, setrlimit and mmap")]
fn growth_after_the_address_space_was_full_and_freed_succeeds() {
    let err = run_child_ok("regrow_after_full_address_space");
    eprintln!("{err}");
}

#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "spawns a process, setrlimit and mmap")]
fn direct_mappings_under_rlimit_as_fit_about_as_many_as_plain_mmap() {
    let err = run_child_ok("direct_mappings_under_rlimit");
    eprintln!("{err}");
}

fn child_small_requests_without_room_for_a_reservation() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    let page = Layout::from_size_align(PAGE, PAGE).unwrap();
    let two = Layout::from_size_align(5000, 8).unwrap();
    let (mut big, mut small) = leave_only_small_room();
    eprintln!(
        "address space filled: {} x 8 MiB, {} x 64 KiB",
        big.len(),
        small.len()
    );
    let mut got = [std::ptr::null_mut(); 16];
    for (i, g) in got.iter_mut().enumerate() {
        // SAFETY: a valid layout.
        let p = unsafe {
            if i % 2 == 0 {
                HEAP.alloc(page)
            } else {
                HEAP.alloc_zeroed(page)
            }
        };
        assert!(
            !p.is_null(),
            "small request {i} failed with room for small mappings"
        );
        // SAFETY: ours, one page.
        let s = unsafe { std::slice::from_raw_parts_mut(p, PAGE) };
        if i % 2 == 1 {
            assert!(s.iter().all(|&b| b == 0), "alloc_zeroed not zero");
        }
        s.fill(i as u8);
        *g = p;
    }
    // Two pages (order 1), grown in place within its block.
    // SAFETY: a valid layout.
    let q = unsafe { HEAP.alloc(two) };
    assert!(!q.is_null());
    // SAFETY: ours; 8000 bytes still fit the order-1 block.
    let q2 = unsafe { HEAP.realloc(q, two, 8000) };
    assert_eq!(q2, q, "realloc within the block moved");
    // SAFETY: ours, with the layout of the realloc.
    unsafe { HEAP.dealloc(q2, Layout::from_size_align(8000, 8).unwrap()) };
    for (i, p) in got.into_iter().enumerate() {
        // SAFETY: ours, one page.
        let s = unsafe { std::slice::from_raw_parts(p, PAGE) };
        assert!(s.iter().all(|&b| b == i as u8), "contents lost");
        // SAFETY: ours, with its layout.
        unsafe { HEAP.dealloc(p, page) };
    }
    assert_eq!(HEAP.direct_mappings(), 0, "direct mappings left");
    unmap_all(&mut big);
    unmap_all_of(&mut small, 64 << 10);
    // With room again, the heap grows as usual.
    // SAFETY: a valid layout.
    let p = unsafe { HEAP.alloc(page) };
    assert!(!p.is_null());
    assert!(HEAP.buddy().owns(p), "not from the heap once it could grow");
    // SAFETY: ours.
    unsafe { HEAP.dealloc(p, page) };
}

#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "spawns a process, setrlimit and mmap")]
fn small_requests_without_room_for_a_reservation_are_served_by_small_mappings() {
    let err = run_child_ok("small_requests_without_room_for_a_reservation");
    eprintln!("{err}");
}
