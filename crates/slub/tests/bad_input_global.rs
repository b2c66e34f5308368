//! Bad input against `GlobalSlub` instances (issue #14, item 1): an
//! instance that is used, then moved (into a box, out of a thread) or
//! forgotten, must not leave anything behind that a later thread exit
//! touches. Each scenario runs in a child process (this binary re-run with
//! `SLUB_SCENARIO` set), so a crash is reported as the scenario's failure
//! instead of killing the harness. Not under miri (child processes, mmap).
#![cfg(not(any(loom, miri)))]

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use slub::GlobalSlub;

#[global_allocator]
static HEAP: GlobalSlub = GlobalSlub::new();

const ENV: &str = "SLUB_SCENARIO";

/// Runs `name` in a child process and returns (exit status, stderr).
fn run_child(name: &str) -> (std::process::ExitStatus, String) {
    local_lock::child::run(name, ENV, name)
}

/// In the child: runs `f`, then exits 0. In the parent: runs the child and
/// asserts it exited 0.
fn scenario(name: &str, f: impl FnOnce() + Send) {
    if std::env::var(ENV).as_deref() == Ok(name) {
        big_stack(|| {
            f();
            // Later thread exits (each runs the exit hooks of every
            // registered instance) after the instance moved away.
            later_threads_exit();
        });
        return;
    }
    let (status, stderr) = run_child(name);
    assert!(
        status.success(),
        "scenario {name}: the child died ({status:?}); stderr:\n{stderr}"
    );
}

/// Runs `f` on a thread with a 64 MiB stack: a `GlobalSlub` is over
/// 400 KiB, and debug builds keep several copies of it in a frame.
fn big_stack<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

/// Objects of several sizes allocated and freed from three threads, some
/// left live until the end (so each thread's slot holds a CPU slab, partial
/// slabs and sheaves of the instance).
fn use_from_threads(h: &GlobalSlub) {
    std::thread::scope(|s| {
        for t in 0..3usize {
            s.spawn(move || {
                let mut keep = Vec::new();
                for i in 0..3000usize {
                    let l = Layout::from_size_align(8 + (i * 37 + t) % 3000, 8).unwrap();
                    // SAFETY: non-zero layout; freed below with it.
                    let p = unsafe { h.alloc(l) };
                    assert!(!p.is_null());
                    // SAFETY: a live block of `l.size()` bytes.
                    unsafe { p.write_bytes(t as u8, l.size()) };
                    if i % 4 == 0 {
                        keep.push((p as usize, l));
                    } else {
                        // SAFETY: allocated just above with `l`.
                        unsafe { h.dealloc(p, l) };
                    }
                }
                for (p, l) in keep {
                    // SAFETY: as above.
                    unsafe { h.dealloc(p as *mut u8, l) };
                }
            });
        }
    });
}

/// Threads that allocate (from the global `HEAP`: each owns a per-thread
/// slot, so its exit runs the exit hooks) and exit, with deep stacks that
/// overwrite whatever a dead thread's stack held.
fn later_threads_exit() {
    for _ in 0..8 {
        std::thread::spawn(|| {
            let v = black_box(vec![7u8; 1000]);
            let scribble = black_box([0xa5u8; 256 << 10]);
            assert_eq!((v[999], scribble[1]), (7, 0xa5));
        })
        .join()
        .unwrap();
    }
}

/// A scribble over this thread's stack below the caller's frame.
#[inline(never)]
fn scribble_stack() {
    let s = black_box([0x5au8; 1 << 20]);
    black_box(&s);
}

#[test]
fn static_instance_flushes_at_thread_exit_local_instance_does_not() {
    big_stack(static_and_local);
}

fn static_and_local() {
    drop(black_box(vec![1u8; 10]));
    assert!(
        HEAP.flushes_at_thread_exit(),
        "the #[global_allocator] static"
    );
    let local = Box::new(GlobalSlub::new());
    use_from_threads(&local);
    assert!(!local.flushes_at_thread_exit(), "a box must not register");
    // A leaked box is `'static`: it may ask for the flush.
    let leaked: &'static GlobalSlub = Box::leak(Box::new(GlobalSlub::new()));
    assert!(leaked.flush_at_thread_exit());
    assert!(leaked.flushes_at_thread_exit());
    use_from_threads(leaked);
}

#[test]
fn local_moved_out_of_unmapped_memory_later_thread_exits_do_not_crash() {
    scenario(
        "local_moved_out_of_unmapped_memory_later_thread_exits_do_not_crash",
        || {
            // The instance lives in a mapping of its own while it is used,
            // then moves into a box and the mapping goes away: any pointer
            // left to its old place faults at once.
            let len = std::mem::size_of::<GlobalSlub>().next_multiple_of(4096);
            // SAFETY: a fresh anonymous mapping.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(m, libc::MAP_FAILED);
            let p = m.cast::<GlobalSlub>();
            // SAFETY: the mapping is large enough and page-aligned.
            unsafe { p.write(GlobalSlub::new()) };
            // SAFETY: initialised just above.
            use_from_threads(unsafe { &*p });
            // SAFETY: moved out (bitwise), the old place is not used again.
            let boxed = Box::new(unsafe { p.read() });
            // SAFETY: our mapping; nothing refers to it any more.
            assert_eq!(unsafe { libc::munmap(m, len) }, 0);
            later_threads_exit();
            // The moved instance still works.
            use_from_threads(&boxed);
            drop(boxed);
        },
    );
}

#[test]
fn local_moved_into_box_later_thread_exits_do_not_crash() {
    scenario(
        "local_moved_into_box_later_thread_exits_do_not_crash",
        || {
            #[inline(never)]
            fn make() -> Box<GlobalSlub> {
                let g = GlobalSlub::new();
                use_from_threads(&g);
                Box::new(g)
            }
            let b = make();
            scribble_stack();
            later_threads_exit();
            use_from_threads(&b);
        },
    );
}

#[test]
fn local_returned_from_thread_later_thread_exits_do_not_crash() {
    scenario(
        "local_returned_from_thread_later_thread_exits_do_not_crash",
        || {
            let g = std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn(|| {
                    let g = GlobalSlub::new();
                    use_from_threads(&g);
                    Box::new(g)
                })
                .unwrap()
                .join()
                .unwrap();
            later_threads_exit();
            use_from_threads(&g);
        },
    );
}

#[test]
fn local_forgotten_later_thread_exits_do_not_crash() {
    scenario("local_forgotten_later_thread_exits_do_not_crash", || {
        #[inline(never)]
        fn use_and_forget() {
            let g = GlobalSlub::new();
            use_from_threads(&g);
            std::mem::forget(g);
        }
        use_and_forget();
        scribble_stack();
        later_threads_exit();
    });
}
