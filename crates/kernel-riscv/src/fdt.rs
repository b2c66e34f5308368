//! Just enough of a flattened device tree reader for boot: the number of
//! `cpu@N` nodes under `/cpus` and the first `/memory@...` range. (QEMU
//! passes the tree's address in `a1`; `virt` uses two address and two size
//! cells.)

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;

/// What boot needs from the tree.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootInfo {
    /// `cpu@N` nodes under `/cpus`.
    pub cpus: usize,
    /// RAM `(base, size)` from the first memory node's `reg`.
    pub memory: (usize, usize),
    /// The tree's own size in bytes (`totalsize`).
    pub fdt_size: usize,
}

fn be32(p: usize) -> u32 {
    // SAFETY: callers stay inside the tree (bounds checked by the walker).
    u32::from_be(unsafe { core::ptr::read_unaligned(p as *const u32) })
}

fn be64(p: usize) -> u64 {
    ((be32(p) as u64) << 32) | be32(p + 4) as u64
}

fn cstr_len(p: usize, max: usize) -> usize {
    let mut n = 0;
    // SAFETY: inside the tree, bounded by `max`.
    while n < max && unsafe { *((p + n) as *const u8) } != 0 {
        n += 1;
    }
    n
}

fn bytes(p: usize, n: usize) -> &'static [u8] {
    // SAFETY: inside the tree, which QEMU placed and nobody overwrites.
    unsafe { core::slice::from_raw_parts(p as *const u8, n) }
}

/// Parses the tree at `fdt`.
///
/// # Safety
///
/// `fdt` is the address QEMU passed in `a1` (a valid tree in RAM that is
/// never handed to an allocator).
pub unsafe fn parse(fdt: usize) -> Option<BootInfo> {
    if fdt == 0 || be32(fdt) != FDT_MAGIC {
        return None;
    }
    let total = be32(fdt + 4) as usize;
    let structs = fdt + be32(fdt + 8) as usize;
    let strings = fdt + be32(fdt + 12) as usize;
    let end = fdt + total;
    let mut info = BootInfo {
        fdt_size: total,
        ..BootInfo::default()
    };
    let mut p = structs;
    let mut depth = 0usize;
    let mut in_cpus = false;
    let mut in_memory = false;
    let mut got_memory = false;
    while p + 4 <= end {
        let tok = be32(p);
        p += 4;
        match tok {
            FDT_BEGIN_NODE => {
                let n = cstr_len(p, end - p);
                let name = bytes(p, n);
                p = (p + n + 1 + 3) & !3;
                depth += 1;
                if depth == 2 && name == b"cpus" {
                    in_cpus = true;
                } else if depth == 3 && in_cpus && name.starts_with(b"cpu@") {
                    info.cpus += 1;
                }
                in_memory = depth == 2 && name.starts_with(b"memory");
            }
            FDT_END_NODE => {
                if depth == 2 {
                    in_cpus = false;
                }
                in_memory = false;
                depth = depth.saturating_sub(1);
            }
            FDT_PROP => {
                let len = be32(p) as usize;
                let nameoff = be32(p + 4) as usize;
                let val = p + 8;
                let pname = bytes(strings + nameoff, cstr_len(strings + nameoff, 64));
                if in_memory && !got_memory && pname == b"reg" && len >= 16 {
                    info.memory = (be64(val) as usize, be64(val + 8) as usize);
                    got_memory = true;
                }
                p = (val + len + 3) & !3;
            }
            FDT_NOP => {}
            FDT_END => break,
            _ => return None,
        }
    }
    Some(info)
}
