//! The pcp's reference harness (std + `invariants`, or this crate's tests):
//! a buddy on heap memory, an operation set, and `run_machine`, which applies
//! operations across simulated CPUs and interrupt contexts and checks after
//! every one: no overlap, alignment, contents preserved, zeroed means zero,
//! every page accounted for (buddy free + lists + live = managed), each CPU's
//! list invariants, and at the end that everything merges back in the buddy.
//! The proptest state machine and the cargo-fuzz target drive it.

#[cfg(feature = "arbitrary")]
pub mod fuzz;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::boxed::Box;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::vec;
use std::vec::Vec;

use buddy::{
    AllocFlags, Buddy, Config, FreeErrorKind, FreeFlags, Order, PurgePolicy, Tunables, ZoneId,
};
use local_lock::test_platform::TestPlatform;

use crate::{Pcp, Policy};

/// Page size of the harness.
pub const PAGE: usize = 4096;
/// Largest order of the harness's buddy (4 MiB blocks; 64 KiB under miri).
pub const MAX_ORDER: u8 = if cfg!(miri) { 4 } else { 10 };
/// The purge order of the harness's buddy (trim only): 1, so purges split
/// and merge at every order; under miri the largest order, as before
/// purging reached the state machines (each purge batch re-checks the
/// purged memory byte by byte under `invariants`, and order-1 batches made
/// one test run for more than 15 minutes).
pub const PURGE_ORDER: u8 = if cfg!(miri) { MAX_ORDER } else { 1 };
/// Simulated CPUs.
pub const CPUS: usize = 4;

/// A buddy over `mib` MiB of heap memory (4 MiB aligned).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags};
/// use local_lock::test_platform::TestPlatform;
/// use pcp::testing::{Mem, CPUS, O0};
/// use pcp::Policy;
/// // 4 MiB of zeroed memory (1 MiB under miri) in a buddy over simulated CPUs.
/// let m = Mem::new(4, true);
/// let managed = m.buddy.total_managed_pages();
/// let pcp = m.pcp(TestPlatform::pinned(CPUS), Policy::IrqSafe);
/// let p = pcp.alloc(O0, AllocFlags::ZEROED).unwrap();
/// assert!(p.zero && pcp::testing::reads(p.ptr, O0, 0));
/// // SAFETY: our page, freed once.
/// unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
/// pcp.drain_local();
/// assert_eq!(m.buddy.total_free_pages(), managed);
/// ```
pub struct Mem {
    /// The buddy.
    pub buddy: Box<Buddy<TestPlatform>>,
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    /// `mib` MiB, zeroed (known zero to the buddy) or filled with 0x77.
    pub fn new(mib: usize, zeroed: bool) -> Mem {
        // Under miri every byte costs: 1 MiB with 64 KiB blocks.
        let bytes = if cfg!(miri) { 1 << 20 } else { mib << 20 };
        let block = PAGE << MAX_ORDER;
        let layout = Layout::from_size_align(bytes, block).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        if !zeroed {
            // SAFETY: ours.
            unsafe { ptr.write_bytes(0x77, layout.size()) };
        }
        // Purges (`Op::Purge`, trim only) from `PURGE_ORDER`.
        let cfg = Config::new(PAGE, MAX_ORDER)
            .with_tunables(Tunables::NO_MIN)
            .with_purge(PurgePolicy::trim_only(PURGE_ORDER));
        let buddy = Box::new(Buddy::new(TestPlatform::pinned(CPUS), cfg));
        // SAFETY: the memory lives as long as `Mem` and is used by nothing else.
        unsafe { buddy.add_region(ptr, layout.size(), zeroed).unwrap() };
        Mem { buddy, ptr, layout }
    }

    /// A pcp over zone 0.
    pub fn pcp(
        &self,
        platform: TestPlatform,
        policy: Policy,
    ) -> Pcp<&Buddy<TestPlatform>, TestPlatform, CPUS> {
        Pcp::new(&*self.buddy, ZoneId::new(0), platform, policy)
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// Order 0.
pub const O0: Order = Order::ZERO;

/// An order.
pub fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

/// Fills a block.
pub fn fill(p: NonNull<u8>, order: Order, byte: u8) {
    // SAFETY: the caller holds the block.
    unsafe { p.as_ptr().write_bytes(byte, PAGE << order.get()) };
}

/// Whether a block reads as `byte` throughout.
pub fn reads(p: NonNull<u8>, order: Order, byte: u8) -> bool {
    // SAFETY: the caller holds the block.
    let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), PAGE << order.get()) };
    // Page by page with slice equality (one `memcmp`): a byte loop costs
    // minutes per proptest case under miri.
    let page = [byte; PAGE];
    s.chunks(PAGE).all(|c| c == &page[..c.len()])
}

// ----------------------------------------------------------------------------
// State machine against a model
// ----------------------------------------------------------------------------

/// One operation of the state machine.
///
/// ```
/// use pcp::testing::{run_machine, Op};
/// use pcp::Policy;
/// // On a locked platform (remote drains allowed), with interrupts.
/// run_machine(Policy::Trylock, true, &[
///     Op::Alloc { cpu: 0, order: 0, flags: 0, irq: false },
///     Op::Alloc { cpu: 1, order: 2, flags: 1, irq: true },
///     Op::Free { idx: 0, zero: false, cold: false, irq: false },
///     Op::Bad { cpu: 2, kind: 2, idx: 0 },
///     Op::DrainAll,
/// ]);
/// ```
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum Op {
    Alloc {
        cpu: usize,
        order: u8,
        flags: u8,
        irq: bool,
    },
    Free {
        idx: usize,
        zero: bool,
        cold: bool,
        irq: bool,
    },
    DrainLocal {
        cpu: usize,
    },
    DrainAll,
    /// A purge pass of the buddy underneath (`trim_with`, purge order 1)
    /// with a page source that zeroes what it purges, as `MADV_DONTNEED`
    /// leaves it: its free blocks become known zero while the lists hold
    /// pages of the same zone; later zeroed requests served from them must
    /// read zero.
    Purge,
    Prezero {
        cpu: usize,
        budget: usize,
    },
    Bulk {
        cpu: usize,
        n: usize,
    },
    /// `decay_pcp_high` of `cpu`'s lists, run from CPU `from` (remotely on a
    /// locked platform or under `Trylock`: a high that moves under another
    /// CPU; otherwise on `cpu` itself on a pinned one).
    Decay {
        cpu: usize,
        from: usize,
    },
    /// Switches between the auto-tuned high (`set_high_range(5, 20, 80)`,
    /// Linux 6.7+) and the fixed `(5, 20)` of the sysctl.
    SetHigh {
        auto: bool,
    },
    /// Bad input, kind `kind % 7`, on live block `idx`, from `cpu`: 0 free
    /// a block, then free it again to the pcp and straight to the buddy
    /// (it sits on a per-CPU list, or is free in the buddy after a batch
    /// free); 1 an interior pointer; 2 a wrong order; 3 a foreign pointer;
    /// 4 a huge order; 5 ABA (free a, free b, free a); 6 nonsense
    /// `set_batch_high`. Every one must be refused (`Err`) with the state
    /// intact.
    Bad {
        cpu: usize,
        kind: u8,
        idx: usize,
    },
}

struct Live {
    ptr: NonNull<u8>,
    order: Order,
    byte: u8,
}

/// Applies `ops` to a fresh pcp over an 8 MiB buddy, checking after each.
pub fn run_machine(policy: Policy, locked: bool, ops: &[Op]) {
    let m = Mem::new(8, true);
    let plat = if locked {
        TestPlatform::locked(CPUS)
    } else {
        TestPlatform::pinned(CPUS)
    };
    let pcp = m.pcp(plat, policy);
    // Remote access to another CPU's lists: on a locked platform, and under
    // `Trylock` (a real per-CPU spin lock, Linux 6.0+) on every platform.
    let remote = locked || policy == Policy::Trylock;
    pcp.set_batch_high(Some((5, 20))).unwrap();
    let mut live: Vec<Live> = Vec::new();
    let mut model: BTreeMap<usize, usize> = BTreeMap::new(); // start -> end
    let mut byte = 1u8;
    let check_new = |model: &mut BTreeMap<usize, usize>, p: NonNull<u8>, order: Order| {
        let s = p.as_ptr() as usize;
        let e = s + (PAGE << order.get());
        assert_eq!(s % (PAGE << order.get()), 0, "alignment");
        if let Some((_, &pe)) = model.range(..e).next_back() {
            assert!(pe <= s, "overlap");
        }
        model.insert(s, e);
    };
    for op in ops {
        match *op {
            Op::Alloc {
                cpu,
                order,
                flags,
                irq,
            } => {
                let mut f = AllocFlags::NONE;
                if flags & 1 != 0 {
                    f |= AllocFlags::ZEROED;
                }
                if flags & 2 != 0 {
                    f |= AllocFlags::COLD;
                }
                if flags & 4 != 0 && flags & 1 != 0 {
                    f |= AllocFlags::ONLY_ZERO;
                }
                let order = o(order);
                let r = plat.on_cpu(cpu, || {
                    if irq {
                        plat.interrupt(|| pcp.alloc(order, f)).unwrap()
                    } else {
                        pcp.alloc(order, f)
                    }
                });
                if let Some(p) = r {
                    check_new(&mut model, p.ptr, order);
                    if f.contains(AllocFlags::ZEROED) {
                        assert!(p.zero && reads(p.ptr, order, 0), "zeroed means zero");
                    }
                    if p.zero {
                        assert!(reads(p.ptr, order, 0), "known zero means zero");
                    }
                    byte = byte.wrapping_add(1).max(1);
                    fill(p.ptr, order, byte);
                    live.push(Live {
                        ptr: p.ptr,
                        order,
                        byte,
                    });
                } else {
                    // Only an only-zero request may fail while the buddy still
                    // has a block big enough.
                    let max = m.buddy.config().max_order().get();
                    let buddy_has =
                        (order.get()..=max).any(|k| m.buddy.free_blocks(ZoneId::new(0), o(k)) > 0);
                    assert!(
                        f.contains(AllocFlags::ONLY_ZERO) || !buddy_has,
                        "{order} failed with memory free"
                    );
                }
            }
            Op::Free {
                idx,
                zero,
                cold,
                irq,
            } => {
                if live.is_empty() {
                    continue;
                }
                let l = live.swap_remove(idx % live.len());
                assert!(reads(l.ptr, l.order, l.byte), "contents preserved");
                let mut ff = FreeFlags::NONE;
                if zero {
                    fill(l.ptr, l.order, 0);
                    ff = ff | FreeFlags::ZERO;
                }
                if cold {
                    ff = ff | FreeFlags::COLD;
                }
                model.remove(&(l.ptr.as_ptr() as usize));
                // SAFETY: live block of this order.
                let free = || unsafe { pcp.free(l.ptr, l.order, ff) };
                if irq {
                    plat.interrupt(free).unwrap();
                } else {
                    free();
                }
            }
            Op::DrainLocal { cpu } => {
                plat.on_cpu(cpu, || pcp.drain_local());
            }
            Op::Purge => {
                let purged = m.buddy.trim_with(|p, n| {
                    // SAFETY: a free block the purge pass isolated: nobody
                    // holds it, `n` bytes of the arena.
                    unsafe { p.as_ptr().write_bytes(0, n) };
                    true
                });
                assert_eq!(
                    purged % (PAGE << PURGE_ORDER),
                    0,
                    "blocks of the purge order and up"
                );
                assert_eq!(m.buddy.trim_with(|_, _| true), 0, "nothing left");
            }
            Op::DrainAll => {
                if remote {
                    pcp.drain_all();
                } else {
                    for cpu in 0..CPUS {
                        plat.on_cpu(cpu, || pcp.drain_local());
                    }
                }
                assert_eq!(pcp.total_count(), 0);
            }
            Op::Prezero { cpu, budget } => {
                plat.on_cpu(cpu, || pcp.prezero(budget));
            }
            Op::Decay { cpu, from } => {
                let r = plat.on_cpu(from, || pcp.decay_pcp_high_cpu(cpu));
                if remote || cpu == from {
                    r.expect("decay refused");
                } else {
                    assert!(r.is_err(), "remote decay on a pinned platform");
                    plat.on_cpu(cpu, || pcp.decay_pcp_high());
                }
                // After a decay: the CPU's high within [high_min, high_max]
                // and no page above it.
                let (lo, hi) = pcp.high_range();
                let l = plat.on_cpu(cpu, || pcp.local_lists());
                assert!(
                    (lo..=hi).contains(&l.high) && l.count <= l.high,
                    "after decay: high {} count {} range [{lo}, {hi}]",
                    l.high,
                    l.count
                );
            }
            Op::SetHigh { auto } => {
                if auto {
                    pcp.set_high_range(5, 20, 80).unwrap();
                    assert_eq!(pcp.high_range(), (20, 80));
                } else {
                    pcp.set_batch_high(Some((5, 20))).unwrap();
                    assert_eq!(pcp.high_range(), (20, 20));
                }
            }
            Op::Bad { cpu, kind, idx } => {
                let bad = |p: NonNull<u8>, order: Order| {
                    plat.on_cpu(cpu, || {
                        // SAFETY: a bad free, refused before any change
                        // (that is what is checked).
                        unsafe { pcp.try_free(p, order, FreeFlags::NONE) }
                    })
                };
                match kind % 7 {
                    0 | 5 => {
                        if live.is_empty() {
                            continue;
                        }
                        let l = live.swap_remove(idx % live.len());
                        model.remove(&(l.ptr.as_ptr() as usize));
                        // SAFETY: live block of this order, given up.
                        plat.on_cpu(cpu, || unsafe { pcp.free(l.ptr, l.order, FreeFlags::NONE) });
                        if kind % 7 == 5 && !live.is_empty() {
                            let b = live.swap_remove((idx / 3) % live.len());
                            model.remove(&(b.ptr.as_ptr() as usize));
                            // SAFETY: as above.
                            plat.on_cpu(cpu, || unsafe {
                                pcp.free(b.ptr, b.order, FreeFlags::NONE)
                            });
                        }
                        let e = bad(l.ptr, l.order).expect_err("double free accepted by the pcp");
                        assert!(
                            matches!(
                                e.kind,
                                crate::BadFreeKind::NotAllocated | crate::BadFreeKind::OnPcpList
                            ),
                            "{e}"
                        );
                        // Straight to the buddy: refused too (on a per-CPU
                        // list, or already free there).
                        // SAFETY: refused (checked).
                        let e = unsafe { m.buddy.try_free_pages(l.ptr, l.order, FreeFlags::NONE) }
                            .expect_err("buddy accepted a page the pcp holds or it has");
                        assert!(
                            matches!(
                                e.kind,
                                FreeErrorKind::OnPcpList | FreeErrorKind::DoubleFree { .. }
                            ),
                            "{e}"
                        );
                    }
                    1 | 2 | 4 => {
                        if live.is_empty() {
                            continue;
                        }
                        let l = &live[idx % live.len()];
                        let (p, order) = match kind % 7 {
                            1 if l.order.get() > 0 => {
                                (NonNull::new(l.ptr.as_ptr().wrapping_add(PAGE)).unwrap(), O0)
                            }
                            1 => continue,
                            2 => (l.ptr, o((l.order.get() + 1) % 4)),
                            _ => (l.ptr, Order::new(buddy::ORDER_LIMIT).unwrap()),
                        };
                        bad(p, order).expect_err("bad free accepted by the pcp");
                        // SAFETY: refused (checked).
                        unsafe { m.buddy.try_free_pages(p, order, FreeFlags::NONE) }
                            .expect_err("bad free accepted by the buddy");
                    }
                    3 => {
                        let mut local = [0u8; 2 * PAGE];
                        let a = (local.as_mut_ptr() as usize).next_multiple_of(PAGE);
                        let p = NonNull::new(
                            local.as_mut_ptr().wrapping_add(a - local.as_ptr() as usize),
                        )
                        .unwrap();
                        bad(p, O0).expect_err("foreign free accepted by the pcp");
                    }
                    _ => {
                        let before = pcp.batch_high();
                        for v in [
                            (0, 8),
                            (9, 8),
                            (usize::MAX, usize::MAX),
                            (1, usize::MAX / 2),
                        ] {
                            pcp.set_batch_high(Some(v))
                                .expect_err("nonsense batch/high accepted");
                        }
                        assert_eq!(pcp.batch_high(), before);
                    }
                }
            }
            Op::Bulk { cpu, n } => {
                let mut arr = vec![None; n];
                let got = plat.on_cpu(cpu, || pcp.alloc_bulk(AllocFlags::NONE, &mut arr));
                for p in arr.into_iter().flatten() {
                    check_new(&mut model, p, O0);
                    byte = byte.wrapping_add(1).max(1);
                    fill(p, O0, byte);
                    live.push(Live {
                        ptr: p,
                        order: O0,
                        byte,
                    });
                }
                assert!(got <= n);
            }
        }
        for cpu in 0..CPUS {
            plat.on_cpu(cpu, || pcp.check_local());
            // A CPU's tuned high never leaves [0, the largest high_max used].
            let l = plat.on_cpu(cpu, || pcp.local_lists());
            assert!(
                l.high <= 80,
                "CPU {cpu}: high {} above every high_max",
                l.high
            );
        }
        // Conservation: pages are free in the buddy, on the lists, or live.
        let live_pages: usize = live.iter().map(|l| 1usize << l.order.get()).sum();
        assert_eq!(
            m.buddy.total_free_pages() + pcp.total_count() + live_pages,
            m.buddy.total_managed_pages(),
            "every page is accounted for"
        );
    }
    for l in live.drain(..) {
        assert!(reads(l.ptr, l.order, l.byte));
        // SAFETY: live.
        unsafe { pcp.free(l.ptr, l.order, FreeFlags::NONE) };
    }
    for cpu in 0..CPUS {
        plat.on_cpu(cpu, || pcp.drain_local());
    }
    assert_eq!(pcp.total_count(), 0);
    assert_eq!(
        m.buddy.total_free_pages(),
        m.buddy.total_managed_pages(),
        "everything back in the buddy"
    );
    // And merged back to max-order blocks.
    let max = m.buddy.config().max_order();
    assert_eq!(
        m.buddy.free_blocks(ZoneId::new(0), max) << max.get(),
        m.buddy.total_managed_pages() & !((1 << max.get()) - 1),
    );
}
