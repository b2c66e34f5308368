//! Loom models of the pcp protocols: per-CPU lists against remote drains
//! and the zone lock, and interrupt-context requests against a task that
//! holds (or is about to take) its CPU's lists, under each policy.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p pcp
//! --release --test loom`. Preemption bound: 2 (default when unset).
//!
//! Memory: the shared fixture `buddy::loom_support::Heap`, a buddy of
//! 16-byte pages, MAX_ORDER 2 (one 4-page block), memmap placed with
//! `add_span` (loom atomics in descriptors are built in place). Each model
//! body runs on a 1 MiB loom thread (`loom_support::run`): building the
//! buddy and the pcp over it overflows the 32 KiB stack of the model's
//! main thread.
//! Interrupts are loom threads that mask their CPU (see `LoomPlatform`):
//! with the pinned strategy only IRQ-masking protection can be modelled,
//! so `Trylock` (which relies on a real interrupt freezing its task) is
//! modelled with the locked strategy, where its trylock is a real CAS.
#![cfg(loom)]

use buddy::loom_support::{run, Heap};
use buddy::{AllocFlags, FreeFlags, Order, ZoneId};
use local_lock::loom_platform::LoomPlatform;
use local_lock::Strategy;
use loom::sync::Arc;
use loom::thread;
use pcp::{Pcp, Policy};

const PAGE: usize = 16;
const PAGES: usize = 4;
type LoomPcp = Pcp<Heap, LoomPlatform, 3>;

fn setup(cpus: usize, strategy: Strategy, policy: Policy) -> (LoomPlatform, Arc<LoomPcp>) {
    let p = LoomPlatform::new(cpus, strategy);
    // One platform for both layers: the IRQ masks must be shared.
    let heap = Heap::new(&p, PAGE, 2);
    let pcp = Pcp::new_tuned(heap, ZoneId::new(0), p.clone(), policy, Some((1, 2)));
    (p, Arc::new(pcp))
}

/// Allocates a page, writes a pattern, checks it and frees it.
fn use_page(pcp: &LoomPcp, v: u8) {
    let Some(page) = pcp.alloc(Order::ZERO, AllocFlags::NONE) else {
        return; // the other CPUs' lists may hold every page
    };
    // SAFETY: the page is ours.
    unsafe { page.ptr.as_ptr().write_bytes(v, PAGE) };
    // SAFETY: ours.
    let s = unsafe { std::slice::from_raw_parts(page.ptr.as_ptr(), PAGE) };
    assert!(s.iter().all(|&b| b == v), "page handed out twice");
    // SAFETY: ours, order 0.
    unsafe { pcp.free(page.ptr, Order::ZERO, FreeFlags::NONE) };
}

fn all_back(p: &LoomPlatform, pcp: &LoomPcp, cpus: usize) {
    for cpu in 0..cpus {
        p.set_cpu(cpu);
        pcp.drain_local();
    }
    assert_eq!(pcp.total_count(), 0);
    let b = pcp.buddy();
    assert_eq!(b.total_free_pages(), PAGES, "every page back in the buddy");
    b.check_invariants();
}

/// Two CPUs allocate and free while a third drains both remotely, under
/// `policy` and `strategy` (the drains must be allowed).
fn two_cpus_and_a_remote_drainer(name: &str, strategy: Strategy, policy: Policy) {
    run(name, move || {
        let (p, pcp) = setup(3, strategy, policy);
        let workers: Vec<_> = (0..2)
            .map(|cpu| {
                let (p, pcp) = (p.clone(), pcp.clone());
                thread::spawn(move || {
                    p.set_cpu(cpu);
                    use_page(&pcp, 0x10 + cpu as u8);
                })
            })
            .collect();
        {
            let (p, pcp) = (p.clone(), pcp.clone());
            thread::spawn(move || {
                p.set_cpu(2);
                for cpu in 0..2 {
                    assert!(pcp.drain_cpu(cpu).is_ok());
                }
            })
            .join()
            .unwrap();
        }
        for w in workers {
            w.join().unwrap();
        }
        all_back(&p, &pcp, 3);
    });
}

/// Locked strategy: Linux 6.x drains under the target's pcp lock.
#[test]
fn two_cpus_and_a_remote_drain() {
    two_cpus_and_a_remote_drainer(
        "two_cpus_and_a_remote_drain",
        Strategy::Locked,
        Policy::IrqSafe,
    );
}

/// `Trylock` on a pinned platform: its slots are real per-CPU spin locks
/// (the kernel's `pcp->lock`, Linux 6.0+), so a third CPU drains the two
/// others' lists under them while they allocate and free (a task that
/// finds its slot taken by the drain falls back to the buddy).
#[test]
fn pinned_trylock_lists_drained_remotely() {
    two_cpus_and_a_remote_drainer(
        "pinned_trylock_lists_drained_remotely",
        Strategy::Pinned,
        Policy::Trylock,
    );
}

/// An interrupt on CPU 0 allocates and frees while CPU 0's task does the
/// same, under `policy` and `strategy`.
fn interrupt_vs_task(name: &str, strategy: Strategy, policy: Policy) {
    run(name, move || {
        let (p, pcp) = setup(1, strategy, policy);
        let irq = {
            let (p, pcp) = (p.clone(), pcp.clone());
            thread::spawn(move || p.interrupt(0, || use_page(&pcp, 0xee)))
        };
        p.set_cpu(0);
        use_page(&pcp, 0x11);
        irq.join().unwrap();
        all_back(&p, &pcp, 1);
    });
}

#[test]
fn interrupt_vs_task_irqsafe() {
    interrupt_vs_task(
        "interrupt_vs_task_irqsafe",
        Strategy::Pinned,
        Policy::IrqSafe,
    );
}

#[test]
fn interrupt_vs_task_taskonly() {
    interrupt_vs_task(
        "interrupt_vs_task_taskonly",
        Strategy::Pinned,
        Policy::TaskOnly,
    );
}

#[test]
fn interrupt_vs_task_trylock() {
    interrupt_vs_task(
        "interrupt_vs_task_trylock",
        Strategy::Locked,
        Policy::Trylock,
    );
}

/// Linux 6.7+'s auto-tuned high under a remote CPU: CPU 0 frees three
/// pages with `high` tuned in `[2, 4]` (the third free reaches it, raises
/// it and frees a batch under the zone lock) while CPU 1 decays CPU 0's
/// high (`decay_pcp_high`) and drains it, under CPU 0's lock (locked
/// strategy, Linux 6.x): the high moves while another CPU drains.
#[test]
fn tuned_high_moves_while_another_cpu_drains() {
    run("tuned_high_moves_while_another_cpu_drains", || {
        let (p, pcp) = setup(2, Strategy::Locked, Policy::IrqSafe);
        pcp.set_high_range(1, 2, 4).unwrap();
        let worker = {
            let (p, pcp) = (p.clone(), pcp.clone());
            thread::spawn(move || {
                p.set_cpu(0);
                let pages: Vec<_> = (0..3)
                    .filter_map(|_| pcp.alloc(Order::ZERO, AllocFlags::NONE))
                    .collect();
                for (i, page) in pages.iter().enumerate() {
                    // SAFETY: ours.
                    unsafe { page.ptr.as_ptr().write_bytes(0x30 + i as u8, PAGE) };
                }
                for page in pages {
                    // SAFETY: ours, order 0.
                    unsafe { pcp.free(page.ptr, Order::ZERO, FreeFlags::NONE) };
                }
                let l = pcp.local_lists();
                assert!(l.high <= 4, "high {} above high_max", l.high);
            })
        };
        {
            let (p, pcp) = (p.clone(), pcp.clone());
            thread::spawn(move || {
                p.set_cpu(1);
                let _ = pcp.decay_pcp_high_cpu(0);
                let _ = pcp.drain_cpu(0);
            })
            .join()
            .unwrap();
        }
        worker.join().unwrap();
        p.set_cpu(0);
        let l = pcp.local_lists();
        assert!((2..=4).contains(&l.high) && l.count <= 4, "{l:?}");
        all_back(&p, &pcp, 2);
    });
}

/// The sysctl fixes `high` (auto-tuning off) while CPU 0 frees with a
/// tuned high: `high_min`/`high_max` change under the free (which may read
/// one new and one old value); the CPU's high lands in the new range at
/// its next use and every page comes back.
#[test]
fn fixed_high_set_while_a_cpu_frees() {
    run("fixed_high_set_while_a_cpu_frees", || {
        let (p, pcp) = setup(2, Strategy::Locked, Policy::IrqSafe);
        pcp.set_high_range(1, 2, 4).unwrap();
        let worker = {
            let (p, pcp) = (p.clone(), pcp.clone());
            thread::spawn(move || {
                p.set_cpu(0);
                use_page(&pcp, 0x41);
                use_page(&pcp, 0x42);
            })
        };
        p.set_cpu(1);
        pcp.set_batch_high(Some((1, 3))).unwrap();
        worker.join().unwrap();
        p.set_cpu(0);
        let _ = pcp.decay_pcp_high();
        assert_eq!(pcp.local_lists().high, 3, "the fixed high applies");
        all_back(&p, &pcp, 2);
    });
}
