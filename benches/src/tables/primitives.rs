//! `primitives`: the cost of the primitives the allocators are built from,
//! after the `time_bench` list Jesper Dangaard Brouer measured for Mel
//! Gorman's "Only use per-cpu allocator for irq-safe requests" (seed 000):
//! the empty loop, function and function-pointer calls, IRQ save/restore,
//! IRQ disable/enable, preempt disable/enable and spin locks, plus what this
//! family adds: `sched_getcpu`, every `local_lock` flavour on the three
//! platforms (std real CPUs = locked strategy, std per-thread = pinned,
//! kernel hooks = pinned) and the locks a user would pick instead
//! (`spin::Mutex`, `std::sync::Mutex`), on one thread and on two CPUs.
//!
//! The seed's argument was `local_irq_save_restore - preempt_disable_enable
//! = 38 - 11 = 27` cycles saved per page by protecting the per-CPU lists
//! with preemption instead of IRQs. The rows below put the same primitives
//! side by side as this machine and the family's platforms provide them.

use local_lock::kernel::{Kernel, KernelHooks};
use local_lock::std_platform::{sched_getcpu, PerThread, StdCpu};
use local_lock::sync::SpinLock;
use local_lock::{LocalLock, Platform};

use super::Table;
use crate::measure::{black_box, Case, Ctx, Report, SeedRef};
use crate::user_kernel::{UserHooks, UserKernel};

/// The table (see the module docs).
pub struct Primitives;

static L_STD: LocalLock<u64, StdCpu> = LocalLock::new(StdCpu);
static L_THREAD: LocalLock<u64, PerThread> = LocalLock::new(PerThread);
static L_KERNEL: LocalLock<u64, UserKernel> = LocalLock::new(Kernel::new());
static SPIN: spin::Mutex<u64> = spin::Mutex::new(0);
static SHIM_SPIN: SpinLock<u64> = SpinLock::new(0);
static STD_MUTEX: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

/// The function of the call rows: not inlined, and its argument and result
/// pass through `black_box` so the call can be neither hoisted nor dropped.
#[inline(never)]
fn called(x: u64) -> u64 {
    x.wrapping_add(1)
}

/// Seed 000's `time_bench` figures.
mod seed {
    use crate::measure::SeedRef;

    const fn r(label: &'static str, cycles: f64, ns: f64) -> SeedRef {
        SeedRef { label, cycles, ns }
    }
    pub const FOR_LOOP: SeedRef = r("for_loop", 0.0, 0.232);
    pub const SPIN: SeedRef = r("spin_lock_unlock", 33.0, 8.334);
    pub const SPIN_IRQSAVE: SeedRef = r("spin_lock_unlock_irqsave", 62.0, 15.607);
    pub const SPIN_IRQ: SeedRef = r("spin_lock_unlock_irq", 34.0, 8.560);
    pub const IRQ_DISABLE: SeedRef = r("local_IRQ_disable_enable", 7.0, 1.864);
    pub const IRQ_SAVE: SeedRef = r("local_irq_save_restore", 38.0, 9.665);
    pub const PREEMPT: SeedRef = r("preempt_disable_enable", 11.0, 2.794);
    pub const CALL: SeedRef = r("funcion_call_cost", 6.0, 1.689);
    pub const FN_PTR: SeedRef = r("func_ptr_call_cost", 11.0, 2.767);
}

/// The four flavours of `lock` on one platform, single-threaded.
fn flavours<P: Platform + 'static>(
    section: &str,
    platform: &str,
    lock: &'static LocalLock<u64, P>,
    seeds: [Option<SeedRef>; 4],
) -> Vec<Case> {
    let cases = [
        Case::op(format!("{platform} lock"), move || {
            *lock.lock() += 1;
        }),
        Case::op(format!("{platform} lock_irq"), move || {
            *lock.lock_irq() += 1;
        }),
        Case::op(format!("{platform} lock_irqsave"), move || {
            *lock.lock_irqsave() += 1;
        }),
        Case::op(format!("{platform} try_lock"), move || {
            if let Some(mut g) = lock.try_lock() {
                *g += 1;
            }
        }),
    ];
    cases
        .into_iter()
        .zip(seeds)
        .map(|(c, s)| {
            let c = c.section(section);
            match s {
                Some(s) => c.seed(s),
                None => c,
            }
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();

    // --- calls and the CPU id -------------------------------------------
    let s = "calls and the CPU id";
    v.push(
        Case::raw("for_loop (empty loop, black_box(i))", |_, iters| {
            for i in 0..iters {
                black_box(i);
            }
        })
        .section(s)
        .seed(seed::FOR_LOOP),
    );
    v.push(
        Case::raw("function call (#[inline(never)])", |_, iters| {
            for i in 0..iters {
                black_box(called(black_box(i)));
            }
        })
        .section(s)
        .seed(seed::CALL),
    );
    v.push(
        Case::raw("function-pointer call", |_, iters| {
            let f: fn(u64) -> u64 = black_box(called);
            for i in 0..iters {
                black_box(f(black_box(i)));
            }
        })
        .section(s)
        .seed(seed::FN_PTR),
    );
    v.push(
        Case::op("sched_getcpu()", || {
            black_box(sched_getcpu());
        })
        .section(s)
        .note("StdCpu's current CPU; glibc >= 2.35 reads it from rseq"),
    );
    v.push(
        Case::op("PerThread current_cpu()", || {
            black_box(PerThread.current_cpu());
        })
        .section(s)
        .note("the thread's slot: one TLS load"),
    );

    // --- IRQ and preemption, as each platform provides them ---------------
    let s = "IRQ and preemption, as each platform provides them";
    v.push(
        Case::op("StdCpu/PerThread irq_save+restore", || {
            let f = black_box(StdCpu.irq_save());
            // SAFETY: restores the save just above.
            unsafe { StdCpu.irq_restore(f) };
        })
        .section(s)
        .note("no IRQs in std: a no-op (so is preempt_disable)"),
    );
    v.push(
        Case::op("UserHooks local_irq_save+restore", || {
            let f = UserHooks::local_irq_save();
            // SAFETY: restores the save just above.
            unsafe { UserHooks::local_irq_restore(f) };
        })
        .section(s)
        .seed(seed::IRQ_SAVE)
        .note("per-thread soft IRQ mask"),
    );
    v.push(
        Case::op("UserHooks local_irq_disable+enable", || {
            UserHooks::local_irq_disable();
            // SAFETY: IRQs were enabled before the disable just above.
            unsafe { UserHooks::local_irq_enable() };
        })
        .section(s)
        .seed(seed::IRQ_DISABLE),
    );
    v.push(
        Case::op("UserHooks preempt_disable+enable", || {
            UserHooks::preempt_disable();
            // SAFETY: matches the disable just above.
            unsafe { UserHooks::preempt_enable() };
        })
        .section(s)
        .seed(seed::PREEMPT)
        .note("per-thread preempt count"),
    );

    // --- spin locks and mutexes, uncontended ------------------------------
    let s = "spin locks and mutexes, uncontended (lock, +1, unlock)";
    v.push(
        Case::op("spin::Mutex", || {
            *SPIN.lock() += 1;
        })
        .section(s),
    );
    v.push(
        Case::op("spin_lock: preempt + spin::Mutex", || {
            UserHooks::preempt_disable();
            *SPIN.lock() += 1;
            // SAFETY: matches the disable above.
            unsafe { UserHooks::preempt_enable() };
        })
        .section(s)
        .seed(seed::SPIN)
        .note("the kernel's spin_lock also disables preemption"),
    );
    v.push(
        Case::op("spin_lock_irq: + irq_disable", || {
            UserHooks::local_irq_disable();
            UserHooks::preempt_disable();
            *SPIN.lock() += 1;
            // SAFETY: reverse order of the disables above.
            unsafe {
                UserHooks::preempt_enable();
                UserHooks::local_irq_enable();
            }
        })
        .section(s)
        .seed(seed::SPIN_IRQ),
    );
    v.push(
        Case::op("spin_lock_irqsave: + irq_save", || {
            let f = UserHooks::local_irq_save();
            UserHooks::preempt_disable();
            *SPIN.lock() += 1;
            // SAFETY: reverse order of the save/disable above.
            unsafe {
                UserHooks::preempt_enable();
                UserHooks::local_irq_restore(f);
            }
        })
        .section(s)
        .seed(seed::SPIN_IRQSAVE),
    );
    v.push(
        Case::op("local_lock::sync::SpinLock", || {
            *SHIM_SPIN.lock() += 1;
        })
        .section(s)
        .note("the family's zone lock (spin's SpinMutex)"),
    );
    v.push(
        Case::op("std::sync::Mutex", || {
            *STD_MUTEX.lock().unwrap() += 1;
        })
        .section(s)
        .note("futex"),
    );

    // --- local_lock flavours ----------------------------------------------
    v.extend(flavours(
        "local_lock, StdCpu (locked: sched_getcpu + per-CPU spin lock)",
        "StdCpu",
        &L_STD,
        [None; 4],
    ));
    v.extend(flavours(
        "local_lock, PerThread (pinned: the thread's own slot, no atomic RMW)",
        "PerThread",
        &L_THREAD,
        [None; 4],
    ));
    v.extend(flavours(
        "local_lock, Kernel<UserHooks> (pinned: preempt count, soft IRQ mask; seed = the kernel's cost)",
        "Kernel<UserHooks>",
        &L_KERNEL,
        [
            Some(seed::PREEMPT),
            Some(seed::IRQ_DISABLE),
            Some(seed::IRQ_SAVE),
            None,
        ],
    ));

    // --- two threads --------------------------------------------------------
    let s = "two threads at once, one per CPU (ns/op per thread)";
    v.push(
        Case::op("StdCpu lock (own CPU's slot)", || {
            *L_STD.lock() += 1;
        })
        .threads(2)
        .section(s),
    );
    v.push(
        Case::op("PerThread lock (own slot)", || {
            *L_THREAD.lock() += 1;
        })
        .threads(2)
        .section(s),
    );
    v.push(
        Case::raw("Kernel<UserHooks> lock (own vCPU)", |t, iters| {
            // SAFETY: the two workers are virtual CPUs 1 and 2, used by no
            // other thread (the measuring thread, CPU 0, waits meanwhile).
            unsafe { UserHooks::set_cpu(t + 1) };
            for _ in 0..iters {
                *L_KERNEL.lock() += 1;
            }
        })
        .threads(2)
        .section(s),
    );
    v.push(
        Case::op("spin::Mutex, one shared", || {
            *SPIN.lock() += 1;
        })
        .threads(2)
        .section(s)
        .note("contended: the cache line bounces"),
    );
    v.push(
        Case::op("std::sync::Mutex, one shared", || {
            *STD_MUTEX.lock().unwrap() += 1;
        })
        .threads(2)
        .section(s)
        .note("contended"),
    );
    v
}

impl Table for Primitives {
    fn name(&self) -> &'static str {
        "primitives"
    }

    fn about(&self) -> &'static str {
        "seed 000: time_bench primitive costs (loop, calls, IRQ/preempt, spin locks) + local_lock flavours on StdCpu, PerThread, Kernel<UserHooks>"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let report = cx.report(
            self.name(),
            "Primitive costs (seed 000: time_bench, Mel Gorman's irq-safe pcp patch)",
            cases(),
        )
        .note(
            "seed figures: Jesper Dangaard Brouer's time_bench on Linux 4.10 (TSC ~4 GHz), in cycles(tsc) and ns per operation.",
        )
        .note(
            "rows within ~1 ns (2-3 cycles) of each other are not ordered reliably: loop alignment, stack spills and \
             4K aliasing (which moves with ASLR from run to run) shift single-digit-cycle loops by that much.",
        )
        .note(
            "not reproduced here: local_BH_disable_enable (no softirqs in user space); irqsave_before_lock and \
             simple_irq_disable_before_lock are the spin_lock_irqsave/_irq rows; page_alloc_put belongs to the page table.",
        )
        .note(
            "the seed's point: local_irq_save_restore - preempt_disable_enable = 38 - 11 = 27 cycles saved per page \
             by guarding the pcp lists with preemption instead of IRQs; compare the Kernel<UserHooks> lock vs lock_irqsave rows.",
        );
        let cycles = |name: &str| {
            report
                .row(name)
                .and_then(|r| r.stats.cycles)
                .map(|c| c.median)
        };
        match (
            cycles("Kernel<UserHooks> lock_irqsave"),
            cycles("Kernel<UserHooks> lock"),
        ) {
            (Some(irqsave), Some(lock)) => {
                let line = format!(
                    "here: Kernel<UserHooks> lock_irqsave - lock = {:.1} - {:.1} = {:.1} cycles \
                     (the IRQ mask here is a per-thread flag in memory, not pushf/cli/popf: the difference is that flag's cost)",
                    irqsave,
                    lock,
                    irqsave - lock
                );
                report.note(line)
            }
            _ => report,
        }
    }
}
