//! Passes the linker script (the kernel is linked at 0x8000_0000, where
//! QEMU's `virt` machine jumps with `-bios none`).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
    println!("cargo:rerun-if-changed={dir}/link.ld");
    println!("cargo:rerun-if-changed=build.rs");
}
