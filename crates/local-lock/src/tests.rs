//! Unit tests of every flavour on both strategies (deterministic test
//! platform), and of the std platforms.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::vec::Vec;

use crate::std_platform::{PerThread, StdCpu};
use crate::sync::{AtomicDWord, DWord};
use crate::test_platform::TestPlatform;
use crate::{this_cpu_cmpxchg_double, LocalLock, Platform, Strategy};

const PINNED: TestPlatform = TestPlatform::pinned(4);
const LOCKED: TestPlatform = TestPlatform::locked(4);

fn both() -> [TestPlatform; 2] {
    [PINNED, LOCKED]
}

#[test]
fn const_new_in_a_static() {
    static L: LocalLock<u64, TestPlatform, 4> = LocalLock::new(TestPlatform::pinned(4));
    *L.lock() += 5;
    assert_eq!(*L.lock(), 5);
    assert_eq!(L.slots(), 4);
}

#[test]
fn each_cpu_has_its_own_slot() {
    for p in both() {
        let l: LocalLock<usize, _, 4> = LocalLock::new_with(p, |cpu| cpu * 100);
        for cpu in 0..4 {
            p.on_cpu(cpu, || {
                let mut g = l.lock();
                assert_eq!(g.cpu(), cpu);
                assert_eq!(g.strategy(), p.default_strategy());
                assert_eq!(*g, cpu * 100);
                *g += 1;
            });
        }
        for cpu in 0..4 {
            p.on_cpu(cpu, || assert_eq!(*l.lock(), cpu * 100 + 1));
        }
    }
}

#[test]
fn plain_lock_pins_and_unpins() {
    for p in both() {
        let l: LocalLock<u32, _, 4> = LocalLock::new(p);
        assert_eq!(p.preempt_count(), 0);
        {
            let _g = l.lock();
            assert_eq!(p.preempt_count(), 1);
            assert!(!p.irqs_disabled());
        }
        assert_eq!(p.preempt_count(), 0);
    }
}

#[test]
fn irq_flavours_mask_and_restore_in_reverse_order() {
    for p in both() {
        let a: LocalLock<u32, _, 4> = LocalLock::new(p);
        let b: LocalLock<u32, _, 4> = LocalLock::new(p);
        {
            let _ga = a.lock_irqsave();
            assert!(p.irqs_disabled());
            {
                let _gb = b.lock_irqsave();
                assert!(p.irqs_disabled());
            }
            // Inner restore put back "disabled", not "enabled".
            assert!(p.irqs_disabled());
        }
        assert!(!p.irqs_disabled());
        {
            let _g = a.lock_irq();
            assert!(p.irqs_disabled());
        }
        assert!(!p.irqs_disabled());
        assert_eq!(p.preempt_count(), 0);
    }
}

#[test]
fn irqsave_keeps_interrupts_out_and_delivers_them_after() {
    for p in both() {
        let l = Rc::new(LocalLock::<u32, _, 4>::new(p));
        let ran = Rc::new(Cell::new(false));
        {
            let mut g = l.lock_irqsave();
            let (l2, ran2) = (l.clone(), ran.clone());
            p.arm_interrupt(0, move || {
                // Runs only after the task released the slot.
                let mut g = l2.try_lock().expect("slot must be free when the IRQ runs");
                *g += 10;
                ran2.set(true);
            });
            // A direct interrupt is refused while masked.
            assert!(p.interrupt(|| ()).is_none());
            *g += 1;
            assert!(!ran.get());
        }
        // Delivered at irq_restore.
        assert!(ran.get());
        assert_eq!(*l.lock(), 11);
        assert!(!p.disarm());
    }
}

#[test]
fn trylock_fails_in_an_interrupt_that_found_the_task_inside() {
    for p in both() {
        let l = Rc::new(LocalLock::<u32, _, 4>::new(p));
        let outcome = Rc::new(Cell::new(None));
        let g = l.lock();
        let (l2, o2) = (l.clone(), outcome.clone());
        let r = p.interrupt(move || {
            assert!(p.in_interrupt());
            o2.set(Some(l2.try_lock().is_some()));
        });
        assert!(r.is_some());
        assert_eq!(outcome.get(), Some(false), "{:?}", p.default_strategy());
        drop(g);
        // After release an interrupt gets it.
        let l3 = l.clone();
        assert_eq!(p.interrupt(move || l3.try_lock().is_some()), Some(true));
    }
}

#[test]
fn interrupt_between_pin_and_take_nests_correctly() {
    // The armed interrupt fires at the first hook point of the task's
    // `lock()`: after the pin, before the slot is marked held. The handler
    // takes and releases the slot; the task then proceeds.
    for p in both() {
        let l = Rc::new(LocalLock::<u32, _, 4>::new(p));
        let l2 = l.clone();
        let before = p.fired();
        p.arm_interrupt(0, move || {
            *l2.try_lock().expect("free at the pin point") += 1;
        });
        {
            let mut g = l.lock();
            *g += 100;
        }
        assert_eq!(p.fired(), before + 1);
        assert_eq!(*l.lock(), 101);
    }
}

#[test]
fn try_lock_irqsave_restores_on_failure() {
    for p in both() {
        let l = Rc::new(LocalLock::<u32, _, 4>::new(p));
        let g = l.lock();
        let l2 = l.clone();
        let r = p.interrupt(move || {
            let was = p.irqs_disabled();
            let got = l2.try_lock_irqsave().is_some();
            assert_eq!(p.irqs_disabled(), was);
            got
        });
        assert_eq!(r, Some(false));
        drop(g);
        assert!(l.try_lock_irqsave().is_some());
        assert!(!p.irqs_disabled());
    }
}

#[test]
#[should_panic(expected = "re-entered")]
fn pinned_plain_lock_reentered_from_interrupt_panics() {
    let l = Rc::new(LocalLock::<u32, _, 4>::new(PINNED));
    let _g = l.lock();
    let l2 = l.clone();
    PINNED.interrupt(move || {
        let _g2 = l2.lock();
    });
}

#[test]
#[should_panic(expected = "deadlock")]
fn locked_plain_lock_from_interrupt_on_held_slot_panics() {
    let l = Rc::new(LocalLock::<u32, _, 4>::new(LOCKED));
    let _g = l.lock();
    let l2 = l.clone();
    LOCKED.interrupt(move || {
        let _g2 = l2.lock();
    });
}

#[test]
#[should_panic(expected = "re-entered")]
fn pinned_nested_lock_of_same_slot_panics() {
    let l = LocalLock::<u32, _, 4>::new(PINNED);
    let _a = l.lock();
    let _b = l.lock();
}

#[test]
fn remote_access_follows_the_strategy() {
    let pinned = LocalLock::<u32, _, 4>::new(PINNED);
    assert!(
        pinned.lock_remote(1).is_none(),
        "pinned CPUs refuse remote access"
    );
    let locked = LocalLock::<u32, _, 4>::new_with(LOCKED, |c| c as u32);
    {
        let mut g = locked
            .lock_remote(3)
            .expect("locked slots allow remote access");
        assert_eq!(g.cpu(), 3);
        assert!(LOCKED.irqs_disabled(), "remote access saves IRQs");
        *g += 10;
        // The owner (CPU 3) cannot take it meanwhile.
        LOCKED.on_cpu(3, || {});
    }
    assert!(!LOCKED.irqs_disabled());
    LOCKED.on_cpu(3, || assert_eq!(*locked.lock(), 13));
    assert!(locked.lock_remote(4).is_none(), "CPU out of range");
}

#[test]
fn locked_slot_excludes_remote_and_trylock() {
    let l = LocalLock::<u32, _, 4>::new(LOCKED);
    let g = l.lock_remote(0).unwrap();
    // CPU 0's own trylock fails while the remote holder has it.
    assert!(l.try_lock().is_none());
    drop(g);
    assert!(l.try_lock().is_some());
}

#[test]
#[should_panic(expected = "only 2 slots")]
fn pinned_cpu_beyond_slots_panics() {
    let l = LocalLock::<u32, _, 2>::new(PINNED);
    PINNED.on_cpu(3, || {
        let _g = l.lock();
    });
}

#[test]
fn locked_cpu_beyond_slots_shares_a_slot() {
    let l = LocalLock::<u32, _, 2>::new(LOCKED);
    LOCKED.on_cpu(3, || *l.lock() += 1);
    LOCKED.on_cpu(1, || assert_eq!(*l.lock(), 1));
}

#[test]
#[should_panic(expected = "cannot migrate")]
fn a_pinned_task_cannot_migrate() {
    let l = LocalLock::<u32, _, 4>::new(PINNED);
    let _g = l.lock();
    PINNED.set_cpu(1);
}

#[test]
fn iter_mut_and_get_mut() {
    let mut l = LocalLock::<u32, _, 4>::new_with(PINNED, |c| c as u32);
    for v in l.iter_mut() {
        *v *= 2;
    }
    assert_eq!(*l.get_mut(3), 6);
    assert_eq!(l.iter_mut().map(|v| *v).sum::<u32>(), 12);
}

#[test]
fn std_cpu_counters_sum_across_threads() {
    let l = Arc::new(LocalLock::<u64, StdCpu>::new(StdCpu));
    let threads = 4;
    let per = if cfg!(miri) { 50 } else { 20_000 };
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    let mut g = l.lock();
                    assert_eq!(g.strategy(), Strategy::Locked);
                    *g += 1;
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let total: u64 = (0..l.slots()).map(|c| *l.lock_remote(c).unwrap()).sum();
    assert_eq!(total, threads * per);
}

#[test]
fn std_cpu_remote_drain_races_with_owners() {
    // Owners add, a drainer moves everything into a global total: nothing
    // is lost or counted twice.
    let l = Arc::new(LocalLock::<u64, StdCpu>::new(StdCpu));
    let drained = Arc::new(AtomicUsize::new(0));
    let per = if cfg!(miri) { 50 } else { 20_000 };
    let stop = Arc::new(AtomicUsize::new(0));
    let drainer = {
        let (l, drained, stop) = (l.clone(), drained.clone(), stop.clone());
        std::thread::spawn(move || {
            while stop.load(Ordering::Acquire) == 0 {
                for c in 0..l.slots() {
                    let mut g = l.lock_remote(c).unwrap();
                    drained.fetch_add(*g as usize, Ordering::Relaxed);
                    *g = 0;
                }
            }
        })
    };
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    *l.lock() += 1;
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    stop.store(1, Ordering::Release);
    drainer.join().unwrap();
    let left: u64 = (0..l.slots()).map(|c| *l.lock_remote(c).unwrap()).sum();
    assert_eq!(drained.load(Ordering::Relaxed) as u64 + left, 2 * per);
}

static EXITS: AtomicUsize = AtomicUsize::new(0);
static EXIT_SUM: AtomicUsize = AtomicUsize::new(0);
static PT_LOCK: LocalLock<u64, PerThread> = LocalLock::new(PerThread);

fn flush_on_exit(_slot: usize) {
    // Runs on the exiting thread, which still owns its slot.
    let mut g = PT_LOCK.lock();
    assert_eq!(g.strategy(), Strategy::Pinned);
    EXIT_SUM.fetch_add(*g as usize, Ordering::Relaxed);
    *g = 0;
    EXITS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn per_thread_slots_are_exclusive_and_flushed_on_exit() {
    assert!(PerThread::on_thread_exit(flush_on_exit));
    let n = 4;
    let per = if cfg!(miri) { 20 } else { 10_000 };
    let barrier = Arc::new(Barrier::new(n));
    let before_sum = EXIT_SUM.load(Ordering::Relaxed);
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                let slot = PerThread.current_cpu();
                b.wait(); // all alive at once: slots must differ
                for _ in 0..per {
                    let mut g = PT_LOCK.lock();
                    assert_eq!(g.cpu(), slot);
                    *g += 1;
                }
                slot
            })
        })
        .collect();
    let mut slots: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), n, "live threads got distinct slots");
    // Every count reached the exit hook (other tests' threads may add more).
    assert!(EXIT_SUM.load(Ordering::Relaxed) - before_sum >= n * per);
    assert!(EXITS.load(Ordering::Relaxed) >= n);
}

#[test]
fn per_thread_remote_access_only_to_free_slots() {
    let l = Arc::new(LocalLock::<u64, PerThread>::new(PerThread));
    let me = PerThread.current_cpu();
    assert!(me < PerThread::OWNED_SLOTS);
    assert!(
        l.lock_remote(me).is_none(),
        "a live thread's slot is refused"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = l.clone();
    std::thread::spawn(move || {
        *l2.lock() = 42;
        tx.send(PerThread.current_cpu()).unwrap();
    })
    .join()
    .unwrap();
    let their = rx.recv().unwrap();
    // The thread exited: its slot is free (unless another test's thread has
    // claimed it meanwhile, in which case remote access is refused).
    if let Some(mut g) = l.lock_remote(their) {
        assert_eq!(g.strategy(), Strategy::Pinned);
        assert_eq!(*g, 42);
        *g = 0;
    }
    // The overflow slot is always remotely lockable.
    assert!(l.lock_remote(PerThread::OVERFLOW_SLOT).is_some());
}

#[test]
fn this_cpu_cmpxchg_double_on_the_right_cpu_only() {
    for p in both() {
        let w = AtomicDWord::new(DWord::new(1, 2));
        p.on_cpu(1, || {
            // Still on CPU 1, the pair as read: exchanged, pins balanced.
            assert!(this_cpu_cmpxchg_double(
                &p,
                1,
                &w,
                DWord::new(1, 2),
                DWord::new(3, 4)
            ));
            assert_eq!(p.preempt_count(), 0);
            assert_eq!(w.load(Ordering::Relaxed), DWord::new(3, 4));
            // The pair changed since it was read: refused, untouched.
            assert!(!this_cpu_cmpxchg_double(
                &p,
                1,
                &w,
                DWord::new(1, 2),
                DWord::new(5, 6)
            ));
            assert_eq!(w.load(Ordering::Relaxed), DWord::new(3, 4));
        });
        // Read on CPU 1, migrated to CPU 2 before the exchange: refused
        // although the pair matches, untouched.
        p.on_cpu(2, || {
            assert!(!this_cpu_cmpxchg_double(
                &p,
                1,
                &w,
                DWord::new(3, 4),
                DWord::new(7, 8)
            ));
            assert_eq!(p.preempt_count(), 0);
        });
        assert_eq!(w.load(Ordering::Relaxed), DWord::new(3, 4));
    }
}

#[test]
fn this_cpu_cmpxchg_double_loses_to_an_interrupt() {
    let p = PINNED;
    let w = AtomicDWord::new(DWord::new(10, 0));
    p.on_cpu(0, || {
        let d = w.load(Ordering::Acquire);
        // An interrupt between the read and the exchange advances the pair
        // (the tid): the interrupted exchange fails and a retry succeeds.
        p.interrupt(|| {
            assert!(this_cpu_cmpxchg_double(
                &p,
                0,
                &w,
                d,
                DWord::new(11, d.hi + 1)
            ))
        });
        assert!(!this_cpu_cmpxchg_double(
            &p,
            0,
            &w,
            d,
            DWord::new(12, d.hi + 1)
        ));
        let d = w.load(Ordering::Acquire);
        assert!(this_cpu_cmpxchg_double(
            &p,
            0,
            &w,
            d,
            DWord::new(12, d.hi + 1)
        ));
    });
    assert_eq!(w.load(Ordering::Relaxed), DWord::new(12, 2));
}

/// A `this_cpu` operation (unsafe: see each platform's contract).
macro_rules! this_cpu {
    ($e:expr) => {{
        // SAFETY: TestPlatform::pinned slots are Pinned; the locked platform is only asked, and refuses.
        unsafe { $e }
    }};
}

/// The generic (kernel) `this_cpu` sheaf operations act on the pinned
/// CPU's record with interrupts saved, and refuse on locked platforms.
#[test]
fn generic_this_cpu_sheaf_ops_use_the_pinned_cpus_record() {
    use crate::sync::CachePadded;
    use crate::this_cpu::{CpuSheaves, SheafSlots, SheafWord, SHEAF_HDR_WORDS};
    let recs = [const { CachePadded::new(CpuSheaves::new()) }; 2];
    // SAFETY: 2 records one CachePadded apart; sheaves below hold 4 entries.
    let s =
        unsafe { SheafSlots::<2>::new(recs.as_ptr().cast(), core::mem::size_of_val(&recs[0]), 4) };
    let mut sheaf = [0usize; SHEAF_HDR_WORDS + 4];
    let sh = sheaf.as_mut_ptr() as usize;
    let p = TestPlatform::pinned(2);
    p.set_cpu(1);
    assert!(!p.restartable());
    assert_eq!(this_cpu!(p.this_cpu_sheaf_pop(s)), 0, "no main sheaf");
    assert!(!this_cpu!(p.this_cpu_sheaf_push(s, 8)));
    assert!(this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)));
    assert!(
        !this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)),
        "already installed"
    );
    for v in [8, 16, 24, 32] {
        assert!(this_cpu!(p.this_cpu_sheaf_push(s, v)));
    }
    assert!(!this_cpu!(p.this_cpu_sheaf_push(s, 40)), "full");
    assert_eq!(this_cpu!(p.this_cpu_sheaf_pop(s)), 32);
    p.set_cpu(0);
    assert_eq!(
        this_cpu!(p.this_cpu_sheaf_pop(s)),
        0,
        "CPU 0 has its own (empty) record"
    );
    assert!(this_cpu!(p.this_cpu_set_range(s, 1, 0x1000, 0x100, 7)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 1)), Some((0x1000, 0x100, 7)));
    assert_eq!(
        this_cpu!(p.this_cpu_range(s, 2)),
        Some((0, 0, 7)),
        "another way"
    );
    assert!(this_cpu!(p.this_cpu_set_range(s, 2, 0x2000, 0x80, 7)));
    assert_eq!(
        this_cpu!(p.this_cpu_range(s, 1)),
        Some((0x1000, 0x100, 7)),
        "ways are kept"
    );
    // A new discard count empties every way.
    assert!(this_cpu!(p.this_cpu_set_range(s, 3, 0x3000, 0x40, 8)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 1)), Some((0x1000, 0, 8)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 2)), Some((0x2000, 0, 8)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 3)), Some((0x3000, 0x40, 8)));
    p.set_cpu(1);
    assert_eq!(this_cpu!(p.this_cpu_range(s, 1)), Some((0, 0, 0)));
    assert_eq!(this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0)), Some(sh));
    assert_eq!(p.remote_sheaf_xchg(s, 1, SheafWord::Main, 0), None);
    let _ = &mut sheaf;
    assert_eq!(sheaf[0], 3);
    assert!(!p.irqs_disabled(), "interrupts restored");
    // Locked slots are not exclusive: the generic operations refuse.
    let l = TestPlatform::locked(2);
    assert!(!this_cpu!(l.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)));
    assert_eq!(this_cpu!(l.this_cpu_xchg(s, SheafWord::Spare, 0)), None);
}

#[test]
fn spin_slots_are_taken_remotely_on_every_strategy() {
    // The kernel's pcp->lock (Linux 6.0+): a per-CPU spin lock that other
    // CPUs take to drain, pinned platform or not.
    for p in both() {
        let l: LocalLock<u32, TestPlatform> = LocalLock::new_with(p, |_| 0);
        p.on_cpu(1, || *l.try_lock_spin().unwrap() = 5);
        let g = p.on_cpu(0, || l.lock_remote_spin(1)).unwrap();
        assert_eq!((g.cpu(), *g), (1, 5));
        drop(g);
        assert_eq!(p.preempt_count(), 0);
        p.on_cpu(1, || assert_eq!(*l.lock_irqsave_spin(), 5));
        assert!(p.on_cpu(0, || l.lock_remote_spin(64)).is_none());
    }
}

#[test]
fn pin_owned_is_the_pin_of_an_owned_slot() {
    // PerThread: a thread's own slot, as `pin` gives it (issue #22's fast
    // acquisition builds exactly this pin).
    let p = PerThread;
    let pin = p.pin();
    assert_eq!(pin.strategy, Strategy::Pinned);
    assert_eq!(p.pin_owned(), Some(pin.cpu));
    // SAFETY: the pin just taken, released once.
    unsafe { p.unpin(pin) };
    // The other platforms keep the default: no owned fast path.
    assert_eq!(StdCpu.pin_owned(), None);
    assert_eq!(TestPlatform::pinned(2).pin_owned(), None);
    // Both paths take and release the same slot: a nested lock is caught.
    static L: LocalLock<u32, PerThread> = LocalLock::new(PerThread);
    let g = L.lock();
    assert_eq!(g.cpu(), pin.cpu);
    assert!(L.try_lock().is_none(), "held through the owned path");
    g.unlock();
    assert!(L.try_lock().is_some());
}

#[test]
fn published_word_is_per_slot_and_left_by_the_guard() {
    let p = TestPlatform::pinned(2);
    let l: LocalLock<u32, TestPlatform> = LocalLock::new_with(p, |_| 0);
    p.set_cpu(1);
    let g = l.lock();
    g.publish(5);
    drop(g);
    assert_eq!((l.published(0), l.published(1)), (0, 5));
    // Slot indices wrap as `cpu % N`, as the slots themselves.
    assert_eq!(l.published(1 + l.slots()), 5);
}
