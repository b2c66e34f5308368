//! The restartable `this_cpu` sheaf operations under contention and
//! migration: tokens moved between per-CPU sheaves, thread-owned sheaves
//! (detached with `this_cpu_xchg`, installed with `this_cpu_cmpxchg`) and
//! a remote drainer must all be found exactly once at the end.
#![cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use local_lock::std_platform::RseqCpu;
use local_lock::this_cpu::{
    CpuSheaves, SheafRecord, SheafSlots, SheafWord, SHEAF_HDR_WORDS, SHEAF_RECORD_STRIDE,
};
use local_lock::Platform;

/// A `this_cpu` operation (unsafe: see each platform's contract).
macro_rules! this_cpu {
    ($e:expr) => {{
        // SAFETY: restartable() was checked at the start of the test.
        unsafe { $e }
    }};
}

const CAP: usize = 16;
const NR: usize = 64;
/// Operations per thread: enough that threads are preempted inside sections.
const STEPS: usize = 1_000_000;

static RECS: [SheafRecord<()>; NR] = [const { SheafRecord::new(()) }; NR];

fn slots() -> SheafSlots<'static, NR> {
    // SAFETY: NR records, one SheafRecord apart; every sheaf word holds 0
    // or a leaked sheaf of CAP entries.
    unsafe { SheafSlots::new(RECS.as_ptr().cast(), SHEAF_RECORD_STRIDE, CAP) }
        .with_area(local_lock::rseq::area())
}

fn new_sheaf() -> usize {
    Box::leak(vec![0usize; SHEAF_HDR_WORDS + CAP].into_boxed_slice()).as_mut_ptr() as usize
}

fn words(sh: usize) -> &'static mut [usize] {
    // SAFETY: a leaked sheaf the caller owns (detached).
    unsafe { std::slice::from_raw_parts_mut(sh as *mut usize, SHEAF_HDR_WORDS + CAP) }
}

fn migrate(cpu: usize) {
    // SAFETY: a plain cpu_set_t for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % 2, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

#[test]
fn tokens_survive_contention_migration_and_remote_drains() {
    let p = RseqCpu::new();
    if !p.restartable() {
        eprintln!("no rseq here: nothing to test");
        return;
    }
    let s = slots();
    let threads = 8;
    let per_thread = 200usize;
    let stop = AtomicBool::new(false);
    let drained = Mutex::new(Vec::<usize>::new());
    let results = Mutex::new(Vec::<usize>::new());
    std::thread::scope(|sc| {
        let (stop, drained) = (&stop, &drained);
        sc.spawn(move || {
            let mut cpu = 0;
            while !stop.load(Ordering::Relaxed) {
                cpu = (cpu + 1) % 2;
                if let Some(sh) = p.remote_sheaf_xchg(s, cpu, SheafWord::Main, 0) {
                    if sh != 0 {
                        let w = words(sh);
                        let mut d = drained.lock().unwrap();
                        while w[0] > 0 {
                            w[0] -= 1;
                            d.push(w[SHEAF_HDR_WORDS + w[0]]);
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        std::thread::scope(|sc| {
            for t in 0..threads {
                let results = &results;
                sc.spawn(move || {
                    let mut mine: Vec<usize> = (0..per_thread)
                        .map(|i| (t * per_thread + i + 1) * 8)
                        .collect();
                    let mut rng = 0x9e37_79b9u64 ^ t as u64;
                    for step in 0..STEPS {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if step % 997 == 0 {
                            migrate(rng as usize);
                        }
                        match rng % 16 {
                            0..=5 => {
                                let v = this_cpu!(p.this_cpu_sheaf_pop(s));
                                if v != 0 {
                                    mine.push(v);
                                }
                            }
                            6 => {
                                // Several in one section (a bulk alloc).
                                let mut out = [0usize; 5];
                                let want = 1 + (rng >> 8) as usize % out.len();
                                let k = this_cpu!(p.this_cpu_sheaf_pop_many(s, &mut out[..want]));
                                assert!(k <= want);
                                assert!(out[..k].iter().all(|&v| v != 0), "{out:?}");
                                mine.extend_from_slice(&out[..k]);
                            }
                            7..=11 => {
                                if let Some(v) = mine.pop() {
                                    if !this_cpu!(p.this_cpu_sheaf_push(s, v)) {
                                        mine.push(v);
                                    }
                                }
                            }
                            12 | 13 => {
                                // Several in one section (a bulk free).
                                let want = (1 + (rng >> 8) as usize % 5).min(mine.len());
                                let from = mine.len() - want;
                                let k = this_cpu!(p.this_cpu_sheaf_push_many(s, &mine[from..]));
                                assert!(k <= want);
                                mine.drain(from..from + k);
                            }
                            14 => {
                                // The slow path: detach main, work on it as
                                // its owner, install it (or a new one) again.
                                let Some(old) = this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0))
                                else {
                                    continue;
                                };
                                let sh = if old == 0 { new_sheaf() } else { old };
                                let w = words(sh);
                                while w[0] > CAP / 2 {
                                    w[0] -= 1;
                                    mine.push(w[SHEAF_HDR_WORDS + w[0]]);
                                }
                                if !this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)) {
                                    // Someone installed one meanwhile (or we
                                    // moved): keep its tokens, drop the sheaf.
                                    while w[0] > 0 {
                                        w[0] -= 1;
                                        mine.push(w[SHEAF_HDR_WORDS + w[0]]);
                                    }
                                }
                            }
                            _ => {
                                // Spare: park the main sheaf there and back.
                                if let Some(m) = this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0)) {
                                    if m != 0
                                        && !this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Spare, 0, m))
                                    {
                                        let w = words(m);
                                        while w[0] > 0 {
                                            w[0] -= 1;
                                            mine.push(w[SHEAF_HDR_WORDS + w[0]]);
                                        }
                                    }
                                    if let Some(sp) =
                                        this_cpu!(p.this_cpu_xchg(s, SheafWord::Spare, 0))
                                    {
                                        if sp != 0
                                            && !this_cpu!(p.this_cpu_cmpxchg(
                                                s,
                                                SheafWord::Main,
                                                0,
                                                sp
                                            ))
                                        {
                                            let w = words(sp);
                                            while w[0] > 0 {
                                                w[0] -= 1;
                                                mine.push(w[SHEAF_HDR_WORDS + w[0]]);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    results.lock().unwrap().extend(mine);
                });
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    let mut all = results.into_inner().unwrap();
    eprintln!(
        "tokens: {} with threads, {} drained remotely",
        all.len(),
        drained.lock().unwrap().len()
    );
    all.extend(drained.into_inner().unwrap());
    for c in 0..NR {
        let r = s.record(c).unwrap();
        for sh in [
            r.main.load(Ordering::Relaxed),
            r.spare.load(Ordering::Relaxed),
        ] {
            if sh != 0 {
                let w = words(sh);
                all.extend_from_slice(&w[SHEAF_HDR_WORDS..SHEAF_HDR_WORDS + w[0]]);
            }
        }
    }
    all.sort_unstable();
    let expect: Vec<usize> = (1..=threads * per_thread).map(|i| i * 8).collect();
    assert_eq!(all.len(), expect.len(), "tokens lost or duplicated");
    assert_eq!(all, expect);
}

/// The restartable bulk pop and push move the entries the generic ones
/// do (`this_cpu::pop_many_in`, `push_many_in`), in the same order: as
/// far as the sheaf has room or entries, nothing without a main sheaf.
#[test]
fn restartable_bulk_pop_and_push_match_the_generic_steps() {
    let p = RseqCpu::new();
    if !p.restartable() {
        eprintln!("no rseq here: nothing to test");
        return;
    }
    migrate(0);
    // Records of its own (the other tests run beside it on `RECS`).
    static MINE: [SheafRecord<()>; NR] = [const { SheafRecord::new(()) }; NR];
    // SAFETY: as in `slots`.
    let s = unsafe { SheafSlots::<NR>::new(MINE.as_ptr().cast(), SHEAF_RECORD_STRIDE, CAP) }
        .with_area(local_lock::rseq::area());
    let cpu = local_lock::rseq::cpu_id() as usize;
    let r = s.record(cpu).unwrap();
    let (sh, gen) = (new_sheaf(), new_sheaf());
    let gr = CpuSheaves::new();
    gr.main.store(gen, Ordering::Relaxed);
    let src: Vec<usize> = (1..=20).map(|i| i * 8).collect();
    // No main sheaf: nothing moves.
    r.main.store(0, Ordering::Relaxed);
    assert_eq!(this_cpu!(p.this_cpu_sheaf_push_many(s, &src)), 0);
    assert_eq!(this_cpu!(p.this_cpu_sheaf_pop_many(s, &mut [0; 4])), 0);
    r.main.store(sh, Ordering::Relaxed);
    for (push, pop) in [(3, 2), (0, 1), (20, 5), (7, 0), (1, 16), (16, 16), (2, 1)] {
        // (A migration in between would leave `sh`: checked below.)
        let k = this_cpu!(p.this_cpu_sheaf_push_many(s, &src[..push]));
        assert_eq!(
            k,
            local_lock::this_cpu::push_many_in(&gr, CAP, &src[..push])
        );
        let (mut a, mut b) = ([0usize; 16], [0usize; 16]);
        let k = this_cpu!(p.this_cpu_sheaf_pop_many(s, &mut a[..pop]));
        assert_eq!(
            k,
            local_lock::this_cpu::pop_many_in(&gr, CAP, &mut b[..pop])
        );
        assert_eq!(a, b, "push {push}, pop {pop}");
        assert_eq!(
            local_lock::rseq::cpu_id() as usize,
            cpu,
            "migrated: pinned to CPU 0"
        );
        assert_eq!(
            words(sh)[..SHEAF_HDR_WORDS + CAP],
            words(gen)[..SHEAF_HDR_WORDS + CAP]
        );
    }
    r.main.store(0, Ordering::Relaxed);
}

/// The restartable range operations store and read what the generic
/// ones do (`this_cpu::set_range_in`): ways kept apart, every way emptied
/// by a new discard count; and `this_cpu_free_push` validates, marks and
/// pushes as `this_cpu::free_push_in` does.
#[test]
fn restartable_ranges_and_free_push_match_the_generic_steps() {
    use local_lock::this_cpu::{range_way, FreeCheck, FreePush};
    let p = RseqCpu::new();
    if !p.restartable() {
        return;
    }
    static R2: [SheafRecord<()>; NR] = [const { SheafRecord::new(()) }; NR];
    // SAFETY: NR records one SheafRecord apart; sheaves of CAP entries.
    let s = unsafe { SheafSlots::<NR>::new(R2.as_ptr().cast(), SHEAF_RECORD_STRIDE, CAP) }
        .with_area(local_lock::rseq::area());
    migrate(0); // stay on CPU 0 (a migration would only move the record)
    assert!(this_cpu!(p.this_cpu_set_range(s, 1, 0x1000, 0x100, 7)));
    assert!(this_cpu!(p.this_cpu_set_range(s, 2, 0x2000, 0x80, 7)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 1)), Some((0x1000, 0x100, 7)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 2)), Some((0x2000, 0x80, 7)));
    assert!(this_cpu!(p.this_cpu_set_range(s, 3, 0x3000, 0x40, 8)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 1)), Some((0x1000, 0, 8)));
    assert_eq!(this_cpu!(p.this_cpu_range(s, 3)), Some((0x3000, 0x40, 8)));

    // A slab of 4 objects of 64 B at a 4 KiB-aligned address.
    let slab = Box::leak(vec![0u64; 512].into_boxed_slice()).as_mut_ptr() as usize;
    let base = (slab + 4095) & !4095;
    let chk = FreeCheck::new();
    let ord = Ordering::Relaxed;
    chk.recip.store((u64::MAX / 64 + 1) as usize, ord);
    chk.size.store(64, ord);
    chk.key.store(0x5a5a_5a5a_0000_00c3, ord);
    chk.gen.store(8, ord);
    chk.nr.store(NR, ord);
    chk.cap.store(CAP, ord);
    chk.shift.store(12, ord);
    let obj = base + 128;
    let way = range_way(obj, 12);
    let main = new_sheaf();
    assert!(this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, main)));
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, obj)),
        FreePush::Miss,
        "no range yet"
    );
    assert!(this_cpu!(p.this_cpu_set_range(s, way, base, 256, 8)));
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, obj + 8)),
        FreePush::Miss,
        "not a boundary"
    );
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, base + 256)),
        FreePush::Miss,
        "past the span"
    );
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, obj)),
        FreePush::Pushed
    );
    // SAFETY: our object's first word.
    let w = unsafe { *(obj as *const usize) };
    assert_eq!(w, 0x5a5a_5a5a_0000_00c3, "marked free");
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, obj)),
        FreePush::Marked,
        "a double free"
    );
    assert_eq!(installed_count(&R2, main), 1);
    assert_eq!(
        words(main)[SHEAF_HDR_WORDS],
        obj ^ 0x5a5a_5a5a_0000_00c3,
        "stored encoded"
    );
    // `free a, free b, free a`: the free never reads the object (its
    // marker is stored blind), so only the top entry is refused; the
    // second `a` is found when it leaves the sheaf (slub checks the
    // marker there).
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, base + 192)),
        FreePush::Pushed
    );
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, obj)),
        FreePush::Pushed,
        "not the top entry: taken"
    );
    assert_eq!(installed_count(&R2, main), 3);
    chk.gen.store(9, ord);
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, base + 64)),
        FreePush::Miss,
        "stale range"
    );
    chk.gen.store(8, ord);
    for i in 0..CAP - 3 {
        // Objects 0 and 1 again and again: clear the marker each time.
        let o = base + 64 * (i % 2);
        // SAFETY: our slab.
        unsafe { *(o as *mut usize) = 0 };
        assert_eq!(
            this_cpu!(p.this_cpu_free_push(s, &chk, o)),
            FreePush::Pushed
        );
    }
    // SAFETY: as above.
    unsafe { *(base as *mut usize) = 0 };
    assert_eq!(
        this_cpu!(p.this_cpu_free_push(s, &chk, base)),
        FreePush::Full,
        "sheaf full"
    );
    // SAFETY: as above.
    let w = unsafe { *(base as *const usize) };
    assert_eq!(w, 0x5a5a_5a5a_0000_00c3, "marked even when full");

    // The unhardened section: the same validation, a plain entry, no
    // marker and no top-entry refusal; and the generic steps agree.
    let main2 = new_sheaf();
    assert_eq!(
        this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0)),
        Some(main)
    );
    assert_eq!(words(main)[0], CAP, "the size stored back when taken");
    assert!(this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, main2)));
    let o = base + 192;
    // SAFETY: our slab.
    unsafe { *(o as *mut usize) = 7 };
    assert_eq!(
        this_cpu!(p.this_cpu_free_push_unmarked(s, &chk, o + 8)),
        FreePush::Miss,
        "not a boundary"
    );
    for n in 1..=2 {
        assert_eq!(
            this_cpu!(p.this_cpu_free_push_unmarked(s, &chk, o)),
            FreePush::Pushed,
            "push {n}: no top-entry check"
        );
    }
    assert_eq!(installed_count(&R2, main2), 2);
    assert_eq!(
        this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0)),
        Some(main2)
    );
    assert_eq!(&words(main2)[..SHEAF_HDR_WORDS + 2], &[2, 0, o, o]);
    // SAFETY: as above.
    assert_eq!(unsafe { *(o as *const usize) }, 7, "the object untouched");
    let r = CpuSheaves::new();
    let sh = new_sheaf();
    assert!(local_lock::this_cpu::install_main_in(&r, CAP, sh));
    r.vgen.store(8, ord);
    local_lock::this_cpu::set_range_in(&r, way, base, 256, 8);
    assert_eq!(
        local_lock::this_cpu::free_push_in_unmarked(&r, &chk, o),
        FreePush::Pushed
    );
    assert_eq!(local_lock::this_cpu::take_main_in(&r), sh);
    assert_eq!(&words(sh)[..SHEAF_HDR_WORDS + 1], &[1, 0, o]);
    // SAFETY: as above.
    assert_eq!(unsafe { *(o as *const usize) }, 7, "the object untouched");
}

/// The size of `main` while it is installed in one of `recs` (kept in
/// the record's `count`, not in the sheaf).
fn installed_count(recs: &[SheafRecord<()>], main: usize) -> usize {
    let r = recs
        .iter()
        .map(|r| &r.sheaves)
        .find(|r| r.limit.load(Ordering::Relaxed) != 0 && r.main.load(Ordering::Relaxed) == main)
        .expect("installed");
    r.count.load(Ordering::Relaxed)
}

/// The slots are concurrency ids (`mm_cid`): a process of one thread is
/// slot 0 on every CPU. Checked in a forked child (the test harness runs
/// several threads): pinned to each CPU in turn, its slot stays 0 while
/// `sched_getcpu()` follows the pinning. Before, the slot was the CPU.
#[test]
fn a_process_of_one_thread_is_slot_0_on_every_cpu() {
    let p = RseqCpu::new();
    // SAFETY: getauxval has no preconditions.
    if !p.restartable() || unsafe { libc::getauxval(27) } < 28 {
        eprintln!("no rseq or no mm_cid: skipped");
        return;
    }
    // SAFETY: the child only makes system calls and reads its rseq area
    // (no lock, no allocation) before `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut bad = 0;
        for cpu in 0..2 {
            // SAFETY: plain libc calls on this thread's affinity mask.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0
                    || libc::sched_getcpu() != cpu as i32
                {
                    libc::_exit(2);
                }
            }
            if p.current_cpu() != 0 {
                bad = 1;
            }
        }
        // SAFETY: ends the child without running the harness's exit.
        unsafe { libc::_exit(bad) };
    }
    let mut st = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    match libc::WEXITSTATUS(st) {
        2 => eprintln!("fewer than 2 CPUs allowed: skipped"),
        s => assert_eq!(s, 0, "a process of one thread used a slot other than 0"),
    }
}

/// The main sheaf's size lives in the record while the sheaf is
/// installed: pops and pushes move `count` and leave the sheaf's size
/// word alone; a take stores the size back. An install while a remote
/// taker reads the record's words (`busy` up, between clearing `limit`
/// and reading `main` and `count`) fails: otherwise the taker would read
/// the new sheaf's words and take a sheaf installed on the CPU (two
/// owners), and the sheaf it cleared would be lost.
#[test]
fn an_install_waits_for_a_remote_taker_and_sizes_live_in_the_record() {
    let p = RseqCpu::new();
    if !p.restartable() {
        return;
    }
    static R3: [SheafRecord<()>; NR] = [const { SheafRecord::new(()) }; NR];
    // SAFETY: NR records one SheafRecord apart; sheaves of CAP entries.
    let s = unsafe { SheafSlots::<NR>::new(R3.as_ptr().cast(), SHEAF_RECORD_STRIDE, CAP) }
        .with_area(local_lock::rseq::area());
    let sh = new_sheaf();
    words(sh)[0] = 2;
    words(sh)[SHEAF_HDR_WORDS] = 16;
    words(sh)[SHEAF_HDR_WORDS + 1] = 24;
    for r in &R3 {
        r.sheaves.busy.store(1, Ordering::Relaxed);
    }
    assert!(
        !this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)),
        "installed under a remote taker"
    );
    for r in &R3 {
        r.sheaves.busy.store(0, Ordering::Relaxed);
    }
    assert!(this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, sh)));
    let other = new_sheaf();
    assert!(
        !this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, other)),
        "a second main sheaf"
    );
    assert_eq!(this_cpu!(p.this_cpu_sheaf_pop(s)), 24);
    assert!(this_cpu!(p.this_cpu_sheaf_push(s, 32)));
    assert!(this_cpu!(p.this_cpu_sheaf_push(s, 40)));
    assert_eq!(
        words(sh)[0],
        2,
        "the sheaf's size word untouched while installed"
    );
    assert_eq!(installed_count(&R3, sh), 3);
    // Taken (locally, or by a remote taker from any thread): the size
    // stored back, and the CPU has no main sheaf any more.
    let cpu = R3
        .iter()
        .position(|r| r.sheaves.limit.load(Ordering::Relaxed) != 0)
        .expect("installed");
    let taken = if local_lock::rseq::fence_available() {
        p.remote_sheaf_xchg(s, cpu, SheafWord::Main, 0)
    } else {
        this_cpu!(p.this_cpu_xchg(s, SheafWord::Main, 0))
    };
    assert_eq!(taken, Some(sh));
    assert_eq!(&words(sh)[..SHEAF_HDR_WORDS + 3], &[3, 0, 16, 32, 40]);
    assert_eq!(R3[cpu].sheaves.limit.load(Ordering::Relaxed), 0);
    assert_eq!(R3[cpu].sheaves.busy.load(Ordering::Relaxed), 0);
    assert_eq!(
        p.remote_sheaf_xchg(s, cpu, SheafWord::Main, 0).unwrap_or(0),
        0
    );
    assert!(this_cpu!(p.this_cpu_cmpxchg(s, SheafWord::Main, 0, other)));
}
