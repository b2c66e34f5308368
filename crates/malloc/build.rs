//! Link options of the cdylib:
//!
//! - `-z nodelete`, so a `dlclose` of the library never unmaps the code and
//!   the heap that blocks handed out by it (and its `pthread_atfork`
//!   handlers) still refer to (what jemalloc and mimalloc do for their
//!   shared libraries);
//! - a linker script (`cold.ld`, written to `OUT_DIR`) that moves the code
//!   a C program never runs (std's backtrace printer: gimli, addr2line,
//!   rustc_demangle, miniz_oxide; panics and formatting) out of `.text`
//!   into `.text.cold`, after `.plt`: the code malloc and free run, with
//!   the PLT they call through, is then one contiguous range, and the
//!   kernel's fault-around (which maps the 16 pages around each text page
//!   touched, from the page cache) no longer maps the cold code into every
//!   process. Measured, a small C program under `LD_PRELOAD`: 448 -> 268
//!   KiB of the library's text resident (`/proc/self/smaps`), of 455 KiB.
//! - `-z pack-relative-relocs` (glibc's `DT_RELR`, 2.36 on; GNU ld 2.38
//!   on): the 1137 relative relocations took 27 KiB of `.rela.dyn` at the
//!   head of the read-only segment, `.rodata` then reached past its first
//!   64 KiB and every process had the segment resident whole (120 KiB; 64
//!   packed, `.eh_frame` alone beyond);
//! - `src/unwind_stubs.c`, the unwinder entry points std refers to as
//!   hidden stubs, linked into the cdylib only: it needs no
//!   `libgcc_s.so.1` (84 KiB of every process's RSS, and its loading);
//! - in the same script, the functions every process runs (the entry
//!   points, the slow paths of the sheaves, slabs, pcp and buddy, init,
//!   fork handlers: [`HOT`]) go to `.text.malloc_hot`, right after `.plt`
//!   and before the cold code: they were spread over the whole of `.text`
//!   (80 of its 232 KiB run by `tr`, 114 KiB by all the programs of
//!   `scripts/programs.sh` together, measured with callgrind), so
//!   fault-around mapped all of `.text` into every process. The section
//!   has two tiers: [`HOT`], what a small process runs (a shell's fork
//!   loop, `cat`: callgrind and `perf record -e page-faults -d`), first,
//!   within one 64 KiB window (with the library built by the `malloc`
//!   profile of the workspace's `Cargo.toml`, optimised for size: at
//!   `-O3` the code such a process ran was 84 KiB, two windows, 128 KiB
//!   resident in every process; 62 KiB now, 64 resident), then [`WARM`],
//!   what larger programs run besides. A name that no longer matches
//!   (renamed function) only costs resident text, never correctness.
//!   The section starts at a 64 KiB boundary (a fault-around window's)
//!   and holds the C runtime's `.init`/`.fini` (run by every process):
//!   it began 32 KiB into a window after `.init`, and its 125 KiB then
//!   touched three windows, 160 KiB resident (a shell under `LD_PRELOAD`;
//!   128 at the boundary). `tests/c_suite.rs` checks it stays within
//!   128 KiB: a hot function added beyond that costs every process a
//!   third window.

use std::env;
use std::fs;
use std::path::PathBuf;

/// The functions of [`HOT`], by crate: each `(crate, names)` pair
/// matches the legacy-mangled symbols `_ZN...<crate>...<len><name>17h...`
/// (`<name>` with its length prefix, as mangled; a closure's parent is
/// `<len><parent>*closure`). Taken from callgrind profiles of the
/// programs of `scripts/programs.sh` (every function of this library
/// that one of them ran).
const HOT: &[(&str, &[&str])] = &[
    (
        "mm_malloc",
        &[
            "10alloc_slow",
            "10build_slow",
            "10fork_child",
            "11fork_parent",
            "11write_image",
            "12dealloc_slow",
            "12fork_prepare",
            "12realloc_impl",
            "17alloc_object_slow",
            "16dealloc_unpushed",
            "16dealloc_untagged",
            "16dealloc_tag_slow",
            "20dealloc_unpushed_tag",
            "21publish_free_map_slow",
            "11malloc_slow",
            "4ctor",
            "4dtor",
            "4init",
            "5alloc",
            "6usable",
            "23alloc_aligned_or_enomem",
            "10cold_class",
            "6lender",
            "11object_size",
            "12ensure_built",
            "4name",
            "13alloc_aligned",
        ],
    ),
    (
        "slub",
        &[
            "12refill_sheaf",
            "13alloc_special",
            "13barn_get_full",
            "13barn_put_full",
            "15calculate_order",
            "16calculate_layout",
            "20slab_alloc_slow_into",
            "21calculate_layout_ctor",
            "3add",
            "13new_slab_into",
            "9init_mode",
            "9new_sheaf",
            "14fill_map_check",
            "13free_unpushed",
            "15calc_slab_order",
            "14barn_get_empty",
            "14sheaf_move_top",
            "20half_main_after_free",
            "17fit_private_sheaf",
            "22kmalloc_sheaf_capacity",
        ],
    ),
    (
        "pcp",
        &[
            "11alloc_block",
            "11alloc_buddy",
            "13alloc_private",
            "13register_fork",
            "14rmqueue_refill",
            "15alloc_below_low",
            "18free_pcppages_bulk",
            "6refill",
            "16alloc_lists_miss",
            "8page_map",
            "4free",
            "15recompute_sizes",
            "13free_to_buddy",
        ],
    ),
    (
        "buddy",
        &[
            "10decay_scan",
            "10free_range",
            "11alloc_block",
            "11free_direct",
            "11zone_extent",
            "12alloc_direct",
            "12owner_of_any",
            "13alloc_private",
            "13find_reserved",
            "13register_fork",
            "14alloc_slowpath",
            "14purge_over_cap",
            "17isolate_for_purge",
            "3new",
            "4grow",
            "5decay",
            "6rehash",
            "7rmqueue",
            "8grow_for",
            "9find_rest",
            "8page_map",
            "13set_page_tags",
            "13prep_compound",
            "13prep_compound*closure",
            "15overlaps_memmap",
            "4push",
            "14build_zonelist",
            "15node_set_memory",
            "10purge_pass",
            "17over_resident_cap",
            "13already_added",
            "15add_region_node",
            "17add_region_locked",
            "11setup_zones",
            "4find",
            "6insert",
            "10alloc_bulk",
            "14purge_isolated",
        ],
    ),
    (
        "local_lock",
        &[
            "10on_prepare",
            "11map_aligned",
            "12my_slot_slow",
            "15single_threaded",
            "3map",
            "4drop",
            "4init",
            "5child",
            "6parent",
            "8register",
            "5purge",
            "5unmap",
            "7prepare",
            "8on_child",
            "9on_parent",
            "9page_size",
            "7install",
            "14os_random_seed",
        ],
    ),
    (
        "portable_atomic",
        &[
            "20_atomic_load_vmovdqa",
            "32_atomic_store_vmovdqa_non_seqcst",
            "4init",
            "7_detect",
        ],
    ),
    ("std", &["7destroy", "15initialize_with"]),
    ("core", &["9call_once"]),
];

/// The rest of the code that a program of `scripts/programs.sh` ran, after
/// [`HOT`] in `.text.malloc_hot`: what a process that neither frees
/// objects on another CPU than their sheaf's nor forks with threads nor
/// purges runs only in larger programs (sheaf flushes, slab frees, the
/// pcp's batch frees, the fork locks, the debug and aligned paths). [`HOT`]
/// is what a small process runs (the fork loop's shell, `cat`: callgrind),
/// and fits the section's first 64 KiB fault-around window
/// (`tests/c_suite.rs` checks a shell's resident text): those processes
/// map one window of the library's text, not two.
const WARM: &[(&str, &[&str])] = &[
    (
        "mm_malloc",
        &[
            "19dealloc_object_slow",
            "18dealloc_cache_slow",
            "11usable_slow",
        ],
    ),
    (
        "slub",
        &[
            "11flush_sheaf",
            "12discard_slab",
            "12do_slab_free",
            "14slab_free_slow",
            "15put_cpu_partial",
            "16free_to_pcs_miss",
            "16free_to_pcs_slow",
            "17unfreeze_partials",
            "18free_to_pcs_relock",
            "19alloc_from_pcs_slow",
            "21alloc_from_pcs_relock",
            "6remove",
            "9put_empty",
            "9fork_lock",
            "11fork_unlock",
        ],
    ),
    (
        "pcp",
        &[
            "11after_batch",
            "16after_large_free",
            "17free_batch_unlock",
            "16alloc_lists_slow",
            "16alloc_lists_slow*closure",
        ],
    ),
    (
        "buddy",
        &[
            "10decay_cold",
            "10purge_free",
            "12fork_prepare",
            "12remap_direct",
            "13taken_flagged",
            "15clear_pair_slow",
            "16after_large_free",
            "6detect",
            "11fork_unlock",
            "14try_free_pages",
            "5purge",
            "19free_bulk_keep_zero",
            "15free_bulk_inner",
            "11fork_parent",
            "10fork_child",
        ],
    ),
    ("local_lock", &[]),
    ("core", &["11is_some_and"]),
];

/// More of [`HOT`]: slub's `this_cpu` module whole (the slow paths of
/// the restartable sequences, found with a copy of the library whose
/// other `.text` was overwritten with `int3`), the C entry points
/// (unmangled) and std's and core's functions, v0-mangled (`_RN...`,
/// matched without their crate hashes).
const HOT_EXACT: &[&str] = &[
    ".text._ZN4slub5cache8this_cpu*14alloc_rcs_slow17h*",
    ".text._ZN4slub5cache8this_cpu*13free_rcs_slow17h*",
    ".text._ZN4slub5cache8this_cpu*9take_from17h*",
    ".text._ZN4slub5cache8this_cpu*7install17h*",
    ".text.malloc",
    ".text.free",
    ".text.calloc",
    ".text.realloc",
    ".text.posix_memalign",
    ".text.__posix_memalign",
    ".text.aligned_alloc",
    ".text.memalign",
    // (glibc's aliases, which the linker may fold with the entry points)
    ".text.__libc_malloc",
    ".text.__libc_free",
    ".text.__libc_calloc",
    ".text.__libc_realloc",
    ".text.__libc_memalign",
    ".text.__udivti3",
    ".text._RN*3std3sys3env4unix6getenv*",
    ".text._RN*3std3env7__var_os*",
    ".text._RN*10linux_like8register*",
    ".text._RN*15ARGV_INIT_ARRAY12init_wrapper*",
    ".text._RN*5xsave7__xgetbv*",
    ".text._RN*4CStr19from_bytes_with_nul*",
];

/// [`WARM`]'s exact names: the rest of slub's `this_cpu` module, the C
/// entry points a small program does not call.
const WARM_EXACT: &[&str] = &[
    ".text._ZN4slub5cache8this_cpu*",
    ".text.reallocarray",
    ".text.malloc_usable_size",
];

/// The script: the hot functions ([`HOT`], [`HOT_EXACT`]) to
/// `.text.malloc_hot`, then every input section whose (mangled) name names
/// the cold crates or functions to `.text.cold`, both inserted after
/// `.plt` (GNU ld and lld both take `INSERT` scripts next to their default
/// layout; an input section goes to the first statement that matches it).
fn script() -> String {
    // The hot code first in the text segment (with the C runtime's
    // `.text`, run at load and exit, and `.plt`, through which every call
    // into libc goes), the cold code after it, then `.text`: the page
    // cache holds the file in large folios (64 KiB and more, aligned in
    // the file) and a fault maps the folio's pages around it, so hot code
    // spread through `.text` (or `.plt` at its end) kept all of it
    // resident. glibc's `pthread_atfork` stub comes from
    // `libc_nonshared.a`, in its `.text`.
    let mut s = String::from(
        "SECTIONS {\n  .text.malloc_hot : ALIGN(0x10000) {\n    KEEP(*(SORT_NONE(.init)))\n    KEEP(*(SORT_NONE(.fini)))\n    *crt*.o(.text .text.*)\n    *libc_nonshared.a:*(.text .text.*)\n",
    );
    let tier = |s: &mut String, by_crate: &[(&str, &[&str])], exact: &[&str]| {
        for (krate, names) in by_crate {
            for n in *names {
                let tail = if n.ends_with("closure") { "*" } else { "17h*" };
                *s += &format!("    *(.text.*_ZN*{krate}*{n}{tail})\n");
            }
        }
        for e in exact {
            // (LLVM names a cold function's section `.text.unlikely.NAME`)
            let name = e.trim_start_matches(".text.");
            *s += &format!("    *(.text.{name} .text.unlikely.{name})\n");
        }
    };
    tier(&mut s, HOT, HOT_EXACT);
    // (`__rseq_failure`: the restartable sequences' abort handlers, each
    // after its signature, which the kernel reads)
    s += "    *(__rseq_failure)\n    *(.plt)\n";
    // (where [`WARM`] begins: `tests/c_suite.rs` checks the first tier's size)
    s += "    HIDDEN(__mm_malloc_warm = .);\n";
    tier(&mut s, WARM, WARM_EXACT);
    s += "  }\n";
    s += COLD;
    s += "} INSERT BEFORE .text;\n";
    s += UNWIND;
    s += BIG_BSS;
    s
}

/// The library's large zero statics (the pages' heap, the caches' slots,
/// the Rust arena: all page-aligned or page-sized,
/// each touched a few pages at a time) in an output section after `.bss`:
/// among them, the small statics (locks, flags, the fork table) that
/// every process writes were spread over five pages between them
/// (`.data`'s two, then `.bss`'s start, after the heap, after a build
/// scratch since removed); together, `.data` starting a page (`.data.head`: it began
/// 2 KiB into one), they are two.
const BIG_BSS: &str = "\
SECTIONS {
  .data.head : ALIGN(0x1000) { __mm_malloc_data_head = .; }
} INSERT BEFORE .data;
SECTIONS {
  .bss.big (NOLOAD) : {
    *(.bss.*5pages10PAGES_CELL*)
    *(.bss.*6caches6CACHES*)
    *(.bss.*5arena5BYTES*)
  }
} INSERT AFTER .bss;
";

/// The unwinding tables (`.eh_frame`, its index `.eh_frame_hdr`, the
/// landing pads' `.gcc_except_table`), read only when a frame of the
/// library is unwound (never, but for a thread cancelled inside it), in a
/// read-only segment of their own after the code: at the end of the
/// first one, after `.rodata`, they were inside its first 64 KiB, which
/// fault-around maps whole into every process (the dynamic symbols and
/// `.rodata` are read at start).
const UNWIND: &str = "\
SECTIONS {
  .gcc_except_table : { *(.gcc_except_table .gcc_except_table.*) }
  .eh_frame_hdr : { *(.eh_frame_hdr) }
  .eh_frame : { KEEP(*(.eh_frame)) }
} INSERT AFTER .text;
";

/// The cold part of the script.
const COLD: &str = "\
  .text.cold : {
    *(.text.*gimli* .text.*addr2line* .text.*rustc_demangle* .text.*miniz_oxide*)
    *(.text.*backtrace* .text.*symbolize* .text.*panicking*)
    *(.text.*fmt* .text.*Debug* .text.*Display*)
  }
";

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("cold.ld");
        fs::write(&out, script()).expect("write cold.ld");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", out.display());
        if env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
            println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
        }
        unwind_stubs();
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// `src/unwind_stubs.c` compiled (with the C compiler that links Rust on
/// Linux) and passed to the cdylib's link only: the shared library then
/// needs no `libgcc_s.so.1` (see the file). Without a C compiler, or for
/// another C library than glibc, the library links libgcc_s as before.
fn unwind_stubs() {
    println!("cargo:rerun-if-changed=src/unwind_stubs.c");
    if env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu") {
        return;
    }
    let obj = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("unwind_stubs.o");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = std::process::Command::new(cc)
        .args(["-c", "-O2", "-fPIC", "-o"])
        .arg(&obj)
        .arg("src/unwind_stubs.c")
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        println!("cargo:rustc-cdylib-link-arg={}", obj.display());
    } else {
        println!(
            "cargo:warning=no C compiler for src/unwind_stubs.c: libmm_malloc.so needs libgcc_s"
        );
    }
}
