//! Loom models of the local-lock protocols.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! -p local-lock --test loom` (ci/loom.sh). Preemption bound: 2 in CI (every
//! model here also passes with 3; see the closing notes for run times).
//!
//! Loom threads are CPUs (`LoomPlatform`); an interrupt is a loom thread
//! that runs its handler through `LoomPlatform::interrupt`, which waits for
//! the CPU's IRQs to be enabled. Slot data lives in loom's `UnsafeCell`, so
//! any two unserialised accesses fail the model.
#![cfg(loom)]

use local_lock::handover::SlotTable;
use local_lock::loom_platform::{model, LoomPlatform};
use local_lock::sync::{AtomicDWord, CachePadded, DWord, UnsafeCell};
use local_lock::this_cpu::{CpuSheaves, SheafSlots, SheafWord, SHEAF_HDR_WORDS};
use local_lock::{this_cpu_cmpxchg_double, LocalLock, Platform, Strategy};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

/// A CPU's own accesses vs a remote drain (locked strategy, Linux 6.x pcp):
/// nothing is lost or counted twice, accesses never overlap.
#[test]
fn own_access_vs_remote_drain() {
    model("own_access_vs_remote_drain", || {
        let p = LoomPlatform::new(2, Strategy::Locked);
        let l = Arc::new(LocalLock::<usize, _, 2>::new_with(p.clone(), |_| 0));
        let drained = Arc::new(AtomicUsize::new(0));

        let owner = {
            let (l, p) = (l.clone(), p.clone());
            thread::spawn(move || {
                p.set_cpu(0);
                for _ in 0..2 {
                    *l.lock() += 1;
                }
            })
        };
        let drainer = {
            let (l, p, drained) = (l.clone(), p.clone(), drained.clone());
            thread::spawn(move || {
                p.set_cpu(1);
                let mut g = l
                    .lock_remote(0)
                    .expect("locked slots are remotely lockable");
                drained.fetch_add(*g, SeqCst);
                *g = 0;
            })
        };
        owner.join().unwrap();
        drainer.join().unwrap();
        let left = *l.lock_remote(0).unwrap();
        assert_eq!(drained.load(SeqCst) + left, 2);
    });
}

/// An interrupt-context access vs the irqsave flavour, pinned strategy (a
/// kernel without RT): masking IRQs is the only protection, and it suffices.
#[test]
fn interrupt_vs_irqsave_pinned() {
    model("interrupt_vs_irqsave_pinned", || {
        let p = LoomPlatform::new(1, Strategy::Pinned);
        let l = Arc::new(LocalLock::<usize, _, 1>::new_with(p.clone(), |_| 0));
        let irq = {
            let (l, p) = (l.clone(), p.clone());
            thread::spawn(move || {
                p.interrupt(0, || {
                    assert!(p.in_interrupt());
                    let mut g = l.lock_irqsave();
                    *g += 10;
                })
            })
        };
        p.set_cpu(0);
        {
            let mut g = l.lock_irqsave();
            let v = *g;
            *g = v + 1;
        }
        irq.join().unwrap();
        assert_eq!(*l.lock_irqsave(), 11);
    });
}

/// Trylock in an interrupt against a task holding the lock (locked
/// strategy): it fails while the task is inside, and a success never
/// overlaps the task's section.
#[test]
fn trylock_fails_when_reentered() {
    model("trylock_fails_when_reentered", || {
        let p = LoomPlatform::new(1, Strategy::Locked);
        let l = Arc::new(LocalLock::<usize, _, 1>::new_with(p.clone(), |_| 0));
        let inside = Arc::new(AtomicBool::new(false));
        let irq = {
            let (l, p, inside) = (l.clone(), p.clone(), inside.clone());
            thread::spawn(move || {
                p.interrupt(0, || match l.try_lock() {
                    Some(mut g) => {
                        assert!(
                            !inside.load(SeqCst),
                            "trylock succeeded inside the task's section"
                        );
                        *g += 10;
                        true
                    }
                    None => false,
                })
            })
        };
        p.set_cpu(0);
        {
            let mut g = l.lock();
            inside.store(true, SeqCst);
            *g += 1;
            inside.store(false, SeqCst);
        }
        let got = irq.join().unwrap();
        assert_eq!(*l.lock(), if got { 11 } else { 1 });
    });
}

/// `this_cpu_cmpxchg_double` against an interrupt on the same CPU doing
/// the same (SLUB's lockless `(freelist, tid)` pattern, nothing masked):
/// each side retries from a fresh read until its exchange succeeds, and
/// neither update is lost.
#[test]
fn this_cpu_cmpxchg_double_vs_interrupt() {
    model("this_cpu_cmpxchg_double_vs_interrupt", || {
        let p = LoomPlatform::new(1, Strategy::Pinned);
        let w = Arc::new(AtomicDWord::new(DWord::new(0, 0)));
        let bump = |p: &LoomPlatform, w: &AtomicDWord, by: usize| loop {
            let cpu = p.current_cpu();
            let d = w.load(loom::sync::atomic::Ordering::Acquire);
            if this_cpu_cmpxchg_double(p, cpu, w, d, DWord::new(d.lo + by, d.hi + 1)) {
                break;
            }
        };
        let irq = {
            let (p, w) = (p.clone(), w.clone());
            thread::spawn(move || p.interrupt(0, || bump(&p, &w, 10)))
        };
        p.set_cpu(0);
        bump(&p, &w, 1);
        irq.join().unwrap();
        assert_eq!(
            w.load(loom::sync::atomic::Ordering::Relaxed),
            DWord::new(11, 2)
        );
    });
}

/// Per-thread slot hand-over: a thread exits (flush + release), a remote
/// drainer and a new thread race for the free slot. The data needs no
/// atomics: the Release/Acquire of the ownership word orders it.
#[test]
fn per_thread_slot_handover() {
    model("per_thread_slot_handover", || {
        let table = Arc::new(SlotTable::<1>::new());
        let data = Arc::new(UnsafeCell::new(0usize));
        let drained = Arc::new(AtomicUsize::new(0));
        let slot = table.claim().expect("first claim");
        assert_eq!(slot, 0);

        // The exiting owner: writes its slot, then hands it over.
        let exiting = {
            let (table, data) = (table.clone(), data.clone());
            thread::spawn(move || {
                // SAFETY: the slot is OWNED by this thread.
                data.with_mut(|p| unsafe { *p += 5 });
                table.release(0);
            })
        };
        // A drainer empties the slot if it finds it free.
        let drainer = {
            let (table, data, drained) = (table.clone(), data.clone(), drained.clone());
            thread::spawn(move || {
                if table.try_drain(0) {
                    // SAFETY: DRAINING gives exclusive access.
                    let v = data.with_mut(|p| unsafe { core::mem::take(&mut *p) });
                    drained.fetch_add(v, SeqCst);
                    table.end_drain(0);
                }
            })
        };
        // A new thread claims the slot once it is free and adds to it.
        let newcomer = {
            let (table, data) = (table.clone(), data.clone());
            thread::spawn(move || {
                if let Some(s) = table.claim() {
                    // SAFETY: OWNED by this thread now.
                    data.with_mut(|p| unsafe { *p += 100 });
                    table.release(s);
                    true
                } else {
                    false
                }
            })
        };
        exiting.join().unwrap();
        drainer.join().unwrap();
        let claimed = newcomer.join().unwrap();
        // SAFETY: all threads joined.
        let left = data.with(|p| unsafe { *p });
        assert_eq!(
            left + drained.load(SeqCst),
            5 + if claimed { 100 } else { 0 }
        );
    });
}

/// The platform reports loom CPUs and interrupt context faithfully.
#[test]
fn loom_platform_reports_context() {
    model("loom_platform_reports_context", || {
        let p = LoomPlatform::new(2, Strategy::Pinned);
        p.set_cpu(1);
        assert_eq!(p.current_cpu(), 1);
        assert!(!p.in_interrupt());
        let f = p.irq_save();
        assert!(p.irqs_disabled());
        // SAFETY: matches the save above.
        unsafe { p.irq_restore(f) };
        assert!(!p.irqs_disabled());
    });
}

/// The `this_cpu` sheaf operations as restartable sequences provide
/// them (issue #16): each operation indivisible on its CPU, two threads
/// time-sharing CPU 0 (a migration is the next operation running on
/// another CPU's record, which is what a restarted sequence does). One
/// thread pops and pushes tokens (`popper`); the other detaches the main
/// sheaf (`this_cpu_xchg`), takes its tokens, installs its own sheaf
/// (`this_cpu_cmpxchg` from 0, else keeps it), moves to CPU 1 and does it
/// again. Every token is found exactly once at the end.
fn sheaf_ops_keep_every_token(
    name: &'static str,
    popper: fn(&LoomPlatform, SheafSlots<'static, 2>) -> Vec<usize>,
) {
    model(name, move || {
        let p = LoomPlatform::new(2, Strategy::Pinned);
        let recs: &'static [CachePadded<CpuSheaves>; 2] =
            Box::leak(Box::new([const { CachePadded::new(CpuSheaves::new()) }; 2]));
        // SAFETY: 2 records one CachePadded apart; sheaves of CAP entries.
        let s = unsafe {
            SheafSlots::<2>::new(recs.as_ptr().cast(), core::mem::size_of_val(&recs[0]), CAP)
        };
        let first = sheaf();
        // SAFETY: ours until installed.
        unsafe {
            let w = first as *mut usize;
            *w.add(SHEAF_HDR_WORDS) = 8;
            *w.add(SHEAF_HDR_WORDS + 1) = 16;
            *w = 2;
        }
        assert!(local_lock::this_cpu::install_main_in(&recs[0], CAP, first));
        let pop = {
            let p = p.clone();
            thread::spawn(move || {
                p.set_cpu(0);
                popper(&p, s)
            })
        };
        let slow = {
            let p = p.clone();
            thread::spawn(move || {
                let mut mine = Vec::new();
                let mut own = sheaf();
                for cpu in 0..2 {
                    p.set_cpu(cpu);
                    // SAFETY: the loom platform's slots are Pinned; its IRQ
                    // mask makes each operation indivisible.
                    let old = unsafe { p.this_cpu_xchg(s, SheafWord::Main, 0) }.unwrap();
                    if old != 0 {
                        take_all(old, &mut mine);
                    }
                    // SAFETY: as above.
                    if unsafe { p.this_cpu_cmpxchg(s, SheafWord::Main, 0, own) } {
                        own = if old != 0 { old } else { sheaf() };
                    } else if old != 0 {
                        own = old;
                    }
                }
                mine
            })
        };
        let mut all = pop.join().unwrap();
        all.extend(slow.join().unwrap());
        for r in recs {
            for sh in [
                local_lock::this_cpu::take_main_in(r),
                r.spare.load(core::sync::atomic::Ordering::Relaxed),
            ] {
                if sh != 0 {
                    take_all(sh, &mut all);
                }
            }
        }
        all.sort_unstable();
        assert_eq!(all, [8, 16], "a token was lost or duplicated");
    });
}

/// Sheaf capacity of the `this_cpu` models.
const CAP: usize = 2;

fn sheaf() -> usize {
    Box::leak(vec![0usize; SHEAF_HDR_WORDS + CAP].into_boxed_slice()).as_mut_ptr() as usize
}

fn take_all(sh: usize, out: &mut Vec<usize>) {
    // SAFETY: a leaked sheaf the caller detached (owns).
    let w = unsafe { std::slice::from_raw_parts_mut(sh as *mut usize, SHEAF_HDR_WORDS + CAP) };
    while w[0] > 0 {
        w[0] -= 1;
        out.push(w[SHEAF_HDR_WORDS + w[0]]);
    }
}

/// [`sheaf_ops_keep_every_token`] with single pops and pushes.
#[test]
fn this_cpu_sheaf_ops_keep_every_token() {
    sheaf_ops_keep_every_token("this_cpu_sheaf_ops_keep_every_token", |p, s| {
        let mut mine = Vec::new();
        // SAFETY: the loom platform's slots are Pinned; its IRQ mask makes
        // each operation indivisible (the same below).
        let v = unsafe { p.this_cpu_sheaf_pop(s) };
        if v != 0 {
            mine.push(v);
        }
        if let Some(v) = mine.pop() {
            // SAFETY: as above.
            if !unsafe { p.this_cpu_sheaf_push(s, v) } {
                mine.push(v);
            }
        }
        // SAFETY: as above.
        let v = unsafe { p.this_cpu_sheaf_pop(s) };
        if v != 0 {
            mine.push(v);
        }
        mine
    });
}

/// [`sheaf_ops_keep_every_token`] with the bulk pop and push
/// (`this_cpu_sheaf_pop_many`, `this_cpu_sheaf_push_many`: a bulk
/// alloc's and a bulk free's one section).
#[test]
fn this_cpu_bulk_sheaf_ops_keep_every_token() {
    sheaf_ops_keep_every_token("this_cpu_bulk_sheaf_ops_keep_every_token", |p, s| {
        let mut mine = Vec::new();
        let mut out = [0usize; CAP];
        // SAFETY: as in `this_cpu_sheaf_ops_keep_every_token`.
        let k = unsafe { p.this_cpu_sheaf_pop_many(s, &mut out) };
        mine.extend_from_slice(&out[..k]);
        // SAFETY: as above.
        let k = unsafe { p.this_cpu_sheaf_push_many(s, &mine) };
        mine.drain(..k);
        // SAFETY: as above.
        let k = unsafe { p.this_cpu_sheaf_pop_many(s, &mut out[..1]) };
        mine.extend_from_slice(&out[..k]);
        mine
    });
}

/// The protocol of the restartable sections on the main sheaf's words
/// (`rseq/mod.rs`; issue #16): the sheaf's size lives in the CPU record
/// (`count`) while it is installed, `limit` says whether one is, pops and
/// pushes commit by storing `count`, a local take commits by a
/// compare-exchange of `limit` to 0, an install stores `main` and `count`
/// and commits by storing `limit`, and a remote taker raises `busy`,
/// clears `limit`, fences the CPU and only then reads `main` and `count`.
/// Here every word is a loom atomic (each access an interleaving point);
/// a section runs as its reads, then its commit under the CPU (a loom
/// mutex holding a fence count): a fence between the two restarts it, as
/// the kernel does when the membarrier's IPI finds the thread inside the
/// section. The CPU's thread pops a token, takes the main sheaf, installs
/// a sheaf of its own (one token) and pushes the popped token, while a
/// remote taker drains it; every token is found exactly once. (Without
/// `busy`, the install lands between the taker's fence and its reads: the
/// taker takes the installed sheaf and the one it cleared is lost.)
#[test]
fn rseq_main_words_survive_a_remote_taker() {
    use std::sync::atomic::AtomicUsize as Word;
    use std::sync::atomic::Ordering::Relaxed;

    struct Rec {
        main: AtomicUsize,
        count: AtomicUsize,
        limit: AtomicUsize,
        busy: AtomicUsize,
    }
    fn new_sheaf(tokens: &[usize]) -> usize {
        let w: &'static [Word] =
            Box::leak((0..SHEAF_HDR_WORDS + CAP).map(|_| Word::new(0)).collect());
        w[0].store(tokens.len(), Relaxed);
        for (i, &t) in tokens.iter().enumerate() {
            w[SHEAF_HDR_WORDS + i].store(t, Relaxed);
        }
        w.as_ptr() as usize
    }
    fn word(sh: usize, i: usize) -> &'static Word {
        // SAFETY: a leaked sheaf of SHEAF_HDR_WORDS + CAP words.
        unsafe { &*(sh as *const Word).add(i) }
    }
    fn drain(sh: usize, out: &mut Vec<usize>) {
        for i in 0..word(sh, 0).load(Relaxed) {
            out.push(word(sh, SHEAF_HDR_WORDS + i).load(Relaxed));
        }
        word(sh, 0).store(0, Relaxed);
    }
    /// One section: `read` until it commits (`Some`) or gives up without
    /// a commit (`Err`), `commit` run under the CPU unless a fence came
    /// in between (then the section starts again).
    fn section<T, C>(
        cpu: &loom::sync::Mutex<usize>,
        mut read: impl FnMut() -> Result<C, T>,
        commit: impl Fn(C) -> Option<T>,
    ) -> T
    where
        C: Copy,
    {
        loop {
            let start = *cpu.lock().unwrap();
            let c = match read() {
                Ok(c) => c,
                Err(t) => return t,
            };
            let g = cpu.lock().unwrap();
            if *g != start {
                continue; // restarted by the fence
            }
            if let Some(t) = commit(c) {
                drop(g);
                return t;
            }
            drop(g);
        }
    }

    model("rseq_main_words_survive_a_remote_taker", || {
        let rec = Arc::new(Rec {
            main: AtomicUsize::new(new_sheaf(&[8, 16])),
            count: AtomicUsize::new(2),
            limit: AtomicUsize::new(CAP),
            busy: AtomicUsize::new(0),
        });
        let cpu = Arc::new(loom::sync::Mutex::new(0usize));
        let local = {
            let (r, cpu) = (rec.clone(), cpu.clone());
            thread::spawn(move || {
                let mut mine = Vec::new();
                // pop
                let popped = section(
                    &cpu,
                    || {
                        let t = r.count.load(SeqCst).wrapping_sub(1);
                        if t >= r.limit.load(SeqCst) {
                            return Err(0);
                        }
                        let sh = r.main.load(SeqCst);
                        Ok((t, word(sh, SHEAF_HDR_WORDS + t).load(Relaxed)))
                    },
                    |(t, v)| {
                        r.count.store(t, SeqCst);
                        Some(v)
                    },
                );
                // take: the size stored back before the commit
                let taken = section(
                    &cpu,
                    || {
                        let l = r.limit.load(SeqCst);
                        if l == 0 {
                            return Err(0);
                        }
                        let sh = r.main.load(SeqCst);
                        word(sh, 0).store(r.count.load(SeqCst), Relaxed);
                        Ok((l, sh))
                    },
                    |(l, sh)| {
                        r.limit
                            .compare_exchange(l, 0, SeqCst, SeqCst)
                            .ok()
                            .map(|_| sh)
                    },
                );
                if taken != 0 {
                    drain(taken, &mut mine);
                }
                // install a sheaf of one token
                let own = new_sheaf(&[24]);
                let installed = section(
                    &cpu,
                    || {
                        if r.limit.load(SeqCst) != 0 || r.busy.load(SeqCst) != 0 {
                            return Err(false);
                        }
                        r.main.store(own, SeqCst);
                        r.count.store(1, SeqCst);
                        Ok(())
                    },
                    |()| {
                        // (A plain store in the section. Here an exchange:
                        // loom 0.7 lets the taker's `swap` read a value
                        // older than a plain store it is ordered after,
                        // an outcome x86, C11 and this section never
                        // allow; a read-modify-write keeps them ordered.)
                        r.limit.swap(CAP, SeqCst);
                        Some(true)
                    },
                );
                if !installed {
                    drain(own, &mut mine);
                }
                // push the popped token back
                if popped != 0 {
                    let pushed = section(
                        &cpu,
                        || {
                            let t = r.count.load(SeqCst);
                            if t >= r.limit.load(SeqCst) {
                                return Err(false);
                            }
                            let sh = r.main.load(SeqCst);
                            word(sh, SHEAF_HDR_WORDS + t).store(popped, Relaxed);
                            Ok(t)
                        },
                        |t| {
                            r.count.store(t + 1, SeqCst);
                            Some(true)
                        },
                    );
                    if !pushed {
                        mine.push(popped);
                    }
                }
                mine
            })
        };
        let remote = {
            let (r, cpu) = (rec.clone(), cpu.clone());
            thread::spawn(move || {
                let mut got = Vec::new();
                if r.busy.swap(1, SeqCst) != 0 {
                    return got;
                }
                if r.limit.swap(0, SeqCst) != 0 {
                    *cpu.lock().unwrap() += 1; // the fence
                    let sh = r.main.load(SeqCst);
                    word(sh, 0).store(r.count.load(SeqCst), Relaxed);
                    drain(sh, &mut got);
                }
                r.busy.store(0, SeqCst);
                got
            })
        };
        let mine = local.join().unwrap();
        let got = remote.join().unwrap();
        let mut left = Vec::new();
        if rec.limit.load(SeqCst) != 0 {
            let sh = rec.main.load(SeqCst);
            word(sh, 0).store(rec.count.load(SeqCst), Relaxed);
            drain(sh, &mut left);
        }
        let mut all = [&mine[..], &got[..], &left[..]].concat();
        all.sort_unstable();
        assert_eq!(
            all,
            [8, 16, 24],
            "a token was lost or duplicated (the CPU's thread {mine:?}, the remote taker \
             {got:?}, left installed {left:?})"
        );
    });
}
