//! A deterministic platform for tests: the test chooses which CPU "runs",
//! simulates interrupt context, and can arm an interrupt that fires in the
//! middle of allocator code.
//!
//! The simulated machine state (current CPU, interrupt nesting, IRQ mask,
//! preemption count, armed interrupt) is per OS thread, so parallel test
//! threads do not disturb each other. One test thread is one CPU at a time;
//! tests that want real concurrency use the std or loom platforms.
//!
//! Interrupts are delivered only while the simulated IRQs are enabled; an
//! interrupt armed or raised while they are masked stays pending and fires
//! when they are unmasked (at `irq_restore`/`irq_enable`), as on hardware.
//! Armed interrupts fire at *hook points*: right after a pin, after an
//! unpin, and when IRQs are unmasked, i.e. exactly where a real interrupt
//! would find the interrupted code with preemption disabled but the slot
//! not yet taken (the window `local_trylock` exists for).

extern crate std;

use std::boxed::Box;
use std::cell::{Cell, RefCell};

use crate::platform::{IrqFlags, Pin, Platform, Strategy};
use crate::topology::Topology;

/// An armed interrupt: hook points left before it fires, and its handler.
type Armed = (usize, Box<dyn FnMut()>);

std::thread_local! {
    static CPU: Cell<usize> = const { Cell::new(0) };
    static IRQ_DEPTH: Cell<usize> = const { Cell::new(0) };
    static IRQS_OFF: Cell<bool> = const { Cell::new(false) };
    static PREEMPT: Cell<usize> = const { Cell::new(0) };
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
    static PENDING: Cell<bool> = const { Cell::new(false) };
    static FIRED: Cell<usize> = const { Cell::new(0) };
}

/// The deterministic test platform. `nr_cpus` and the strategy are per value;
/// the simulated CPU state is per OS thread (see the module docs).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::LocalLock;
///
/// const P: TestPlatform = TestPlatform::pinned(2);
/// static L: LocalLock<u32, TestPlatform> = LocalLock::new(P);
/// P.on_cpu(1, || *L.lock() += 1); // runs on CPU 1, then migrates back
/// assert_eq!(*L.lock(), 0, "CPU 0's slot");
/// // An interrupt while the slot is held: the handler cannot take it.
/// let held = L.lock();
/// assert_eq!(P.interrupt(|| L.try_lock().is_none()), Some(true));
/// drop(held);
/// // With IRQs masked an interrupt stays pending.
/// let masked = L.lock_irqsave();
/// assert_eq!(P.interrupt(|| ()), None);
/// drop(masked);
/// // An armed interrupt fires at the next hook point (here: inside `lock`).
/// static SEEN: AtomicUsize = AtomicUsize::new(0);
/// P.arm_interrupt(0, || {
///     SEEN.fetch_add(1, Relaxed);
/// });
/// *L.lock() += 1;
/// assert_eq!((P.fired(), SEEN.load(Relaxed)), (1, 1));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TestPlatform {
    nr_cpus: usize,
    strategy: Strategy,
    has_irqs: bool,
    seeds: bool,
    topology: Option<&'static Topology>,
}

impl TestPlatform {
    /// A machine of `nr_cpus` CPUs with the pinned (kernel, !RT) strategy.
    pub const fn pinned(nr_cpus: usize) -> Self {
        TestPlatform {
            nr_cpus,
            strategy: Strategy::Pinned,
            has_irqs: true,
            seeds: false,
            topology: None,
        }
    }

    /// A machine of `nr_cpus` CPUs with the locked (PREEMPT_RT) strategy.
    pub const fn locked(nr_cpus: usize) -> Self {
        TestPlatform {
            nr_cpus,
            strategy: Strategy::Locked,
            has_irqs: true,
            seeds: false,
            topology: None,
        }
    }

    /// This platform with [`random_seed`](Platform::random_seed) returning
    /// a different value on every call (as on std), each call a hook point
    /// where an armed interrupt may fire: for races around a first use
    /// that draws a seed. (Without it the seed is 0: no entropy.)
    ///
    /// ```
    /// use local_lock::test_platform::TestPlatform;
    /// use local_lock::Platform;
    /// let p = TestPlatform::pinned(1).with_seeds();
    /// assert_ne!(p.random_seed(), p.random_seed());
    /// assert_eq!(TestPlatform::pinned(1).random_seed(), 0);
    /// ```
    pub const fn with_seeds(mut self) -> Self {
        self.seeds = true;
        self
    }

    /// This platform on a NUMA machine: CPUs on the nodes `t` says, nodes
    /// as far apart as it says (without it, one node).
    ///
    /// ```
    /// use local_lock::test_platform::TestPlatform;
    /// use local_lock::topology::Topology;
    /// use local_lock::Platform;
    ///
    /// static T: Topology = Topology::uniform(2, 2).with_distance(0, 1, 21);
    /// let p = TestPlatform::pinned(4).with_topology(&T);
    /// assert_eq!((p.nr_node_ids(), p.cpu_to_node(2), p.node_distance(0, 1)), (2, 1, 21));
    /// p.set_cpu(3);
    /// assert_eq!(p.numa_node_id(), 1);
    /// p.set_cpu(0);
    /// ```
    pub const fn with_topology(mut self, t: &'static Topology) -> Self {
        self.topology = Some(t);
        self
    }

    /// Makes this thread run on `cpu` from now on (a migration).
    ///
    /// # Panics
    ///
    /// If the thread is pinned (preemption disabled) or in interrupt context:
    /// a pinned task cannot migrate.
    pub fn set_cpu(&self, cpu: usize) {
        assert!(
            cpu < self.nr_cpus,
            "TestPlatform: CPU {cpu} >= nr_cpus {}",
            self.nr_cpus
        );
        assert!(
            PREEMPT.get() == 0 && IRQ_DEPTH.get() == 0,
            "TestPlatform: cannot migrate a pinned task or an interrupt handler"
        );
        CPU.set(cpu);
    }

    /// Runs `f` on `cpu`, then migrates back.
    pub fn on_cpu<R>(&self, cpu: usize, f: impl FnOnce() -> R) -> R {
        let old = CPU.get();
        self.set_cpu(cpu);
        let r = f();
        CPU.set(old);
        r
    }

    /// Raises an interrupt on the current CPU now: runs `handler` in
    /// interrupt context (IRQs masked inside it, as hardware does) if IRQs
    /// are enabled, and returns its result; returns `None` if they are
    /// masked (the interrupt would be pending).
    pub fn interrupt<R>(&self, handler: impl FnOnce() -> R) -> Option<R> {
        if IRQS_OFF.get() {
            return None;
        }
        Some(run_in_irq(handler))
    }

    /// Arms an interrupt that fires at the `after`-th hook point from now
    /// (0 = the next one) on this thread, or later if IRQs are masked then.
    /// Replaces a previously armed one.
    pub fn arm_interrupt(&self, after: usize, handler: impl FnMut() + 'static) {
        ARMED.with(|a| *a.borrow_mut() = Some((after, Box::new(handler))));
        PENDING.set(false);
    }

    /// Disarms a pending or armed interrupt; returns whether one was left.
    pub fn disarm(&self) -> bool {
        PENDING.set(false);
        ARMED.with(|a| a.borrow_mut().take()).is_some()
    }

    /// How many armed interrupts have fired on this thread so far.
    pub fn fired(&self) -> usize {
        FIRED.get()
    }

    /// The preemption count of this thread (0 = preemptible).
    pub fn preempt_count(&self) -> usize {
        PREEMPT.get()
    }

    /// A hook point: fires the armed interrupt if its countdown reached zero
    /// and IRQs are enabled.
    fn hook(&self) {
        let due = ARMED.with(|a| {
            let mut a = a.borrow_mut();
            match a.as_mut() {
                Some((0, _)) => true,
                Some((n, _)) => {
                    *n -= 1;
                    false
                }
                None => false,
            }
        });
        if due || PENDING.get() {
            if IRQS_OFF.get() {
                PENDING.set(true);
                return;
            }
            PENDING.set(false);
            let Some((_, mut h)) = ARMED.with(|a| a.borrow_mut().take()) else {
                return;
            };
            FIRED.set(FIRED.get() + 1);
            run_in_irq(&mut h);
        }
    }
}

fn run_in_irq<R>(handler: impl FnOnce() -> R) -> R {
    let was_off = IRQS_OFF.replace(true);
    IRQ_DEPTH.set(IRQ_DEPTH.get() + 1);
    let r = handler();
    IRQ_DEPTH.set(IRQ_DEPTH.get() - 1);
    IRQS_OFF.set(was_off);
    r
}

// SAFETY: the simulated CPU of a thread only changes through `set_cpu`,
// which refuses while pinned; interrupt handlers run nested and to
// completion on the same thread; IRQ masking is honoured by delivery; the
// pinned strategy never grants remote pins (default `pin_remote`). Tests
// must not run two threads on the same simulated CPU with the pinned
// strategy (documented).
unsafe impl Platform for TestPlatform {
    const HAS_IRQS: bool = true;

    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }
    fn current_cpu(&self) -> usize {
        CPU.get()
    }
    fn in_interrupt(&self) -> bool {
        IRQ_DEPTH.get() > 0
    }
    fn irqs_disabled(&self) -> bool {
        IRQS_OFF.get()
    }
    fn irq_save(&self) -> IrqFlags {
        if !self.has_irqs {
            return IrqFlags(0);
        }
        IrqFlags(IRQS_OFF.replace(true) as usize)
    }
    unsafe fn irq_restore(&self, flags: IrqFlags) {
        IRQS_OFF.set(flags.0 != 0);
        self.hook();
    }
    fn irq_disable(&self) {
        assert!(
            !IRQS_OFF.get(),
            "TestPlatform: irq_disable with IRQs already disabled"
        );
        IRQS_OFF.set(true);
    }
    unsafe fn irq_enable(&self) {
        IRQS_OFF.set(false);
        self.hook();
    }
    fn preempt_disable(&self) {
        PREEMPT.set(PREEMPT.get() + 1);
    }
    unsafe fn preempt_enable(&self) {
        let p = PREEMPT.get();
        assert!(p > 0, "TestPlatform: unbalanced preempt_enable");
        PREEMPT.set(p - 1);
    }
    fn pin(&self) -> Pin {
        self.preempt_disable();
        let pin = Pin {
            cpu: CPU.get(),
            strategy: self.strategy,
            token: 0,
        };
        self.hook();
        pin
    }
    unsafe fn unpin(&self, pin: Pin) {
        let _ = pin;
        // SAFETY: forwarded contract.
        unsafe { self.preempt_enable() };
        self.hook();
    }
    fn default_strategy(&self) -> Strategy {
        self.strategy
    }
    fn nr_node_ids(&self) -> usize {
        self.topology.map_or(1, |t| t.nr_nodes())
    }
    fn cpu_to_node(&self, cpu: usize) -> usize {
        self.topology.map_or(0, |t| t.cpu_to_node(cpu))
    }
    fn node_distance(&self, a: usize, b: usize) -> u8 {
        match self.topology {
            Some(t) => t.node_distance(a, b),
            None if a == b => crate::topology::LOCAL_DISTANCE,
            None => crate::topology::REMOTE_DISTANCE,
        }
    }
    fn random_seed(&self) -> u64 {
        if !self.seeds {
            return 0;
        }
        static NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
        self.hook();
        NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}
