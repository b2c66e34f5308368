//! Restartable sequences (Linux `rseq`): the `this_cpu` sheaf operations
//! of [`this_cpu`](crate::this_cpu) in user space, x86_64.
//!
//! glibc 2.35+ registers a `struct rseq` area for every thread it creates
//! (at `thread pointer + __rseq_offset`); the kernel keeps its `cpu_id`
//! and, since Linux 6.3, its `mm_cid` current. The sections index their
//! records by `mm_cid`, the thread's *concurrency id*: unique among the
//! process's threads running at the same time and below both their
//! number and the CPU count, and changed only when the thread is
//! scheduled (which restarts a section anyway). This is tcmalloc's
//! "virtual CPU id": a process of one thread always uses record 0,
//! whichever CPU it runs on (it kept two CPUs' caches warm when it
//! migrated, and a `fork`ed child running on the other CPU started on
//! that CPU's records, empty, and refilled them: page faults), and
//! threads fewer than the CPUs use as many records as there are threads.
//! Kernels without `mm_cid` (`AT_RSEQ_FEATURE_SIZE` below 28) get no
//! restartable sections: [`available`] is false and callers take their
//! locked per-CPU paths. A critical section is described by a `struct rseq_cs`
//! (start, length, abort address) stored into the area's `rseq_cs` field
//! before the section runs; if the thread is preempted, migrated or takes
//! a signal while its instruction pointer is inside the section, the
//! kernel moves it to the abort address, which restarts the section from
//! the beginning. The section's last instruction is its commit (one
//! store, or one `lock cmpxchg` for the exchanges a remote drain may race
//! with). Everything before it only reads, or writes words nobody else
//! reads until the commit (a sheaf entry beyond its size).
//!
//! The abort handler is preceded by the signature glibc registered
//! (`RSEQ_SIG`, 0x53053053 on x86, encoded as the displacement of a `ud1`
//! so it disassembles cleanly), in section `__rseq_failure`; descriptors
//! live in `__rseq_cs`, as in librseq and tcmalloc.
//!
//! [`available`] says whether the running process has rseq: glibc's
//! `__rseq_offset`/`__rseq_size` (looked up with `dlsym`, so older glibc
//! versions link and simply lack rseq) and a registered area on the
//! calling thread, and a kernel that keeps `mm_cid`. Every thread glibc
//! creates in such a process is registered too (the same system call in
//! the same process; glibc turns rseq on or off for all of its threads):
//! an unregistered thread would read a concurrency id of 0 (glibc's
//! initial value; the CPU id `u32::MAX - 1` or `u32::MAX` that the
//! decision checks is not what the sections read) and share slot 0
//! unprotected. Threads made without glibc (a raw `clone`) and the child
//! of a `vfork` (which the kernel leaves unregistered, on its parent's
//! area) must not allocate, as they must not call glibc's `malloc`.
//!
//! Remote drains ([`remote_xchg`]) exchange the word atomically (for the
//! main sheaf: clear the record's `limit`) and then fence the process with
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)`, which restarts any
//! section running on a CPU: afterwards no section can still use the old
//! value, and the main sheaf's `count`, which a pop or push commits, is
//! final. The local exchanges commit with `lock cmpxchg`, so a remote
//! exchange between their load and their commit makes them fail instead
//! of both sides owning the old sheaf.

use core::arch::asm;
use core::sync::atomic::{AtomicIsize, AtomicU8, AtomicUsize, Ordering};

use crate::this_cpu::{range_way, FreeCheck, FreePush, SheafSlots, SheafWord, RANGE_WAYS};

/// `struct rseq` offsets: `cpu_id`, `rseq_cs` and `mm_cid` (the slot
/// the sections use, [`ID`]).
const CPU_ID: usize = 4;
const RSEQ_CS: usize = 8;
const MM_CID: usize = 24;
/// The field the sections index their records by: the concurrency id.
const ID: usize = MM_CID;
/// `getauxval(AT_RSEQ_FEATURE_SIZE)` (Linux 6.3+): the size of the
/// `struct rseq` fields the kernel keeps, at least 28 with `mm_cid`.
const AT_RSEQ_FEATURE_SIZE: libc::c_ulong = 27;

// The record layout the sections address (`this_cpu::CpuSheaves`).
const _: () = {
    use crate::this_cpu::{CpuSheaves, VRange};
    assert!(core::mem::offset_of!(CpuSheaves, main) == 0);
    assert!(core::mem::offset_of!(CpuSheaves, count) == 8);
    assert!(core::mem::offset_of!(CpuSheaves, limit) == 16);
    assert!(core::mem::offset_of!(CpuSheaves, spare) == 24);
    assert!(core::mem::offset_of!(CpuSheaves, vgen) == 32);
    assert!(core::mem::offset_of!(CpuSheaves, ranges) == 40);
    assert!(core::mem::offset_of!(CpuSheaves, busy) == 104);
    assert!(core::mem::size_of::<VRange>() == 16);
    assert!(RANGE_WAYS == 4);
    assert!(core::mem::offset_of!(FreeCheck, shift) == 48);
};

const UNKNOWN: u8 = 0;
const INITIALIZING: u8 = 1;
const YES: u8 = 2;
const NO: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static OFFSET: AtomicIsize = AtomicIsize::new(0);
static FENCE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether this process runs with glibc-registered restartable sequences
/// (decided once, by the first caller; a call from another thread while
/// it decides waits for the decision, and only a call from the deciding
/// thread itself, e.g. an allocation inside `dlsym`, answers `false`
/// meanwhile).
///
/// ```
/// // On this project's machines (glibc 2.36, Linux 6.x) rseq is there.
/// if local_lock::rseq::available() {
///     assert!(local_lock::rseq::cpu_id() < 4096);
/// }
/// ```
#[inline(always)]
pub fn available() -> bool {
    match STATE.load(Ordering::Acquire) {
        YES => true,
        NO => false,
        _ => init(),
    }
}

/// How long a thread waits (giving its CPU away) while another decides
/// [`available`] before it answers `false` (see [`decide`]): the lookup
/// takes microseconds, this allows for its thread being preempted.
const DECIDE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The thread pointer of the thread deciding [`available`] (0: none yet).
static DECIDER: AtomicUsize = AtomicUsize::new(0);

#[cold]
#[inline(never)]
fn init() -> bool {
    decide(&STATE, &DECIDER, thread_word(), lookup)
}

/// The decision of [`available`] on `state`: the first caller runs
/// `lookup` (recording itself, `me`, in `decider`) and publishes the
/// answer; a caller arriving meanwhile waits for it, unless it is the
/// deciding thread itself (a reentrant call from inside `lookup`), which
/// answers `false`. Callers must not answer `false` for the wait: a slab
/// cache decides its fast path (restartable or locked) once, at its first
/// use, so threads starting together would otherwise leave a cache on its
/// locked path for good. The wait is bounded ([`DECIDE_WAIT`]): a
/// decider that cannot finish (its lookup waiting for a lock the caller
/// holds) gets the old answer, `false`, rather than a deadlock.
fn decide(
    state: &AtomicU8,
    decider: &AtomicUsize,
    me: usize,
    lookup: impl FnOnce() -> bool,
) -> bool {
    match state.compare_exchange(UNKNOWN, INITIALIZING, Ordering::Acquire, Ordering::Acquire) {
        Ok(_) => {
            decider.store(me, Ordering::Release);
            let ok = lookup();
            state.store(if ok { YES } else { NO }, Ordering::Release);
            ok
        }
        Err(_) => {
            let start = std::time::Instant::now();
            while start.elapsed() < DECIDE_WAIT {
                match state.load(Ordering::Acquire) {
                    YES => return true,
                    NO => return false,
                    _ if decider.load(Ordering::Acquire) == me => return false,
                    // The lookup (two `dlsym` calls) takes microseconds;
                    // its thread may be preempted: give the CPU away.
                    _ => yield_cpu(),
                }
            }
            // The decider is blocked (e.g. `dlsym` waiting for the loader
            // lock this thread holds inside `dlopen`, allocating): answer
            // as before the decision rather than wait for good.
            state.load(Ordering::Acquire) == YES
        }
    }
}

/// This thread's pointer (its `fs` base), which names it.
#[cfg(not(miri))]
fn thread_word() -> usize {
    let tp: usize;
    // SAFETY: reads the first word of the thread control block, which
    // glibc's x86_64 TLS ABI points at itself.
    unsafe {
        asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// (Miri: `lookup` answers at once and never reenters.)
#[cfg(miri)]
fn thread_word() -> usize {
    1
}

fn yield_cpu() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

#[cfg(miri)]
fn lookup() -> bool {
    false
}

#[cfg(not(miri))]
fn lookup() -> bool {
    if std::env::var_os("MM_NO_RSEQ").is_some() {
        return false;
    }
    // SAFETY: dlsym with a NUL-terminated name; the results are checked.
    let (off, size) = unsafe {
        let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        if o.is_null() || s.is_null() {
            return false;
        }
        (*(o as *const isize), *(s as *const u32))
    };
    // The original ABI's 32 bytes (glibc reports 20: the fields in use).
    if size < 20 || off == 0 {
        return false;
    }
    // The kernel must keep `mm_cid` (it writes the original 32 bytes'
    // fields whatever size glibc reports).
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(AT_RSEQ_FEATURE_SIZE) } < (MM_CID + 4) as libc::c_ulong {
        return false;
    }
    OFFSET.store(off, Ordering::Relaxed);
    // The calling thread must be registered: its cpu_id is a real CPU
    // (glibc leaves -1 or -2 there otherwise).
    let c = read_field::<CPU_ID>(off);
    c < 1 << 20
}

/// Makes [`available`] true for a **single-threaded** process whose glibc
/// could not register rseq, by writing concurrency id 0 into the calling
/// thread's area: for counting the restartable paths' instructions under valgrind,
/// which does not implement the `rseq` system call (`ci/icount.sh`).
/// Returns whether it could (glibc 2.35+ with an area). Caches decide
/// their path at first use: call this before any cache is used.
///
/// # Safety
///
/// No other thread runs, now or later, in this process: without the
/// kernel no section is ever restarted, and every thread would use CPU
/// 0's records.
pub unsafe fn assume_cpu0_for_counting() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; the result is checked.
    let o = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) };
    if o.is_null() {
        return false;
    }
    // SAFETY: glibc's `__rseq_offset` variable.
    let off = unsafe { *(o as *const isize) };
    if off == 0 {
        return false;
    }
    // SAFETY: the thread's rseq area (glibc keeps it even when the
    // registration failed); nothing else writes it without the kernel.
    unsafe {
        asm!(
            "mov dword ptr fs:[{off} + {cpu}], 0",
            off = in(reg) off,
            cpu = const ID,
            options(nostack, preserves_flags)
        )
    };
    OFFSET.store(off, Ordering::Relaxed);
    STATE.store(YES, Ordering::Release);
    true
}

#[inline(always)]
fn read_field<const F: usize>(off: isize) -> u32 {
    let c: u32;
    // SAFETY: reads the thread's rseq area (thread pointer + __rseq_offset,
    // glibc's ABI), which lives as long as the thread.
    unsafe {
        asm!(
            "mov {c:e}, dword ptr fs:[{off} + {cpu}]",
            off = in(reg) off,
            cpu = const F,
            c = out(reg) c,
            options(nostack, readonly, preserves_flags)
        )
    };
    c
}

/// The offset of every thread's rseq area from its thread pointer
/// (glibc's `__rseq_offset`): what the sections' [`SheafSlots`] must
/// carry ([`SheafSlots::with_area`]). Only meaningful when [`available`].
#[inline(always)]
pub fn area() -> isize {
    #[cfg(not(miri))]
    {
        let v: isize;
        // SAFETY: a plain load of `OFFSET` (an `AtomicIsize`, laid out as
        // an `isize`: x86_64's relaxed atomic load). Addressed with a
        // `sym` operand, RIP-relative: a shared library (mm-malloc) read
        // it through the GOT before (a `static` of another crate may be
        // preemptible for the compiler; the link makes it local), two
        // loads and an instruction more in every `malloc` and `free`.
        unsafe {
            asm!(
                "mov {v}, qword ptr [rip + {o}]",
                o = sym OFFSET,
                v = out(reg) v,
                options(nostack, readonly, preserves_flags)
            )
        };
        v
    }
    #[cfg(miri)]
    OFFSET.load(Ordering::Relaxed)
}

/// The calling thread's slot, its concurrency id (`mm_cid`) from its
/// rseq area (one load): a hint, as `sched_getcpu()` is (it may change
/// when the thread is next scheduled). Below the number of CPUs and
/// below the number of the process's threads. Only meaningful when
/// [`available`].
#[inline(always)]
pub fn cpu_id() -> u32 {
    read_field::<ID>(OFFSET.load(Ordering::Relaxed))
}

/// A section's entry: its descriptor stored into the area's `rseq_cs`
/// (label 3), the start (label 4), the CPU id, a jump to `$fail` for a CPU
/// without a record, and `{c}` = the CPU's record
/// ([`SHEAF_RECORD_STRIDE`](crate::this_cpu::SHEAF_RECORD_STRIDE) apart).
// (the sections shift the CPU id by 9)
const _: () = assert!(crate::this_cpu::SHEAF_RECORD_STRIDE == 1 << 9);

macro_rules! rseq_enter {
    ($fail:literal) => {
        concat!(
            "lea {c}, [rip + 3f]\n",
            "mov qword ptr fs:[{off} + {rcs}], {c}\n",
            "4:\n",
            "mov {c:e}, dword ptr fs:[{off} + {cpu}]\n",
            "cmp {c}, {nr}\n",
            "jae ",
            $fail,
            "\n",
            "shl {c}, 9\n",
            "add {c}, {base}\n",
        )
    };
}

/// A main-sheaf section's entry (pop, push and the bulk ones): `{$zero}`
/// cleared (the failure's result), the descriptor stored (label 3), the
/// start (label 4), the CPU id (to 5 without a record), `{r}` = the CPU's
/// record's offset from `{base}` (addressed as `[{base} + {r}]`: no add
/// on the way to the loads) and `{t}` = its main sheaf's size (`count`;
/// whether there is a main sheaf is the `limit` compare that follows).
macro_rules! sheaf_enter {
    ($zero:ident) => {
        concat!(
            "2:\n",
            "xor {",
            stringify!($zero),
            ":e}, {",
            stringify!($zero),
            ":e}\n",
            "lea {t}, [rip + 3f]\n",
            "mov qword ptr fs:[{off} + {rcs}], {t}\n",
            "4:\n",
            "mov {r:e}, dword ptr fs:[{off} + {cpu}]\n",
            "cmp {r}, {nr}\n",
            "jae 5f\n",
            "shl {r}, 9\n",
            "mov {t}, qword ptr [{base} + {r} + 8]\n",
        )
    };
}

/// The section prologue/epilogue: descriptor in `__rseq_cs` (start 4,
/// post-commit 5, abort 6), the signature and the abort handler (back to
/// 2, the restart) in `__rseq_failure`.
macro_rules! rseq_tail {
    () => {
        concat!(
            ".pushsection __rseq_cs, \"aw\"\n",
            ".balign 32\n",
            "3:\n",
            ".long 0, 0\n",
            ".quad 4b, 5b - 4b, 6f\n",
            ".popsection\n",
            ".pushsection __rseq_failure, \"ax\"\n",
            ".byte 0x0f, 0xb9, 0x3d\n",
            ".long 0x53053053\n",
            "6:\n",
            "jmp 2b\n",
            ".popsection\n",
        )
    };
}

/// The section of [`pop`] and [`pop_private`]: `count - 1` below
/// `limit` (no main sheaf: `limit` 0), the entry read, `count - 1` stored
/// (the commit). The sheaf's address is loaded beside the two words (one
/// line), not before them: the entry's load waits for the CPU id and
/// `count` only.
macro_rules! pop_section {
    ($s:ident) => {
        main_section!(
            $s,
            v,
            [
                "sub {t}, 1",
                "cmp {t}, qword ptr [{base} + {r} + 16]",
                "jae 5f",
                "mov {sh}, qword ptr [{base} + {r}]",
                "mov {v}, qword ptr [{sh} + 8*{t} + 16]",
                "mov qword ptr [{base} + {r} + 8], {t}"
            ],
        )
    };
}

/// A main-sheaf section ([`sheaf_enter!`], `$body`, the tail) whose
/// result is register `{$res}` (0 when it leaves early): the pops' and
/// the bulk moves'. `$operands` are the body's own. Its commit is the
/// body's last store (the size, into the record); before it the body
/// writes only entries beyond the size or the caller's own memory.
macro_rules! main_section {
    ($s:ident, $res:ident, [$($body:literal),*], $($operands:tt)*) => {{
        debug_assert_eq!($s.stride(), crate::this_cpu::SHEAF_RECORD_STRIDE);
        debug_assert_eq!($s.area(), area(), "SheafSlots without the rseq area");
        let $res: usize;
        // SAFETY: the caller's contract (see above).
        unsafe {
            asm!(
                sheaf_enter!($res),
                $($body,)*
                "5:",
                rseq_tail!(),
                off = in(reg) $s.area(),
                base = in(reg) $s.base(),
                nr = const N,
                rcs = const RSEQ_CS,
                cpu = const ID,
                $res = out(reg) $res,
                t = out(reg) _,
                r = out(reg) _,
                sh = out(reg) _,
                $($operands)*
                options(nostack)
            )
        };
        $res
    }};
}

/// `this_cpu` pop (see [`Platform::this_cpu_sheaf_pop`](crate::Platform::this_cpu_sheaf_pop)).
///
/// # Safety
///
/// [`available`] returned true; `s` as [`SheafSlots::new`] requires, with a
/// stride of [`SHEAF_RECORD_STRIDE`](crate::this_cpu::SHEAF_RECORD_STRIDE)
/// bytes, and its [`area`](SheafSlots::area) is [`area`]`()`.
#[inline(always)]
pub unsafe fn pop<const N: usize>(s: SheafSlots<'_, N>) -> usize {
    pop_section!(s)
}

/// [`pop`] (see
/// [`Platform::this_cpu_sheaf_pop_private`](crate::Platform::this_cpu_sheaf_pop_private)):
/// the same section, since the main sheaf's size is kept in the record,
/// bounded by the `limit` beside it, not in the sheaf.
///
/// # Safety
///
/// As [`pop`], and every sheaf's size word is at most `s.cap()`.
#[inline(always)]
pub unsafe fn pop_private<const N: usize>(s: SheafSlots<'_, N>) -> usize {
    pop_section!(s)
}

/// `this_cpu` push (see [`Platform::this_cpu_sheaf_push`](crate::Platform::this_cpu_sheaf_push)).
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn push<const N: usize>(s: SheafSlots<'_, N>, val: usize) -> bool {
    debug_assert_eq!(s.area(), area(), "SheafSlots without the rseq area");
    // SAFETY: caller's contract; the entry beyond the size is invisible
    // until the commit (the size store). Every failure leaves the section
    // by a jump to the label block (`asm goto`): no status register.
    unsafe {
        asm!(
            "2:",
            "lea {t}, [rip + 3f]",
            "mov qword ptr fs:[{off} + {rcs}], {t}",
            "4:",
            "mov {c:e}, dword ptr fs:[{off} + {cpu}]",
            "cmp {c}, {nr}",
            "jae {fail}",
            "shl {c}, 9",
            // count below limit (no main sheaf: limit 0)
            "mov {t}, qword ptr [{base} + {c} + 8]",
            "cmp {t}, qword ptr [{base} + {c} + 16]",
            "jae {fail}",
            "mov {sh}, qword ptr [{base} + {c}]",
            "mov qword ptr [{sh} + 8*{t} + 16], {val}",
            "add {t}, 1",
            "mov qword ptr [{base} + {c} + 8], {t}",
            "5:",
            rseq_tail!(),
            off = in(reg) s.area(),
            base = in(reg) s.base(),
            nr = const N,
            val = in(reg) val,
            rcs = const RSEQ_CS,
            cpu = const ID,
            t = out(reg) _,
            c = out(reg) _,
            sh = out(reg) _,
            fail = label { return false },
            options(nostack)
        )
    };
    true
}

/// The section of [`pop_many`] and [`push_many`]: `$body` moves up to
/// `$len` entries between the sheaf at `{sh}` and the caller's array at
/// `{arr}` (the sheaf's size in `{t}`, `{k}` counting from 0) and ends
/// with the commit (the size store into the record at `{base} + {r}`, the section's
/// last instruction); `{k}` is the count moved, 0 for a CPU without a
/// record or a main sheaf.
macro_rules! many_section {
    ($s:ident, $arr:expr, $len:expr, [$($body:literal),*]) => {
        main_section!(
            $s,
            k,
            [$($body),*],
            arr = in(reg) $arr,
            len = in(reg) $len,
            c = out(reg) _,
            v = out(reg) _,
        )
    };
}

/// `this_cpu` pop of up to `out.len()` entries (see
/// [`Platform::this_cpu_sheaf_pop_many`](crate::Platform::this_cpu_sheaf_pop_many)):
/// one section copies them out, the last one first, and commits the new
/// size with its last store. A restart copies them again (into the
/// caller's own memory, from the new CPU's sheaf).
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn pop_many<const N: usize>(s: SheafSlots<'_, N>, out: &mut [usize]) -> usize {
    many_section!(
        s,
        out.as_mut_ptr(),
        out.len(),
        [
            // t = count, nothing above the limit (no main sheaf: limit 0,
            // count 0 or stale); c = min(t, len)
            "cmp {t}, qword ptr [{base} + {r} + 16]",
            "ja 5f",
            "mov {sh}, qword ptr [{base} + {r}]",
            "mov {c}, {t}",
            "cmp {c}, {len}",
            "cmova {c}, {len}",
            "test {c}, {c}",
            "jz 5f",
            "7:",
            "sub {t}, 1",
            "mov {v}, qword ptr [{sh} + 8*{t} + 16]",
            "mov qword ptr [{arr} + 8*{k}], {v}",
            "add {k}, 1",
            "cmp {k}, {c}",
            "jb 7b",
            "mov qword ptr [{base} + {r} + 8], {t}"
        ]
    )
}

/// `this_cpu` push of the entries of `src` (see
/// [`Platform::this_cpu_sheaf_push_many`](crate::Platform::this_cpu_sheaf_push_many)):
/// one section copies as many as fit beyond the sheaf's size and commits
/// the new size with its last store.
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn push_many<const N: usize>(s: SheafSlots<'_, N>, src: &[usize]) -> usize {
    many_section!(
        s,
        src.as_ptr(),
        src.len(),
        [
            // t = count; c = min(limit - t, len), nothing when full or
            // without a main sheaf (limit 0)
            "mov {c}, qword ptr [{base} + {r} + 16]",
            "sub {c}, {t}",
            "jbe 5f",
            "mov {sh}, qword ptr [{base} + {r}]",
            "cmp {c}, {len}",
            "cmova {c}, {len}",
            "test {c}, {c}",
            "jz 5f",
            "7:",
            "mov {v}, qword ptr [{arr} + 8*{k}]",
            "mov qword ptr [{sh} + 8*{t} + 16], {v}",
            "add {t}, 1",
            "add {k}, 1",
            "cmp {k}, {c}",
            "jb 7b",
            "mov qword ptr [{base} + {r} + 8], {t}"
        ]
    )
}

/// The section of [`free_push`], [`free_push_plain`] and
/// [`free_push_unmarked`]: `$mark` stores the free marker (or nothing),
/// `$entry` names the register holding the sheaf entry (`rax` after
/// `$encode`, which XORs the marker with the object; or `{obj}` itself,
/// with no encoding), `$top` refuses an entry equal to the sheaf's top
/// one (jumping to the `marked` label the last tokens give), or nothing.
macro_rules! free_push_section {
    // A hardened free: the marker stored, the top entry compared.
    (marked $s:ident, $chk:ident, $obj:ident, [$($encode:literal),*], $entry:literal) => {
        free_push_section!(
            $s,
            $chk,
            $obj,
            [
                // the marker, stored blind; from here a failure is Full
                "mov rax, qword ptr [{k} + 16]",
                "mov qword ptr [{obj}], rax"
            ],
            [$($encode),*],
            $entry,
            [
                // the sheaf's top entry already is this object: a double
                // free (at an empty sheaf this reads the link word, never
                // an entry)
                concat!("cmp qword ptr [{sh} + 8*{t} + 8], ", $entry),
                "je {marked}"
            ],
            { marked = label { return FreePush::Marked }, }
        )
    };
    ($s:ident, $chk:ident, $obj:ident, [$($mark:literal),*], [$($encode:literal),*],
     $entry:literal, [$($top:expr),*], {$($extra:tt)*}) => {{
        debug_assert_eq!($s.area(), area(), "SheafSlots without the rseq area");
        let e = range_way($obj, $chk.shift.load(Ordering::Relaxed) as u32) * 16;
        // SAFETY: caller's contract. Before the commit the section only
        // writes the object (validated: the caller's) and a sheaf entry
        // beyond the size.
        unsafe {
            asm!(
                "2:",
                "lea {t}, [rip + 3f]",
                "mov qword ptr fs:[{off} + {rcs}], {t}",
                "4:",
                "mov {c:e}, dword ptr fs:[{off} + {cpu}]",
                "cmp {c}, qword ptr [{k} + 32]",
                "jae {miss}",
                "shl {c}, 9",
                "add {c}, {base}",
                // off = obj - base < span in the address's way, vgen == gen
                "mov {t}, {obj}",
                "sub {t}, qword ptr [{c} + {e} + 40]",
                "cmp {t}, qword ptr [{c} + {e} + 48]",
                "jae {miss}",
                "mov rax, qword ptr [{c} + 32]",
                "cmp rax, qword ptr [{k} + 24]",
                "jne {miss}",
                // an object boundary: ((off * recip) >> 64) * size == off
                "mov rax, {t}",
                "mul qword ptr [{k}]",
                "imul rdx, qword ptr [{k} + 8]",
                "cmp rdx, {t}",
                "jne {miss}",
                $($mark,)*
                // count below limit (no main sheaf: limit 0)
                "mov {t}, qword ptr [{c} + 8]",
                "cmp {t}, qword ptr [{c} + 16]",
                "jae {full}",
                "mov {sh}, qword ptr [{c}]",
                $($encode,)*
                $($top,)*
                concat!("mov qword ptr [{sh} + 8*{t} + 16], ", $entry),
                "add {t}, 1",
                "mov qword ptr [{c} + 8], {t}",
                "5:",
                rseq_tail!(),
                off = in(reg) $s.area(),
                base = in(reg) $s.base(),
                k = in(reg) $chk as *const FreeCheck,
                obj = in(reg) $obj,
                e = in(reg) e,
                rcs = const RSEQ_CS,
                cpu = const ID,
                t = out(reg) _,
                c = out(reg) _,
                sh = out(reg) _,
                out("rax") _,
                out("rdx") _,
                miss = label { return FreePush::Miss },
                full = label { return FreePush::Full },
                $($extra)*
                options(nostack)
            )
        };
        FreePush::Pushed
    }};
}

/// A hardened free's validation, marking and push as one section (see
/// [`Platform::this_cpu_free_push`](crate::Platform::this_cpu_free_push)):
/// the entry pushed is `obj ^ key`.
///
/// The marker is stored without reading the object first (a store the
/// CPU buffers: a free never waits for the object's line), so a restart
/// simply stores it again; a restart that then misses the new CPU's
/// ranges returns [`FreePush::Miss`] for a marked object, which the
/// caller's slow path must accept (it does not take the marker for a
/// double free). Every outcome but success leaves the section by a jump
/// to its label block (`asm goto`): no status register, no decoding.
///
/// # Safety
///
/// As [`pop`]; `chk` describes the records of `s` (its `nr` and `cap`
/// are the ones used); object words inside a recorded range are mapped.
#[inline(always)]
pub unsafe fn free_push<const N: usize>(
    s: SheafSlots<'_, N>,
    chk: &FreeCheck,
    obj: usize,
) -> FreePush {
    free_push_section!(marked s, chk, obj, ["xor rax, {obj}"], "rax")
}

/// [`free_push`] pushing `obj` itself: sheaves in memory no user can
/// reach ([`Platform::this_cpu_free_push_plain`](crate::Platform::this_cpu_free_push_plain)).
///
/// # Safety
///
/// As [`free_push`].
#[inline(always)]
pub unsafe fn free_push_plain<const N: usize>(
    s: SheafSlots<'_, N>,
    chk: &FreeCheck,
    obj: usize,
) -> FreePush {
    free_push_section!(marked s, chk, obj, [], "{obj}")
}

/// An unhardened free's validation and push as one section (see
/// [`Platform::this_cpu_free_push_unmarked`](crate::Platform::this_cpu_free_push_unmarked)):
/// [`free_push_plain`] without the marker and the top-entry check (never
/// [`FreePush::Marked`]).
///
/// # Safety
///
/// As [`free_push`].
#[inline(always)]
pub unsafe fn free_push_unmarked<const N: usize>(
    s: SheafSlots<'_, N>,
    chk: &FreeCheck,
    obj: usize,
) -> FreePush {
    free_push_section!(s, chk, obj, [], [], "{obj}", [], {})
}

/// Way `way` of the running CPU's validated ranges, one snapshot (see
/// [`Platform::this_cpu_range`](crate::Platform::this_cpu_range)); a CPU
/// without a record reads an empty range.
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn range<const N: usize>(s: SheafSlots<'_, N>, way: usize) -> (usize, usize, usize) {
    debug_assert_eq!(s.area(), area(), "SheafSlots without the rseq area");
    let (b, sp, g): (usize, usize, usize);
    // SAFETY: caller's contract; reads only.
    unsafe {
        asm!(
            "2:",
            "xor {sp:e}, {sp:e}",
            rseq_enter!("5f"),
            "mov {b}, qword ptr [{c} + {e} + 40]",
            "mov {g}, qword ptr [{c} + 32]",
            "mov {sp}, qword ptr [{c} + {e} + 48]",
            "5:",
            rseq_tail!(),
            off = in(reg) s.area(),
            base = in(reg) s.base(),
            nr = const N,
            e = in(reg) (way % RANGE_WAYS) * 16,
            rcs = const RSEQ_CS,
            cpu = const ID,
            b = out(reg) b,
            sp = out(reg) sp,
            g = out(reg) g,
            c = out(reg) _,
            options(nostack)
        )
    };
    (b, sp, g)
}

/// Records a validated range as way `way` on the running CPU (see
/// [`Platform::this_cpu_set_range`](crate::Platform::this_cpu_set_range)
/// and [`set_range_in`](crate::this_cpu::set_range_in), whose store order
/// this follows).
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn set_range<const N: usize>(
    s: SheafSlots<'_, N>,
    way: usize,
    vbase: usize,
    vspan: usize,
    vgen: usize,
) -> bool {
    debug_assert_eq!(s.area(), area(), "SheafSlots without the rseq area");
    let ok: usize;
    // SAFETY: caller's contract; the way's span is zeroed first (and every
    // way's before a new discard count) and stored last (the commit), so
    // an aborted section leaves only true ranges valid.
    unsafe {
        asm!(
            "2:",
            "xor {ok:e}, {ok:e}",
            rseq_enter!("5f"),
            "mov qword ptr [{c} + {e} + 48], 0",
            "cmp qword ptr [{c} + 32], {g}",
            "je 7f",
            "mov qword ptr [{c} + 48], 0",
            "mov qword ptr [{c} + 64], 0",
            "mov qword ptr [{c} + 80], 0",
            "mov qword ptr [{c} + 96], 0",
            "mov qword ptr [{c} + 32], {g}",
            "7:",
            "mov qword ptr [{c} + {e} + 40], {b}",
            "mov {ok:e}, 1",
            "mov qword ptr [{c} + {e} + 48], {sp}",
            "5:",
            rseq_tail!(),
            off = in(reg) s.area(),
            base = in(reg) s.base(),
            nr = const N,
            e = in(reg) (way % RANGE_WAYS) * 16,
            b = in(reg) vbase,
            sp = in(reg) vspan,
            g = in(reg) vgen,
            rcs = const RSEQ_CS,
            cpu = const ID,
            ok = out(reg) ok,
            c = out(reg) _,
            options(nostack)
        )
    };
    ok != 0
}

/// A section that reports success in `{ok}` (0 when it leaves early, by
/// label 7 or without a record): `$body` runs after the entry (the
/// record at `{c}`) and sets `{ok}` at or after its commit; `$operands`
/// are its own. The value of the macro is `ok != 0`.
macro_rules! ok_section {
    ($s:ident, [$($body:literal),*], $($operands:tt)*) => {{
        debug_assert_eq!($s.area(), area(), "SheafSlots without the rseq area");
        let ok: usize;
        // SAFETY: the caller's contract (each use says what its commit is
        // and what it writes before it).
        unsafe {
            asm!(
                "2:",
                "xor {ok:e}, {ok:e}",
                rseq_enter!("7f"),
                $($body,)*
                "7:",
                rseq_tail!(),
                off = in(reg) $s.area(),
                base = in(reg) $s.base(),
                nr = const N,
                rcs = const RSEQ_CS,
                cpu = const ID,
                ok = out(reg) ok,
                c = out(reg) _,
                $($operands)*
                options(nostack)
            )
        };
        ok != 0
    }};
}

/// `this_cpu_cmpxchg` of a sheaf word (see
/// [`Platform::this_cpu_cmpxchg`](crate::Platform::this_cpu_cmpxchg)).
/// For [`SheafWord::Main`] only from 0 (an install, [`install_main`]) or
/// to 0 (a take of exactly `old`).
///
/// # Safety
///
/// As [`pop`]; a non-zero `new` is a detached sheaf (of `s.cap()`
/// entries) the caller owns.
#[inline(always)]
pub unsafe fn cmpxchg<const N: usize>(
    s: SheafSlots<'_, N>,
    w: SheafWord,
    old: usize,
    new: usize,
) -> bool {
    if w == SheafWord::Main {
        if old == 0 {
            // SAFETY: the caller's contract.
            return new == 0 || unsafe { install_main(s, new) };
        }
        debug_assert_eq!(new, 0, "a main sheaf replaced in one exchange");
        // SAFETY: the caller's contract.
        return unsafe { take_main(s, old) } == Some(old);
    }
    // The commit is one `lock cmpxchg`.
    ok_section!(
        s,
        [
            "mov rax, {old}",
            "lock cmpxchg qword ptr [{c} + {w}], {new}",
            "5:",
            "jne 7f",
            "mov {ok:e}, 1"
        ],
        w = in(reg) w as usize,
        old = in(reg) old,
        new = in(reg) new,
        out("rax") _,
    )
}

/// `this_cpu_xchg` of a sheaf word (see
/// [`Platform::this_cpu_xchg`](crate::Platform::this_cpu_xchg)): `None`
/// when the CPU has no record. For [`SheafWord::Main`] only to 0 (a take,
/// [`take_main`]).
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn xchg<const N: usize>(
    s: SheafSlots<'_, N>,
    w: SheafWord,
    new: usize,
) -> Option<usize> {
    if w == SheafWord::Main {
        debug_assert_eq!(new, 0, "a main sheaf replaced in one exchange");
        // SAFETY: the caller's contract.
        return unsafe { take_main(s, 0) };
    }
    let old: usize;
    // The commit is one `lock cmpxchg` of the value just loaded (a remote
    // exchange in between makes it fail, and the section restarts
    // through the jump back).
    let ok = ok_section!(
        s,
        [
            "mov rax, qword ptr [{c} + {w}]",
            "lock cmpxchg qword ptr [{c} + {w}], {new}",
            "5:",
            "jne 2b",
            "mov {ok:e}, 1"
        ],
        w = in(reg) w as usize,
        new = in(reg) new,
        out("rax") old,
    );
    ok.then_some(old)
}

/// Takes the running CPU's main sheaf: `None` without a record, `Some(0)`
/// without a main sheaf, else `Some(sheaf)` with its size (the record's
/// `count`) stored into its size word. With `only` not 0, a main sheaf
/// other than `only` is left installed (and returned, not taken): a
/// compare-exchange. The commit is a `lock cmpxchg` of `limit` to 0 from
/// the value read (a remote take in between makes it fail: the section
/// starts again and finds no sheaf); the size word is written before it
/// (the sheaf is still installed, so nothing else reads that word, and a
/// restart writes it again).
///
/// # Safety
///
/// As [`pop`].
#[inline(always)]
pub unsafe fn take_main<const N: usize>(s: SheafSlots<'_, N>, only: usize) -> Option<usize> {
    let sh: usize;
    let ok = ok_section!(
        s,
        [
            "xor {sh:e}, {sh:e}",
            "mov rax, qword ptr [{c} + 16]",
            "test rax, rax",
            "jz 8f",
            "mov {sh}, qword ptr [{c}]",
            "test {only}, {only}",
            "jz 9f",
            "cmp {sh}, {only}",
            "jne 8f",
            "9:",
            "mov {t}, qword ptr [{c} + 8]",
            "mov qword ptr [{sh}], {t}",
            "xor {t:e}, {t:e}",
            "lock cmpxchg qword ptr [{c} + 16], {t}",
            "5:",
            "jne 2b",
            "8:",
            "mov {ok:e}, 1"
        ],
        only = in(reg) only,
        sh = out(reg) sh,
        t = out(reg) _,
        out("rax") _,
    );
    ok.then_some(sh)
}

/// Installs the detached sheaf `sh` as the running CPU's main sheaf:
/// false (nothing changed) when the CPU has no record or already has a
/// main sheaf (or a remote taker is reading it: `busy`), or `sh`'s size
/// word exceeds `s.cap()`. The section stores the address and the size
/// into the record (no section reads them while `limit` is 0) and
/// commits by storing `limit` (the capacity). (`limit` is read before
/// `busy`: a taker raises `busy` before it clears `limit`, so an install
/// that sees the cleared `limit` sees `busy` up.)
///
/// # Safety
///
/// As [`pop`]; `sh` is a detached sheaf of `s.cap()` entries the caller
/// owns.
#[inline(always)]
pub unsafe fn install_main<const N: usize>(s: SheafSlots<'_, N>, sh: usize) -> bool {
    // SAFETY: the caller's: a sheaf it owns.
    let n = unsafe { *(sh as *const usize) };
    let cap = s.cap();
    if n > cap || cap == 0 {
        return false;
    }
    ok_section!(
        s,
        [
            "cmp qword ptr [{c} + 16], 0",
            "jne 7f",
            "cmp qword ptr [{c} + 104], 0",
            "jne 7f",
            "mov qword ptr [{c}], {sh}",
            "mov qword ptr [{c} + 8], {n}",
            "mov {ok:e}, 1",
            "mov qword ptr [{c} + 16], {cap}",
            "5:"
        ],
        sh = in(reg) sh,
        n = in(reg) n,
        cap = in(reg) cap,
    )
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;

/// Whether this process may fence other CPUs' sections
/// (`membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ)`, Linux
/// 5.10+), registering on first use.
pub fn fence_available() -> bool {
    match FENCE.load(Ordering::Acquire) {
        YES => return true,
        NO => return false,
        _ => {}
    }
    // SAFETY: membarrier takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    let ok = r == 0;
    FENCE.store(if ok { YES } else { NO }, Ordering::Release);
    ok
}

/// Restarts every section running in this process and waits for that:
/// afterwards no section that started before the call is still running.
/// (A slot is a concurrency id, not a CPU: the thread using it may run on
/// any CPU, so every CPU running one of the process's threads is fenced,
/// as `membarrier` does without `MEMBARRIER_CMD_FLAG_CPU`.)
pub fn fence() -> bool {
    if !fence_available() {
        return false;
    }
    // SAFETY: membarrier takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    r == 0
}

/// Exchanges sheaf word `w` of slot `cpu`'s record for `new` and fences the
/// process ([`fence`]; see [`Platform::remote_sheaf_xchg`](crate::Platform::remote_sheaf_xchg)).
/// `None` when `cpu` has no record or fencing is unavailable (then nothing
/// was changed).
pub fn remote_xchg<const N: usize>(
    s: SheafSlots<'_, N>,
    cpu: usize,
    w: SheafWord,
    new: usize,
) -> Option<usize> {
    let r = s.record(cpu)?;
    if !fence_available() {
        return None;
    }
    if w == SheafWord::Main {
        debug_assert_eq!(new, 0, "a main sheaf installed remotely");
        // `busy` first (no install starts: the words stay the taken
        // sheaf's), then `limit` cleared (no pop or push starts); after
        // the fence no section on that CPU can still commit a `count`
        // (they restart and see no sheaf), so the words read then are
        // final.
        if r.busy.swap(1, Ordering::AcqRel) != 0 {
            // Another remote taker is at it: that one drains the CPU.
            return None;
        }
        let lim = r.limit.swap(0, Ordering::AcqRel);
        let mut sh = 0;
        if lim != 0 {
            let fenced = fence();
            debug_assert!(fenced, "membarrier registered, then refused");
            sh = r.main.load(Ordering::Acquire);
            let n = r.count.load(Ordering::Acquire);
            // SAFETY: a non-zero limit means `sh` was the installed
            // sheaf, now ours.
            unsafe { AtomicUsize::from_ptr(sh as *mut usize) }.store(n, Ordering::Relaxed);
        }
        r.busy.store(0, Ordering::Release);
        return Some(sh);
    }
    let old = crate::this_cpu::word_of(r, w).swap(new, Ordering::AcqRel);
    // (Registered, the fence cannot fail: it only restarts sections.)
    let fenced = fence();
    debug_assert!(fenced, "membarrier registered, then refused");
    Some(old)
}

#[cfg(test)]
mod tests;
