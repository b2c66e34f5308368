//! The loom platform: loom threads are the CPUs, so loom explores every
//! interleaving of per-CPU code, remote drains and interrupts.
//!
//! * A loom thread declares its CPU with [`LoomPlatform::set_cpu`].
//! * IRQ masking is a per-CPU flag taken by compare-exchange (spinning with
//!   `yield_now`): while a task has its CPU's IRQs masked, an interrupt for
//!   that CPU cannot start.
//! * An interrupt is another loom thread that runs its handler through
//!   [`LoomPlatform::interrupt`]: it waits until the CPU's IRQs are enabled,
//!   masks them, runs in interrupt context on that CPU, and unmasks.
//!
//! Limitation: a real interrupt freezes the task it interrupts, a loom
//! thread does not. So with the pinned strategy only irq-disabling flavours
//! can be modelled against interrupts (plain `lock`/`try_lock` rely on that
//! freezing, and are tested with the deterministic test platform instead);
//! with the locked strategy every flavour is modelled.

use std::sync::Arc;
use std::vec::Vec;

extern crate std;

use loom::cell::Cell;

use crate::platform::{IrqFlags, Platform, Strategy};
use crate::sync::atomic::{AtomicBool, Ordering};

loom::thread_local! {
    static CPU: Cell<usize> = Cell::new(0);
    static IN_IRQ: Cell<bool> = Cell::new(false);
    /// Whether this loom thread holds its CPU's IRQ mask.
    static MASKED: Cell<bool> = Cell::new(false);
}

/// The loom platform (cheap to clone: the IRQ masks are shared).
#[derive(Clone)]
pub struct LoomPlatform {
    strategy: Strategy,
    irq_masked: Arc<Vec<AtomicBool>>,
}

impl LoomPlatform {
    /// `nr_cpus` CPUs with the given strategy.
    pub fn new(nr_cpus: usize, strategy: Strategy) -> Self {
        LoomPlatform {
            strategy,
            irq_masked: Arc::new((0..nr_cpus).map(|_| AtomicBool::new(false)).collect()),
        }
    }

    /// The calling loom thread runs on `cpu` from now on.
    pub fn set_cpu(&self, cpu: usize) {
        assert!(cpu < self.irq_masked.len());
        CPU.with(|c| c.set(cpu));
    }

    fn mask(&self, cpu: usize) {
        while self.irq_masked[cpu]
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            loom::thread::yield_now();
        }
        MASKED.with(|m| m.set(true));
    }

    fn unmask(&self, cpu: usize) {
        MASKED.with(|m| m.set(false));
        self.irq_masked[cpu].store(false, Ordering::Release);
    }

    /// Runs `handler` as an interrupt on `cpu`: waits until that CPU's IRQs
    /// are enabled, masks them for the handler's duration.
    pub fn interrupt<R>(&self, cpu: usize, handler: impl FnOnce() -> R) -> R {
        self.set_cpu(cpu);
        self.mask(cpu);
        IN_IRQ.with(|i| i.set(true));
        let r = handler();
        IN_IRQ.with(|i| i.set(false));
        self.unmask(cpu);
        r
    }
}

// SAFETY: loom threads on distinct CPUs never share a pinned slot (tests
// give each task thread its own CPU); interrupts for a CPU exclude that
// CPU's masked sections through the per-CPU mask; remote pins are granted
// only for the locked strategy (default `pin_remote`).
unsafe impl Platform for LoomPlatform {
    const HAS_IRQS: bool = true;

    fn nr_cpus(&self) -> usize {
        self.irq_masked.len()
    }
    fn current_cpu(&self) -> usize {
        CPU.with(|c| c.get())
    }
    fn in_interrupt(&self) -> bool {
        IN_IRQ.with(|i| i.get())
    }
    fn irqs_disabled(&self) -> bool {
        MASKED.with(|m| m.get())
    }
    fn irq_save(&self) -> IrqFlags {
        if self.irqs_disabled() {
            return IrqFlags(1);
        }
        self.mask(self.current_cpu());
        IrqFlags(0)
    }
    unsafe fn irq_restore(&self, flags: IrqFlags) {
        if flags.0 == 0 {
            self.unmask(self.current_cpu());
        }
    }
    fn irq_disable(&self) {
        assert!(!self.irqs_disabled());
        self.mask(self.current_cpu());
    }
    unsafe fn irq_enable(&self) {
        self.unmask(self.current_cpu());
    }
    fn preempt_disable(&self) {}
    unsafe fn preempt_enable(&self) {}
    fn default_strategy(&self) -> Strategy {
        self.strategy
    }
}

/// Runs a loom model with the preemption bound from `LOOM_MAX_PREEMPTIONS`
/// (2 when unset) and prints how many executions loom explored and how
/// long it took, so every crate's `tests/loom.rs` reports the same way.
pub fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let bound = b.preemption_bound;
    let t = std::time::Instant::now();
    b.check(move || {
        r.fetch_add(1, Relaxed);
        f()
    });
    std::println!(
        "loom {name}: {} executions (preemption bound {:?}) in {:.2?}",
        runs.load(Relaxed),
        bound,
        t.elapsed()
    );
}
