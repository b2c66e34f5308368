//! Compiles the C test suite (`tests/c/malloc_test.c`) with the system
//! `cc` and runs it twice: against the cdylib under `LD_PRELOAD`, and
//! linked with the staticlib. Also checks the library imports no
//! allocator (`nm -D`) and that a plain program under `LD_PRELOAD` really
//! runs on it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where cargo put `libmm_malloc.{so,a}`, brought up
/// to date first (`cargo test --test c_suite` alone builds only the rlib
/// the test links, and would leave a stale `.so`).
fn artifacts() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-q", "-p", "mm-malloc", "--lib"])
            .current_dir(crate_dir());
        // (the profile the test was built with: `debug`, `release`, or
        // `malloc`, the library's size-optimised one)
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                c.arg("--release");
            }
            Some(p) => {
                c.args(["--profile", p]);
            }
        }
        let st = c.status().expect("cargo build");
        assert!(st.success(), "{c:?}");
    });
    dir
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

fn cc(out: &Path, extra: &[&str]) {
    let dir = crate_dir();
    let mut c = Command::new("cc");
    c.args(["-O0", "-fno-builtin", "-g", "-w", "-I"])
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/malloc_test.c"))
        .arg("-o")
        .arg(out)
        .args(extra);
    let st = c.status().expect("cc");
    assert!(st.success(), "cc failed: {c:?}");
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("run");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{cmd:?}: {}\nstdout:\n{out}\nstderr (tail):\n{}",
        o.status,
        err.lines()
            .filter(|l| l.starts_with("FAIL") || l.contains("mm-malloc"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(out.contains(" checks, 0 failures"), "{out}");
    out
}

/// A file in this test process's scratch directory, removed when dropped,
/// so runs do not pile up executables in the temporary directory (the
/// empty directory stays: removing it could race with another test
/// about to write its file there).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tmp(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("mm-malloc-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d.join(name))
}

#[test]
fn c_suite_under_ld_preload() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    assert!(so.exists(), "{}", so.display());
    let exe = tmp("preload");
    cc(&exe, &["-lpthread", "-ldl"]);
    let out = run(Command::new(&exe).env("LD_PRELOAD", &so));
    eprint!("{out}");
}

#[test]
fn c_suite_linked_statically() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let a = artifacts().join("libmm_malloc.a");
    assert!(a.exists(), "{}", a.display());
    let exe = tmp("static");
    let a = a.to_str().unwrap().to_string();
    cc(
        &exe,
        &[
            "-DMM_STATIC",
            &a,
            "-lpthread",
            "-ldl",
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lm",
        ],
    );
    let out = run(&mut Command::new(&exe));
    eprint!("{out}");
}

#[test]
fn library_imports_no_allocator() {
    let so = artifacts().join("libmm_malloc.so");
    let Ok(o) = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(&so)
        .output()
    else {
        eprintln!("no nm: skipped");
        return;
    };
    let undefined = String::from_utf8_lossy(&o.stdout);
    for l in undefined.lines() {
        let name = l.split_whitespace().last().unwrap_or("");
        let base = name.split('@').next().unwrap();
        assert!(
            !matches!(
                base,
                "malloc"
                    | "free"
                    | "calloc"
                    | "realloc"
                    | "posix_memalign"
                    | "aligned_alloc"
                    | "memalign"
                    | "valloc"
                    | "__libc_malloc"
                    | "__libc_free"
            ),
            "the library imports {name}"
        );
    }
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .unwrap();
    let defined = String::from_utf8_lossy(&o.stdout);
    for f in [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "reallocarray",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "malloc_usable_size",
        "free_sized",
        "free_aligned_sized",
        "cfree",
        "malloc_trim",
        "mallinfo",
        "mallinfo2",
        "malloc_stats",
    ] {
        assert!(
            defined.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f} not exported"
        );
    }
}

/// The shared library needs no `libgcc_s.so.1` (`src/unwind_stubs.c`:
/// every process under `LD_PRELOAD` mapped it, 84 KiB of RSS), and
/// neither exports nor imports an unwinder entry point (its hidden stubs
/// never interpose the program's).
#[test]
fn shared_library_needs_no_libgcc_s() {
    let so = artifacts().join("libmm_malloc.so");
    let Ok(o) = Command::new("readelf").arg("-dW").arg(&so).output() else {
        eprintln!("no readelf: skipped");
        return;
    };
    let dynamic = String::from_utf8_lossy(&o.stdout);
    assert!(
        !dynamic.contains("libgcc_s"),
        "the library needs libgcc_s:\n{dynamic}"
    );
    let o = Command::new("nm").arg("-D").arg(&so).output().unwrap();
    let syms = String::from_utf8_lossy(&o.stdout);
    assert!(
        !syms.contains("_Unwind_"),
        "unwinder symbols in the dynamic table:\n{syms}"
    );
}

/// glibc's malloc would be noticed: `MALLOC_CHECK_`-style behaviour aside,
/// `malloc_usable_size(malloc(100))` is 104 under glibc and 128 (kmalloc-128)
/// here, and `MM_STATS=1` makes the library print its slabinfo at exit.
#[test]
fn programs_under_ld_preload_run_on_it() {
    let so = artifacts().join("libmm_malloc.so");
    let Ok(o) = Command::new("sh")
        .args(["-c", "ls / | sort | head -3"])
        .env("LD_PRELOAD", &so)
        .env("MM_STATS", "1")
        .output()
    else {
        return;
    };
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("kmalloc-64"), "no MM_STATS report: {err}");
}

/// A program using a few objects of 4096 and 8192 bytes gets them as page
/// blocks, no cache built for those classes (`MM_STATS=1`'s slabinfo has
/// no line for them); using more than the classes' cold count builds the
/// caches.
#[test]
fn a_few_large_objects_are_page_blocks() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = tmp("cold_pages");
    let st = Command::new("cc")
        .args(["-O0", "-fno-builtin", "-w", "-o"])
        .arg(&exe)
        .arg(crate_dir().join("tests/c/cold_pages.c"))
        .status()
        .expect("cc");
    assert!(st.success());
    let stats = |n: &str| {
        let o = Command::new(&exe)
            .arg(n)
            .env("LD_PRELOAD", &so)
            .env("MM_STATS", "1")
            .output()
            .expect("run");
        assert!(o.status.success(), "cold_pages {n}: {}", o.status);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("# name"), "no MM_STATS report: {err}");
        err
    };
    let listed = |err: &str, c: &str| err.lines().any(|l| l.split_whitespace().next() == Some(c));
    let few = stats("4");
    for c in ["kmalloc-4k", "kmalloc-8k"] {
        assert!(!listed(&few, c), "{c} built for 4 objects:\n{few}");
    }
    let many = stats("60");
    for c in ["kmalloc-4k", "kmalloc-8k"] {
        assert!(listed(&many, c), "{c} not built for 60 objects:\n{many}");
    }
}

/// The section headers of `so` (`readelf -SW`): `(name, address, size)`.
/// [`sections`], or `None` after saying the test is skipped (no readelf).
fn sections_or_skip(so: &Path) -> Option<Vec<(String, u64, u64)>> {
    let s = sections(so);
    if s.is_none() {
        eprintln!("no readelf: skipped");
    }
    s
}

/// Section `n` of `secs` (name, address, size).
fn section(secs: &[(String, u64, u64)], n: &str) -> Option<(String, u64, u64)> {
    secs.iter().find(|s| s.0 == n).cloned()
}

fn sections(so: &Path) -> Option<Vec<(String, u64, u64)>> {
    let o = Command::new("readelf").arg("-SW").arg(so).output().ok()?;
    let text = String::from_utf8_lossy(&o.stdout);
    let mut v = Vec::new();
    for l in text.lines() {
        let Some(rest) = l.split_once(']').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() >= 5 {
            if let (Ok(a), Ok(s)) = (u64::from_str_radix(f[2], 16), u64::from_str_radix(f[4], 16)) {
                v.push((f[0].to_string(), a, s));
            }
        }
    }
    Some(v)
}

/// The library's `.data` is small and the pages' heap (`PAGES_CELL`, 55
/// KiB, zero but for its last page) is zero data (`.bss.big`): `.data` is a private
/// file mapping whose first read of a page maps the 16 pages around it
/// (fault-around), and with the heap there every process had all of
/// `.data` resident (64 KiB; 8 after, the heap's 5 pages touched in
/// `.bss`, in the fork loop's shell).
#[test]
fn writable_data_is_small_and_the_heap_in_bss() {
    let so = artifacts().join("libmm_malloc.so");
    let Some(secs) = sections_or_skip(&so) else {
        return;
    };
    let find = |n: &str| section(&secs, n);
    let data = find(".data").map_or(0, |s| s.2);
    assert!(data <= 8 << 10, ".data is {data} bytes: {secs:?}");
    // The small statics every process writes, `.data`'s and `.bss`'s,
    // share two pages: the large zero ones (the heap, the caches'
    // slots, the arena) are after them (`.bss.big`, see
    // build.rs), not among them (five pages).
    if let (Some(d), Some(b)) = (find(".data"), find(".bss")) {
        let pages = (b.1 + b.2).div_ceil(4096) - d.1 / 4096;
        assert!(pages <= 2, ".data and .bss on {pages} pages: {secs:?}");
    }
    let Ok(o) = Command::new("nm").arg(&so).output() else {
        return;
    };
    let syms = String::from_utf8_lossy(&o.stdout);
    let cell = syms
        .lines()
        .find(|l| l.contains("5pages10PAGES_CELL"))
        .expect("a PAGES_CELL symbol");
    assert!(
        cell.split_whitespace().nth(1) == Some("b"),
        "PAGES_CELL not in .bss: {cell}"
    );
}

/// The unwinding tables (`.eh_frame`, `.eh_frame_hdr`,
/// `.gcc_except_table`, read only to unwind a frame of the library) come
/// after the code, not at the end of the first read-only segment: there
/// they filled its first 64 KiB, which fault-around maps whole into every
/// process (the dynamic symbols and `.rodata` are read at start): 64 KiB
/// of it resident, 36 after (in the fork loop's shell).
#[test]
fn unwind_tables_follow_the_code() {
    let so = artifacts().join("libmm_malloc.so");
    let Some(secs) = sections_or_skip(&so) else {
        return;
    };
    let find = |n: &str| section(&secs, n);
    let hot = find(".text.malloc_hot").expect("a .text.malloc_hot section");
    for n in [".eh_frame", ".eh_frame_hdr", ".gcc_except_table"] {
        if let Some(u) = find(n) {
            assert!(u.1 > hot.1, "{n} after the code: {secs:?}");
        }
    }
    // What is left before the code (with lld: the dynamic symbols,
    // relocations and `.rodata`) is within one fault-around window.
    let before = secs
        .iter()
        .filter(|s| s.1 != 0 && s.1 < hot.1)
        .map(|s| s.1 + s.2)
        .max()
        .unwrap_or(0);
    assert!(
        before <= 64 << 10,
        "{before} bytes before the code: {secs:?}"
    );
}

/// The relative relocations are packed (`-z pack-relative-relocs`,
/// `DT_RELR`, glibc 2.36): 1137 of them took 27 KiB of `.rela.dyn` at the
/// head of the read-only segment, which pushed `.rodata` past its first
/// 64 KiB, and every process mapped the segment whole (the page cache's
/// folios: 120 KiB resident, 64 after, in the fork loop's shell).
#[test]
fn relative_relocations_are_packed() {
    let so = artifacts().join("libmm_malloc.so");
    let Some(secs) = sections_or_skip(&so) else {
        return;
    };
    let size = |n: &str| secs.iter().find(|s| s.0 == n).map_or(0, |s| s.2);
    assert!(size(".relr.dyn") > 0, "no .relr.dyn: {secs:?}");
    assert!(
        size(".rela.dyn") <= 4 << 10,
        "{} bytes of .rela.dyn",
        size(".rela.dyn")
    );
    if cfg!(debug_assertions) {
        return; // (a debug build's `.rodata` is larger)
    }
    let rodata = secs.iter().find(|s| s.0 == ".rodata").expect(".rodata");
    assert!(
        rodata.1 + rodata.2 <= 64 << 10,
        ".rodata within the first 64 KiB: {rodata:?}"
    );
}

/// The library's code that every process runs is first in its text
/// segment, in `.text.malloc_hot` (`build.rs`): `malloc`, `free` and the
/// slow paths, `.plt`; the cold code and the rest of `.text` after it. In
/// a release build, the text a small program keeps resident is then about
/// that section (measured: 268 KiB before, of 455; 136 KiB after; 128
/// with the section at a 64 KiB boundary, two fault-around windows).
#[test]
fn hot_code_leads_the_text_segment() {
    let so = artifacts().join("libmm_malloc.so");
    let Some(secs) = sections_or_skip(&so) else {
        return;
    };
    let find = |n: &str| section(&secs, n);
    let hot = find(".text.malloc_hot").expect("a .text.malloc_hot section");
    let (_, text, _) = find(".text").expect(".text");
    let (_, cold, _) = find(".text.cold").expect(".text.cold");
    assert!(hot.1 < cold && hot.1 < text, "hot code first: {secs:?}");
    // At a 64 KiB boundary, with the C runtime's `.init`/`.fini` (run by
    // every process) inside: the section's first two fault-around windows
    // hold all of it; 128 KiB at most, or every process maps a third.
    assert!(
        hot.1.is_multiple_of(64 << 10),
        "hot code at a 64 KiB boundary: {hot:?}"
    );
    // (a debug build's code is three times the size)
    assert!(
        cfg!(debug_assertions) || hot.2 <= 128 << 10,
        "hot code in two 64 KiB windows: {hot:?}"
    );
    assert!(
        find(".init").is_none_or(|p| p.1 >= hot.1 && p.1 < hot.1 + hot.2),
        ".init inside the hot section: {secs:?}"
    );
    assert!(
        find(".plt").is_none_or(|p| p.1 >= hot.1 && p.1 < hot.1 + hot.2),
        ".plt inside the hot section: {secs:?}"
    );
    let Ok(o) = Command::new("nm").arg(&so).output() else {
        return;
    };
    let syms = String::from_utf8_lossy(&o.stdout);
    let addr = |want: &str| {
        syms.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let mangled = format!("{}{want}17h", want.len());
            (f.len() == 3 && (f[2] == want || f[2].contains(&mangled)))
                .then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
    };
    // (and the slab paths a refill and a flush run, by their current
    // names: `build.rs` lists them by mangled name, so a renamed function
    // leaves the section silently: session 21's `slab_alloc_slow_into`
    // and `new_slab_into` put a fork loop's shell 48 KiB over)
    for f in [
        "malloc",
        "free",
        "alloc_object_slow",
        "refill_sheaf",
        "slab_alloc_slow_into",
        "new_slab_into",
        "flush_sheaf",
        "realloc_impl",
    ] {
        let a = addr(f).unwrap_or_else(|| panic!("no symbol {f}"));
        assert!(
            (hot.1..hot.1 + hot.2).contains(&a),
            "{f} at {a:#x}, not in .text.malloc_hot {hot:?}"
        );
    }
    // Functions every process runs that were left in `.text` (found with
    // callgrind over the programs of `scripts/programs.sh`): each one
    // made the kernel map a 64 KiB folio of `.text` (a shell's subshell:
    // 332 KiB of the library's text resident, 140 after). By crate and
    // mangled name, where one is not inlined.
    for (krate, f) in [
        ("buddy", "13prep_compound17h"),
        ("pcp", "16alloc_lists_miss17h"),
        ("local_lock", "4fork8register17h"),
        ("local_lock", "6parent17h"),
        // (and, found with `perf record -e page-faults -d` in the main
        // shell of the fork loop: the library's text resident there 292
        // -> 164 KiB)
        ("slub", "14fill_map_check17h"),
        ("pcp", "8page_map17h"),
        ("buddy", "8page_map17h"),
        // (and, with `perf record -e page-faults` over `scripts/
        // programs.sh`'s git session: half of its git processes ran the
        // buddy's `taken_flagged` from `.text`, one more 64 KiB window
        // each; 192 -> 128 KiB of the library's text resident in them)
        ("buddy", "13taken_flagged17h"),
    ] {
        let a = syms.lines().find_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            (p.len() == 3 && p[2].contains(krate) && p[2].contains(f))
                .then(|| u64::from_str_radix(p[0], 16).unwrap())
        });
        if let Some(a) = a {
            assert!(
                (hot.1..hot.1 + hot.2).contains(&a),
                "{krate} {f} at {a:#x}, not in .text.malloc_hot {hot:?}"
            );
        }
    }
    if cfg!(debug_assertions) {
        return; // (a debug build's code is another shape)
    }
    // A small program's resident text of the library.
    let Ok(o) = Command::new("cat")
        .arg("/proc/self/smaps")
        .env("LD_PRELOAD", &so)
        .output()
    else {
        return;
    };
    let smaps = String::from_utf8_lossy(&o.stdout);
    let mut in_text = false;
    for l in smaps.lines() {
        if l.contains("libmm_malloc.so") {
            in_text = l.split_whitespace().nth(1) == Some("r-xp");
        } else if in_text && l.starts_with("Rss:") {
            let kib: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
            // (164 KiB when the section started mid-window, after `.init`;
            // 128 before the first tier fit one window)
            assert!(kib <= 64, "{kib} KiB of the library's text resident");
            return;
        }
    }
}

/// The Rss of the library's text in a `/proc/PID/smaps` dump, KiB.
fn text_rss(smaps: &str) -> Option<u64> {
    let mut in_text = false;
    for l in smaps.lines() {
        if l.contains("libmm_malloc.so") {
            in_text = l.split_whitespace().nth(1) == Some("r-xp");
        } else if in_text && l.starts_with("Rss:") {
            return l.split_whitespace().nth(1)?.parse().ok();
        }
    }
    None
}

/// The code a small process runs ([`build.rs`]'s first tier, `HOT`: the
/// entry points, the sheaf, slab, pcp and buddy slow paths, init, the
/// fork handlers, with `.init` and `.plt`) fits the hot section's first
/// 64 KiB fault-around window, and a shell that forks, runs command
/// substitutions and allocates a large block (the fork loop of
/// `scripts/programs.sh`, where mm-malloc's peak RSS was furthest above
/// glibc's) keeps that one window of the library's text resident: 128
/// KiB before (the code it ran spanned two windows: the library built at
/// `-O3` and a hot list taken from all programs, 122 KiB), in every
/// process that preloads it. The library's profile (`malloc`, size
/// optimised) only: a debug build is three times the size.
#[test]
fn a_shell_keeps_one_window_of_the_library_text() {
    let so = artifacts().join("libmm_malloc.so");
    let Some(secs) = sections_or_skip(&so) else {
        return;
    };
    if cfg!(debug_assertions) || !have("bash") {
        return;
    }
    let hot = section(&secs, ".text.malloc_hot").expect("a .text.malloc_hot section");
    let Ok(o) = Command::new("nm").arg(&so).output() else {
        return;
    };
    let syms = String::from_utf8_lossy(&o.stdout);
    let warm = syms
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == "__mm_malloc_warm")
                .then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .expect("the __mm_malloc_warm symbol (build.rs)");
    assert!(
        warm > hot.1 && warm - hot.1 <= 64 << 10,
        "the first tier ends {:#x} past the hot section's start {hot:?}",
        warm - hot.1
    );
    let script = "x=0; for i in $(seq 1 60); do y=$(echo $i | tr 0-9 a-j); \
         x=$((x + ${#y})); (: \"$y\") & [ $((i % 20)) -eq 0 ] && wait; done; wait; \
         a=$(head -c 300000 /dev/zero | tr '\\0' a); echo ${#a} $x; cat /proc/$$/smaps";
    let o = Command::new("bash")
        .args(["-c", script])
        .env("LD_PRELOAD", &so)
        .output()
        .expect("bash");
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("300000 "), "{}", &out[..out.len().min(200)]);
    let kib = text_rss(&out).expect("the library's text in the shell's smaps");
    assert!(
        kib <= 64,
        "{kib} KiB of the library's text resident in the shell (one 64 KiB window)"
    );
}

/// The `Rss` of `[stack]` in `cat /proc/self/smaps`, KiB (with the
/// library preloaded or not).
fn stack_rss_of_cat(so: Option<&Path>) -> Option<u64> {
    let mut c = Command::new("cat");
    c.arg("/proc/self/smaps");
    if let Some(so) = so {
        c.env("LD_PRELOAD", so);
    }
    let o = c.output().ok()?;
    let smaps = String::from_utf8_lossy(&o.stdout);
    let mut in_stack = false;
    for l in smaps.lines() {
        if l.contains(" rw-p ") || l.contains(" r--p ") || l.contains(" r-xp ") {
            in_stack = l.ends_with("[stack]");
        } else if in_stack && l.starts_with("Rss:") {
            return l.split_whitespace().nth(1)?.parse().ok();
        }
    }
    None
}

/// A cache is written in place into its zero `.bss` slot (its zero pages
/// given back after), not built on the stack and copied: the 25 KiB image
/// and its builder's frames kept 28 KiB more of every process's stack
/// resident (a small program's stack, release: 44 KiB, glibc 16; 20
/// after).
#[test]
fn caches_are_not_built_on_the_stack() {
    if cfg!(debug_assertions) {
        return; // (a debug build's frames are another size)
    }
    let so = artifacts().join("libmm_malloc.so");
    let (Some(glibc), Some(ours)) = (stack_rss_of_cat(None), stack_rss_of_cat(Some(&so))) else {
        eprintln!("no cat or smaps: skipped");
        return;
    };
    assert!(
        ours <= glibc + 12,
        "{ours} KiB of stack resident under the library (glibc: {glibc})"
    );
}

/// Compiles `tests/c/NAME.c` (plain C, no header) into the test's
/// directory.
fn cc_program(name: &str) -> Scratch {
    let exe = tmp(name);
    let mut c = Command::new("cc");
    c.args(["-O0", "-w"])
        .arg(crate_dir().join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&exe)
        .arg("-lpthread");
    let st = c.status().expect("cc");
    assert!(st.success(), "cc failed: {c:?}");
    exe
}

/// `MM_SLUB_DEBUG=Z` (issue #18): a byte written past a 32-byte block is
/// found in the red zone when the block is freed; the library aborts with
/// slub's report naming the cache and the block's address. Without the
/// variable (or with the red zones on another cache only) the program
/// runs to its end, as under glibc.
#[test]
fn slub_debug_red_zone_reports_an_overflow() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = cc_program("redzone");
    let go = |debug: Option<&str>| {
        let mut c = Command::new(&exe);
        c.env("LD_PRELOAD", &so).env("RUST_BACKTRACE", "0");
        if let Some(d) = debug {
            c.env("MM_SLUB_DEBUG", d);
        }
        let o = c.output().expect("run");
        (
            o.status,
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for quiet in [None, Some("Z,kmalloc-64"), Some("-")] {
        let (st, out, err) = go(quiet);
        assert!(
            st.success() && out.ends_with("done\n"),
            "{quiet:?}: {st} {out} {err}"
        );
    }
    for loud in ["Z", "FZPU", "z,kmalloc-32", "ZP,kmalloc-*"] {
        let (st, out, err) = go(Some(loud));
        let addr = out
            .strip_prefix("block ")
            .and_then(|s| s.lines().next())
            .unwrap_or_else(|| panic!("{loud}: {out}"));
        assert!(
            std::os::unix::process::ExitStatusExt::signal(&st) == Some(libc::SIGABRT),
            "{loud}: {st} {out} {err}"
        );
        assert!(!out.contains("done"), "{loud}: {out}");
        assert!(
            err.contains(&format!(
                "slub kmalloc-32: red zone overwritten in object {addr}"
            )),
            "{loud}: {err}"
        );
    }
}

/// The whole C suite with every debug flag on every cache
/// (`MM_SLUB_DEBUG=FZPU`), with other sheaf capacities
/// (`MM_SHEAF_CAPACITY`: none, and 7 objects) and with direct mappings
/// from 20,000 bytes on (`MM_MMAP_THRESHOLD`).
#[test]
fn c_suite_under_slub_debug_and_sheaf_settings() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = tmp("preload-debug");
    cc(&exe, &["-lpthread", "-ldl"]);
    for (k, v) in [
        ("MM_SLUB_DEBUG", "FZPU"),
        ("MM_SHEAF_CAPACITY", "0"),
        ("MM_SHEAF_CAPACITY", "7"),
        ("MM_MMAP_THRESHOLD", "20000"),
    ] {
        run(Command::new(&exe).env("LD_PRELOAD", &so).env(k, v));
    }
}

/// Threads whose first contact with the allocator is a `free` that fills
/// and flushes their CPU's sheaf (`tests/c/remote_free.c`): the per-thread
/// slot's TLS registration (glibc's nested `calloc`) must not recurse or
/// deadlock. Under a minute's timeout, 20 rounds of 4 threads.
#[test]
fn threads_that_only_free_first() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = cc_program("remote_free");
    for sheaves in ["128", "0", "4"] {
        let o = Command::new("timeout")
            .arg("120")
            .arg(&exe)
            .env("LD_PRELOAD", &so)
            .env("MM_SHEAF_CAPACITY", sheaves)
            .output()
            .expect("run");
        assert!(
            o.status.success() && o.stdout == b"ok\n",
            "{sheaves}: {} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A single-threaded process's `fork` takes no allocator lock (no other
/// thread can hold one): the handlers' lock and unlock writes copied the
/// pages of the buddy's and pcp's state in the child before `fork`
/// returned (and in the parent after it). The child's faults at `fork`'s
/// return stay near glibc's (measured in release: 31 before, 22 after,
/// glibc 17).
#[test]
fn single_threaded_fork_copies_few_pages() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = cc_program("fork_faults");
    let faults = |preload: bool| -> u64 {
        let mut c = Command::new(&exe);
        if preload {
            c.env("LD_PRELOAD", &so);
        }
        let o = c.output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    let (glibc, ours) = (faults(false), faults(true));
    // (measured over glibc's: release 14 before, 5 after; debug 23
    // before, 10 after, a debug build's code and frames being larger)
    let slack = if cfg!(debug_assertions) { 16 } else { 9 };
    assert!(
        ours <= glibc + slack,
        "a child took {ours} page faults before fork returned (glibc: {glibc})"
    );
}

/// A process of one thread keeps one set of caches whichever CPU it runs
/// on, and a child it forks starts on them: the object freed on CPU 0 is
/// the next one allocated on CPU 1, in the process and in a child forked
/// and moved to CPU 1 (the restartable sections index their records by
/// the rseq concurrency id, `mm_cid`, 0 for a process of one thread).
/// Before, each CPU had its records: a shell that migrated kept two sets
/// warm, and a child forked onto the other CPU refilled that CPU's empty
/// sheaves (page faults in every child of a fork loop).
#[test]
fn one_thread_keeps_one_cache_on_every_cpu() {
    if !have("cc") {
        eprintln!("no cc: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let exe = cc_program("one_slot");
    let o = Command::new(&exe)
        .env("LD_PRELOAD", &so)
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    if out.trim() == "skip" {
        eprintln!("fewer than 2 CPUs allowed or no mm_cid: skipped");
        return;
    }
    assert_eq!(
        out.trim(),
        "same same",
        "the object freed on CPU 0, then on CPU 1 and in a child"
    );
}

/// A process's start costs the library no system call of its own: its
/// constructor reads the `MM_*` settings from libc's `environ` (before,
/// it opened and read `/proc/self/environ` in every process: four system
/// calls, about 20 us of each `exec` in a fork loop). The settings still
/// apply (the `MM_SLUB_DEBUG` tests), and `/proc` stays the way for an
/// allocation before libc has set `environ` up.
#[test]
fn a_process_start_makes_no_system_call_of_its_own() {
    if !have("strace") {
        eprintln!("no strace: skipped");
        return;
    }
    let so = artifacts().join("libmm_malloc.so");
    let trace = tmp("start.trace");
    let o = Command::new("strace")
        .arg("-f")
        .arg("-o")
        .arg(&trace)
        .arg("-E")
        .arg(format!("LD_PRELOAD={}", so.display()))
        .arg("-E")
        .arg("MM_DECAY=1")
        .arg("true")
        .output()
        .expect("strace");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = std::fs::read_to_string(&*trace).unwrap();
    assert!(
        t.contains("libmm_malloc.so"),
        "the library was not loaded:\n{t}"
    );
    // After the main thread's set-up (`set_robust_list`, once every
    // library is mapped) come the constructors' calls and the program's:
    // `true` makes none but mprotect, munmap and its exit, as under glibc.
    let after = &t[t.rfind("set_robust_list(").expect("glibc's thread set-up")..];
    for bad in ["/proc/", "open", "read("] {
        let mine: Vec<&str> = after.lines().filter(|l| l.contains(bad)).collect();
        assert!(mine.is_empty(), "system calls after the loader: {mine:?}");
    }
}
