//! [`UserHooks`]: a [`KernelHooks`] implementation for a user-space
//! process, so [`Kernel<UserHooks>`] runs the kernel (pinned, !RT) code paths
//! of the family here and their fast-path cost can be measured.
//!
//! What a platform without hardware interrupts provides:
//!
//! * the CPU id is a per-thread *virtual CPU* set with [`UserHooks::set_cpu`]
//!   (0 unless set);
//! * `local_irq_save`/`restore`/`disable`/`enable` toggle a per-thread soft
//!   interrupt mask (as kernels with lazy/soft IRQ masking do: the flag is
//!   memory, not a privileged instruction);
//! * `preempt_disable`/`enable` bump a per-thread preemption count, exactly
//!   the kernel's `preempt_count` increment plus a compiler barrier;
//! * there are no interrupts, so `in_interrupt()` is always false.
//!
//! The thread-locals are `const`-initialised without destructors, so each
//! access is one `fs:`-relative load or store (as the kernel's per-CPU
//! `preempt_count` is one `gs:`-relative instruction).

use core::cell::Cell;
use core::sync::atomic::{compiler_fence, Ordering};

use local_lock::kernel::{Kernel, KernelHooks};
use local_lock::{IrqFlags, DEFAULT_SLOTS};

/// The per-thread state in one thread-local, so a function that touches
/// several of its words computes their thread-local address once.
struct State {
    cpu: Cell<usize>,
    irqs_off: Cell<bool>,
    preempt: Cell<usize>,
}

std::thread_local! {
    static STATE: State = const {
        State {
            cpu: Cell::new(0),
            irqs_off: Cell::new(false),
            preempt: Cell::new(0),
        }
    };
}

/// The hooks of a user-space "kernel" without interrupts (see the module
/// docs).
pub struct UserHooks;

/// The platform built on [`UserHooks`].
pub type UserKernel = Kernel<UserHooks>;

impl UserHooks {
    /// Makes the calling thread virtual CPU `cpu` (below
    /// [`KernelHooks::NR_CPUS`]).
    ///
    /// # Safety
    ///
    /// No other thread that may take a local lock of a `Kernel<UserHooks>`
    /// platform is CPU `cpu` at the same time, and the calling thread holds
    /// no such lock (pinned slots rely on one thread per CPU id).
    pub unsafe fn set_cpu(cpu: usize) {
        assert!(cpu < Self::NR_CPUS, "UserHooks: CPU {cpu} out of range");
        assert_eq!(
            STATE.with(|s| s.preempt.get()),
            0,
            "UserHooks: cannot migrate while pinned"
        );
        STATE.with(|s| s.cpu.set(cpu));
    }

    /// The calling thread's preemption count (0 = preemptible).
    pub fn preempt_count() -> usize {
        STATE.with(|s| s.preempt.get())
    }
}

// SAFETY: the CPU id is per thread and changes only through `set_cpu`, which
// refuses while pinned and whose contract gives every concurrently running
// thread its own id; there are no interrupts (so masking them is trivially
// effective and `in_interrupt` is false); every id is below NR_CPUS.
unsafe impl KernelHooks for UserHooks {
    const NR_CPUS: usize = DEFAULT_SLOTS;

    /// The machine's CPUs (the virtual CPUs are slots; the memory is shared
    /// by the CPUs that run them), so pcp's `high_max` is the kernel's for
    /// this machine.
    fn nr_online_cpus() -> usize {
        local_lock::std_platform::online_cpus()
    }

    #[inline(always)]
    fn smp_processor_id() -> usize {
        STATE.with(|s| s.cpu.get())
    }
    #[inline(always)]
    fn in_interrupt() -> bool {
        false
    }
    #[inline(always)]
    fn irqs_disabled() -> bool {
        STATE.with(|s| s.irqs_off.get())
    }
    #[inline(always)]
    fn local_irq_save() -> IrqFlags {
        let was = STATE.with(|s| s.irqs_off.replace(true));
        compiler_fence(Ordering::SeqCst);
        IrqFlags(was as usize)
    }
    #[inline(always)]
    unsafe fn local_irq_restore(flags: IrqFlags) {
        compiler_fence(Ordering::SeqCst);
        STATE.with(|s| s.irqs_off.set(flags.0 != 0));
    }
    #[inline(always)]
    fn local_irq_disable() {
        STATE.with(|s| s.irqs_off.set(true));
        compiler_fence(Ordering::SeqCst);
    }
    #[inline(always)]
    unsafe fn local_irq_enable() {
        compiler_fence(Ordering::SeqCst);
        STATE.with(|s| s.irqs_off.set(false));
    }
    #[inline(always)]
    fn preempt_disable() {
        STATE.with(|s| s.preempt.set(s.preempt.get() + 1));
        compiler_fence(Ordering::SeqCst);
    }
    #[inline(always)]
    unsafe fn preempt_enable() {
        compiler_fence(Ordering::SeqCst);
        STATE.with(|s| s.preempt.set(s.preempt.get() - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use local_lock::{LocalLock, Platform, Strategy};

    #[test]
    fn pinned_fast_path_balances_its_counters() {
        static L: LocalLock<u64, UserKernel> = LocalLock::new(Kernel::new());
        {
            let mut g = L.lock_irqsave();
            *g += 1;
            assert_eq!(g.strategy(), Strategy::Pinned);
            assert_eq!(UserHooks::preempt_count(), 1);
            assert!(L.platform().irqs_disabled());
        }
        assert_eq!(UserHooks::preempt_count(), 0);
        assert!(!L.platform().irqs_disabled());
        drop(L.lock_irq());
        assert!(L.try_lock().is_some());
        std::thread::spawn(|| {
            // SAFETY: this thread is the only one using CPU 1.
            unsafe { UserHooks::set_cpu(1) };
            *L.lock() += 10;
        })
        .join()
        .unwrap();
        assert_eq!(*L.lock(), 1);
    }
}
