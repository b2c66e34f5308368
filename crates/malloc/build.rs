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

use std::env;
use std::fs;
use std::path::PathBuf;

/// The script: every input section whose (mangled) name names the cold
/// crates or functions goes to `.text.cold`, inserted after `.plt` (GNU ld
/// and lld both take `INSERT` scripts next to their default layout).
const COLD_LD: &str = "\
SECTIONS {
  .text.cold : {
    *(.text.*gimli* .text.*addr2line* .text.*rustc_demangle* .text.*miniz_oxide*)
    *(.text.*backtrace* .text.*symbolize* .text.*panicking*)
    *(.text.*fmt* .text.*Debug* .text.*Display*)
  }
} INSERT AFTER .plt;
";

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("cold.ld");
        fs::write(&out, COLD_LD).expect("write cold.ld");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", out.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
