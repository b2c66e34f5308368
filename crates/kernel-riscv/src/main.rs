//! A small bare-metal kernel for QEMU's riscv64 `virt` machine that uses the
//! mm-rs allocator family as an outside kernel would, on every hart at once,
//! with allocations from timer-interrupt context.
//!
//! ```text
//!   boot (arch.rs)        every hart: tp = hart id, stack, FS on, mtvec
//!   boot_main (hart 0)    device tree -> harts, RAM; RAM after the image ->
//!                         buddy (zones DMA | Normal, zeroed); percpu counters
//!   run (every hart)      timer every ~1 ms; ROUNDS x task_round (work.rs)
//!                         while timer_tick allocates in interrupt context
//!   end of run            timers off; mailboxes emptied; SLUB flushed per
//!                         hart, shrunk; pcp drained and checked per hart;
//!                         percpu checked and dropped; buddy free pages ==
//!                         before, invariants; reports; power off pass/fail
//! ```
//!
//! * [`platform`]: the `KernelHooks` implementation (hart id in `tp`, IRQs
//!   through `mstatus.MIE`, `in_interrupt` from a per-hart flag the trap
//!   handler sets, a per-hart preempt count; pinned strategy).
//! * [`mm`]: the allocator statics and where memory comes from.
//! * [`work`]: the self-test (task and interrupt sides).
//!
//! Output goes to the UART; the last line is `KERNEL PASS` (QEMU exits 0)
//! or `KERNEL FAIL: ...` / `KERNEL PANIC ...` (QEMU exits non-zero).
#![no_std]
#![no_main]

mod arch;
mod console;
mod fdt;
mod mm;
mod platform;
mod work;

use core::fmt;
use core::mem::ManuallyDrop;
use core::sync::atomic::{AtomicUsize, Ordering};

use pcp::PcpStat;

use crate::arch::{MAX_HARTS, MTIME_HZ};
use crate::mm::{BUDDY, KMALLOC, OBJ_CACHE, PAGE, PCPS, SHEAF_CACHE};
use crate::platform::this_hart;
use crate::work::{stat, stat_sum, Rng, H};

/// Task rounds per hart (override at build time: `KERNEL_ROUNDS=N`).
const ROUNDS: usize = match option_env!("KERNEL_ROUNDS") {
    Some(s) => parse_usize(s),
    None => 800,
};

const fn parse_usize(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "KERNEL_ROUNDS: digits only");
        v = v * 10 + (b[i] - b'0') as usize;
        i += 1;
    }
    v
}

/// Timer period: 1 ms of `mtime` (10 MHz), jittered by up to ±0.2 ms.
const TICK: u64 = MTIME_HZ / 1000;

/// Harts taking part (from the device tree, at most MAX_HARTS).
static N_HARTS: AtomicUsize = AtomicUsize::new(1);
/// `mtime` when the self-test started.
static T_START: AtomicUsize = AtomicUsize::new(0);

fn fail(args: fmt::Arguments<'_>) -> ! {
    console::print_panic(format_args!("KERNEL FAIL: {args}\n"));
    arch::poweroff_fail(2)
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            fail(format_args!($($arg)*))
        }
    };
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let ctx = if this_hart().in_irq.load(Ordering::Relaxed) {
        " (in the timer interrupt)"
    } else {
        ""
    };
    console::print_panic(format_args!(
        "KERNEL PANIC on hart {}{ctx}: {info}\n",
        arch::hart_id()
    ));
    arch::poweroff_fail(1)
}

/// A sense-counting barrier over the participating harts (interrupts keep
/// running while a hart waits).
fn barrier() {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static GEN: AtomicUsize = AtomicUsize::new(0);
    let n = N_HARTS.load(Ordering::Relaxed);
    let g = GEN.load(Ordering::Acquire);
    if COUNT.fetch_add(1, Ordering::AcqRel) + 1 == n {
        COUNT.store(0, Ordering::Relaxed);
        GEN.store(g + 1, Ordering::Release);
    } else {
        while GEN.load(Ordering::Acquire) == g {
            core::hint::spin_loop();
        }
    }
}

/// Prints the NUMA layout the device tree gave (`NUMA nodes: N`, then each
/// node's harts and RAM, and the distance table), or that there is none.
fn report_numa(info: &fdt::BootInfo, harts: usize) {
    let t = &info.topology;
    if !info.numa {
        kprintln!("  NUMA: none in the device tree (one node)");
        return;
    }
    kprintln!("NUMA nodes: {}", t.nr_nodes());
    for n in 0..t.nr_nodes() {
        let mut cpus = [0usize; arch::MAX_HARTS];
        let mut k = 0;
        for h in 0..harts {
            if t.cpu_to_node(h) == n {
                cpus[k] = h;
                k += 1;
            }
        }
        let ram: usize = info
            .ram()
            .iter()
            .filter(|r| r.node == n)
            .map(|r| r.size)
            .sum();
        kprintln!("  node {n}: harts {:?}, RAM {} MiB", &cpus[..k], ram >> 20);
        for r in info.ram().iter().filter(|r| r.node == n) {
            kprintln!("    [{:#x}, {:#x})", r.base, r.base + r.size);
        }
    }
    for a in 0..t.nr_nodes() {
        let mut row = [0u8; local_lock::topology::MAX_NUMNODES];
        for (b, d) in row.iter_mut().enumerate().take(t.nr_nodes()) {
            *d = t.node_distance(a, b);
        }
        kprintln!("  distances from node {a}: {:?}", &row[..t.nr_nodes()]);
    }
}

/// Hart 0's entry: memory, allocators, then the self-test.
#[no_mangle]
extern "C" fn boot_main(hart: usize, fdt: usize) -> ! {
    kprintln!("mm-rs kernel-riscv: hart {hart} booting (M-mode, QEMU virt, no firmware)");
    // SAFETY: QEMU passed the tree's address in a1; it is never handed out.
    let info = unsafe { fdt::parse(fdt) }
        .unwrap_or_else(|| fail(format_args!("no device tree at a1 = {fdt:#x}")));
    let harts = info.cpus.clamp(1, MAX_HARTS);
    if info.cpus > MAX_HARTS {
        kprintln!(
            "  {} harts in the device tree: using {MAX_HARTS}, the others park",
            info.cpus
        );
    }
    N_HARTS.store(harts, Ordering::Relaxed);

    let (ks, ke) = arch::kernel_image();
    let fdt_lo = fdt & !(PAGE - 1);
    let fdt_hi = (fdt + info.fdt_size + PAGE - 1) & !(PAGE - 1);
    let Some(first) = info
        .ram()
        .iter()
        .find(|r| ke > r.base && ke < r.base + r.size)
    else {
        fail(format_args!(
            "kernel image end {ke:#x} outside every RAM range"
        ))
    };
    ensure!(
        ks >= first.base,
        "kernel image start {ks:#x} below its RAM range {:#x}",
        first.base
    );
    // Every RAM range, less what the image (from its range's base) and the
    // device tree occupy.
    // SAFETY: RAM after the image and around the device tree: unused, and
    // zero (QEMU's RAM is zero-filled and nothing but the image and the
    // tree was written before us; see mm.rs).
    let pages: usize = info
        .ram()
        .iter()
        .map(|r| unsafe {
            // A node beyond the buddy's MAX_NUMNODES: its RAM joins node 0.
            let nid = if r.node < buddy::MAX_NUMNODES {
                r.node
            } else {
                0
            };
            mm::add_ram_except(
                nid,
                r.base,
                r.base + r.size,
                [(first.base, ke), (fdt_lo, fdt_hi)],
            )
        })
        .sum();
    let initial = BUDDY.total_free_pages();
    mm::INITIAL_FREE.store(initial, Ordering::Relaxed);
    let total: usize = info.ram().iter().map(|r| r.size).sum();
    kprintln!(
        "  {harts} harts; RAM {} MiB in {} range(s); image [{ks:#x}, {ke:#x}) {} KiB; \
         device tree [{fdt_lo:#x}, {fdt_hi:#x})",
        total >> 20,
        info.nr_memory,
        (ke - ks) >> 10
    );
    if info.dropped_memory > 0 {
        kprintln!(
            "  {} more RAM ranges in the device tree: ignored (at most {})",
            info.dropped_memory,
            fdt::MAX_RANGES
        );
    }
    platform::set_topology(&info.topology, harts);
    for (h, c) in info.clint.iter().enumerate().take(harts) {
        match c {
            Some((base, index)) => arch::set_clint(h, *base, *index),
            None => fail(format_args!("hart {h}: no CLINT in the device tree")),
        }
    }
    report_numa(&info, harts);
    kprintln!(
        "  buddy: {pages} pages added as zeroed; {} node(s); zones:",
        BUDDY.nr_node_ids()
    );
    for z in 0..BUDDY.nr_zone_ids() {
        let id = buddy::ZoneId::new(z);
        let wm = BUDDY.watermarks(id);
        kprintln!(
            "    node {} {:<6} managed {:>6} pages, free {:>6}, watermarks min {} low {} high {}",
            BUDDY.zone_node(id),
            BUDDY.config().zones()[BUDDY.zone_type(id).index()].name,
            BUDDY.managed_pages(id),
            BUDDY.nr_free_pages(id),
            wm.min,
            wm.low,
            wm.high
        );
    }

    work::zone_fallback_test();
    BUDDY.check_invariants();
    ensure!(
        BUDDY.total_free_pages() == initial,
        "zone test: {} free pages after giving everything back, {initial} before",
        BUDDY.total_free_pages()
    );
    work::numa_test();
    BUDDY.check_invariants();
    ensure!(
        BUDDY.total_free_pages() == initial,
        "numa test: {} free pages after giving everything back, {initial} before",
        BUDDY.total_free_pages()
    );

    let lockless = KMALLOC.caches()[0].lockless();
    kprintln!(
        "  slub fast path: {} (double-word CAS lock-free: {})",
        if lockless {
            "lockless (freelist, tid) cmpxchg"
        } else {
            "locked, under local_lock_irqsave: riscv64gc has no lock-free 128-bit CAS (no Zacas)"
        },
        local_lock::sync::dwcas_is_lock_free()
    );

    let a = mm::percpu();
    let counters = match (mm::KCounter::new(a), mm::KCounter::new(a)) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => fail(format_args!("percpu counters: {e:?}")),
    };
    // SAFETY: the other harts have not started.
    unsafe { *mm::COUNTERS.get_mut() = Some(counters) };

    kprintln!("  self-test: {ROUNDS} rounds per hart, timer interrupt every ~1 ms on every hart");
    T_START.store(arch::mtime() as usize, Ordering::Relaxed);
    arch::wake_harts(harts);
    run(hart, harts)
}

/// The other harts' entry.
#[no_mangle]
extern "C" fn secondary_main(hart: usize) -> ! {
    arch::clear_msip();
    let harts = N_HARTS.load(Ordering::Relaxed);
    if hart >= harts {
        loop {
            arch::wfi();
        }
    }
    run(hart, harts)
}

/// The trap handler (called from `trap_entry` with interrupts masked).
#[no_mangle]
extern "C" fn trap_handler() {
    let (cause, epc, tval) = arch::trap_cause();
    if cause != arch::MCAUSE_MTIMER {
        panic!("unexpected trap: mcause {cause:#x} mepc {epc:#x} mtval {tval:#x}");
    }
    let me = arch::hart_id();
    let hs = this_hart();
    assert!(!hs.in_irq.load(Ordering::Relaxed), "nested timer interrupt");
    let pc = hs.preempt_count.load(Ordering::Relaxed);
    hs.in_irq.store(true, Ordering::Relaxed);
    let t0 = arch::mtime();
    work::timer_tick(me, N_HARTS.load(Ordering::Relaxed));
    work::count(H::IRQ_US, (arch::mtime() - t0) * 1_000_000 / MTIME_HZ);
    hs.in_irq.store(false, Ordering::Relaxed);
    assert_eq!(
        hs.preempt_count.load(Ordering::Relaxed),
        pc,
        "preempt count changed across the timer handler"
    );
    // Armed after the work, so a slow handler never starves the task.
    let jitter = (arch::mtime() % (TICK * 2 / 5)) as i64 - (TICK / 5) as i64;
    arch::timer_arm((TICK as i64 + jitter) as u64);
}

/// The self-test on one hart, then the end-of-run protocol.
fn run(me: usize, harts: usize) -> ! {
    barrier();
    let mut rng = Rng::new(0x5eed ^ (me as u64) << 20);
    arch::timer_start(TICK + (me as u64) * 97);
    // SAFETY: boot left interrupts masked; the task's base state is "enabled".
    unsafe { arch::irq_enable() };

    for _ in 0..ROUNDS {
        work::task_round(&mut rng, me, harts);
    }

    // No interrupts from here on, on any hart (after the barrier).
    arch::irq_disable();
    arch::timer_stop();
    let t = (arch::mtime() as usize - T_START.load(Ordering::Relaxed)) as u64;
    kprintln!(
        "hart {me}: {} rounds in {} ms, {} timer interrupts",
        stat(me, H::ROUNDS),
        t * 1000 / MTIME_HZ,
        stat(me, H::IRQ_TICKS)
    );
    barrier();
    // Objects other harts (or their interrupts) mailed here.
    work::drain_mailbox(me);
    barrier();
    // flush_cpu_slab on every CPU (a pinned kernel cannot flush another
    // CPU's slabs: each hart flushes its own, as an IPI would).
    KMALLOC.flush_local();
    OBJ_CACHE.get().flush_local();
    SHEAF_CACHE.get().flush_local();
    barrier();
    if me == 0 {
        KMALLOC.shrink();
        OBJ_CACHE.get().shrink();
        // (This kernel found that `shrink` once flushed the CPUs before the
        // barn, leaving slabs on a CPU partial list; fixed in slub, with a
        // host test in `sheaf_cycle`.)
        SHEAF_CACHE.get().shrink();
    }
    barrier();
    // drain_local_pages on every CPU, then check this CPU's lists.
    for (name, pcp) in PCPS.iter() {
        pcp.drain_local();
        pcp.check_local();
        ensure!(
            pcp.cpu_count(me) == 0,
            "pcp {name}: hart {me} still lists {} pages after drain_local",
            pcp.cpu_count(me)
        );
    }
    let hs = this_hart();
    ensure!(
        hs.preempt_count.load(Ordering::Relaxed) == 0 && !hs.in_irq.load(Ordering::Relaxed),
        "hart {me}: preempt count {} / in_irq {} at the end",
        hs.preempt_count.load(Ordering::Relaxed),
        hs.in_irq.load(Ordering::Relaxed)
    );
    barrier();
    if me != 0 {
        loop {
            arch::wfi();
        }
    }
    end_of_run(harts)
}

/// Hart 0, everyone else parked with timers off: checks and reports.
fn end_of_run(harts: usize) -> ! {
    kprintln!();
    kprintln!("== end of run: {harts} harts, all CPUs drained and flushed ==");

    // --- SLUB: every slab back, the dedicated cache validated.
    for c in KMALLOC.caches() {
        let i = c.slabinfo();
        ensure!(
            c.nr_slabs() == 0,
            "slub {}: {} slabs ({} objects) left after flush + shrink: leak\n{}\n{}",
            c.name(),
            c.nr_slabs(),
            i.active_objs,
            slub::SlabInfo::HEADER,
            i
        );
    }
    for cell in [&OBJ_CACHE, &SHEAF_CACHE] {
        // SAFETY: every other hart is parked, timers are off.
        let c = unsafe { cell.get_mut() };
        c.validate_exclusive();
        ensure!(
            c.nr_slabs() == 0,
            "slub {}: {} slabs left after flush + shrink: leak\n{}\n{}\nbarn (full, empty) sheaves: {:?}\n{}",
            c.name(),
            c.nr_slabs(),
            slub::SlabInfo::HEADER,
            c.slabinfo(),
            c.barn_sheaves(),
            c.stats()
        );
    }

    // --- percpu: counters exact, nothing allocated, invariants, then the
    // allocator is dropped (its chunks go back to the buddy).
    // SAFETY: as above.
    let (mut tc, mut ic) = unsafe { mm::COUNTERS.get_mut() }.take().expect("counters");
    let task_sum = tc.sum_exact();
    let irq_sum = ic.sum_exact();
    let want_task = (harts * ROUNDS) as i64 * work::COUNTER_PER_ROUND;
    let ticks = stat_sum(H::IRQ_TICKS);
    kprintln!(
        "percpu counters: task sum {task_sum} (expected {want_task}), interrupt sum {irq_sum} \
         (expected {ticks}); per hart:{}",
        PerHart(
            |h, f| write!(f, " {}+{}", tc.cpu_value(h), ic.cpu_value(h)),
            harts
        )
    );
    ensure!(
        task_sum == want_task,
        "percpu task counter sum {task_sum} != {want_task}"
    );
    ensure!(
        irq_sum == ticks as i64,
        "percpu interrupt counter sum {irq_sum} != {ticks} ticks"
    );
    drop(tc);
    drop(ic);
    let pa = mm::percpu();
    pa.check_invariants();
    let ps = pa.stats();
    ensure!(
        ps.nr_cur_alloc == 0,
        "percpu: {} areas still allocated",
        ps.nr_cur_alloc
    );
    pa.balance();
    kprintln!("{}", pa.stats());
    // SAFETY: nothing uses the percpu allocator any more (counters dropped,
    // other harts parked).
    unsafe { ManuallyDrop::drop(mm::PERCPU.get_mut()) };

    // --- pcp: all lists empty (each hart drained and checked its own).
    for (name, pcp) in PCPS.iter() {
        ensure!(
            pcp.total_count() == 0,
            "pcp {name}: {} pages on lists",
            pcp.total_count()
        );
    }

    // --- buddy: invariants, and every page is back.
    BUDDY.check_invariants();
    let free = BUDDY.total_free_pages();
    let initial = mm::INITIAL_FREE.load(Ordering::Relaxed);
    ensure!(
        free == initial,
        "buddy: {free} free pages at the end, {initial} after boot: {} pages leaked",
        initial as isize - free as isize
    );

    // --- the workload really ran where it should.
    let irq_pages = stat_sum(H::IRQ_PAGES);
    let irq_objs = stat_sum(H::IRQ_OBJS);
    let irq_pcpu = stat_sum(H::IRQ_PCPU);
    for h in 0..harts {
        ensure!(
            stat(h, H::IRQ_TICKS) > 0,
            "hart {h} took no timer interrupt"
        );
        ensure!(
            stat(h, H::IRQ_PAGES) > 0,
            "hart {h} allocated no page in interrupt context"
        );
        ensure!(
            stat(h, H::ROUNDS) == ROUNDS as u64,
            "hart {h} did not finish its rounds"
        );
    }
    if harts > 1 {
        ensure!(
            stat_sum(H::REMOTE_FREES) > 0,
            "no object was freed on another hart"
        );
    }
    // Linux 6.7+'s auto-tuned high (issue #22): bursts raised it, and with
    // more than one hart other harts decayed and drained the lists it
    // bounds.
    ensure!(
        stat_sum(H::RAISED_HIGHS) > 0,
        "trylock pcp: no burst of frees raised a hart's high above high_min"
    );
    if harts > 1 {
        ensure!(
            stat_sum(H::REMOTE_DRAINS) > 0,
            "trylock pcp: no hart decayed or drained another's lists"
        );
    }
    let zero_hits: u64 = PCPS
        .iter()
        .map(|(_, p)| p.stats().get(PcpStat::ALLOC_ZERO_HIT))
        .sum::<u64>()
        + BUDDY.stat(buddy::Stat::ZEROED_NO_CLEAR);
    ensure!(
        zero_hits > 0,
        "no zeroed request was served from known-zero pages"
    );
    let bypass = mm::PCP_TASKONLY.stats().get(PcpStat::BUDDY_FALLBACK);
    ensure!(
        bypass > 0,
        "task-only pcp: no interrupt-context request bypassed to the buddy"
    );

    // --- reports.
    kprintln!();
    kprintln!("== self-test per hart ==");
    kprintln!(
        "{:<16}{}",
        "hart",
        PerHart(|h, f| write!(f, "{h:>10}"), harts)
    );
    for &s in H::ALL {
        kprintln!(
            "{:<16}{}  total {}",
            s.name(),
            PerHart(|h, f| write!(f, "{:>10}", stat(h, s)), harts),
            stat_sum(s)
        );
    }
    kprintln!(
        "interrupt-context allocations served: {} pages + {} objects + {} percpu areas = {} \
         (in {} timer interrupts; {} ATOMIC requests found no memory)",
        irq_pages,
        irq_objs,
        irq_pcpu,
        irq_pages + irq_objs + irq_pcpu,
        ticks,
        stat_sum(H::IRQ_FAILS)
    );
    kprintln!(
        "page allocation failures reported (warn_alloc: requests without NOWARN): {}",
        platform::ALLOC_WARNINGS.load(core::sync::atomic::Ordering::Relaxed)
    );
    kprintln!();
    kprintln!("== buddyinfo ==");
    kprintln!("{}", BUDDY);
    kprintln!("== zoneinfo ==");
    kprintln!("{}", BUDDY.zoneinfo());
    kprintln!("== pcp ==");
    for (name, pcp) in PCPS.iter() {
        kprintln!("-- {name} --");
        kprintln!("{}", pcp.report());
    }
    kprintln!(
        "== slabinfo ({}) ==",
        if KMALLOC.caches()[0].lockless() {
            "lockless fast path"
        } else {
            "locked fast path: no lock-free 128-bit CAS on riscv64gc"
        }
    );
    kprintln!("{}", KMALLOC.report());
    for c in [OBJ_CACHE.get(), SHEAF_CACHE.get()] {
        kprintln!("{}", slub::SlabInfo::HEADER);
        kprintln!("{}", c.slabinfo());
        kprintln!("{}", c.stats());
    }
    let t = (arch::mtime() as usize - T_START.load(Ordering::Relaxed)) as u64;
    kprintln!();
    kprintln!(
        "checks passed: no leak ({free} pages free before and after), buddy/pcp/slub/percpu \
         invariants, counters exact; {} ms",
        t * 1000 / MTIME_HZ
    );
    kprintln!("KERNEL PASS");
    arch::poweroff_pass()
}

/// Formats one column per hart.
struct PerHart<F: Fn(usize, &mut fmt::Formatter<'_>) -> fmt::Result>(F, usize);

impl<F: Fn(usize, &mut fmt::Formatter<'_>) -> fmt::Result> fmt::Display for PerHart<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for h in 0..self.1 {
            (self.0)(h, f)?;
        }
        Ok(())
    }
}
