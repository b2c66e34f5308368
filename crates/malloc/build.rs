//! Link options of the cdylib: `-z nodelete`, so a `dlclose` of the library
//! never unmaps the code and the heap that blocks handed out by it (and
//! its `pthread_atfork` handlers) still refer to (what jemalloc and
//! mimalloc do for their shared libraries).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
