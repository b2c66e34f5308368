//! Just enough of a flattened device tree reader for boot: the `cpu@N`
//! nodes under `/cpus`, every `/memory@...` range, and the NUMA topology
//! when the tree has one (the bindings of
//! `Documentation/devicetree/bindings/numa.txt`: a `numa-node-id` on each
//! memory and cpu node, and `/distance-map`'s `distance-matrix` of
//! `(from, to, distance)` triplets, as QEMU's `-numa node,...` and
//! `-numa dist,...` produce them). (QEMU passes the tree's address in
//! `a1`; `virt` uses two address and two size cells.)

use local_lock::topology::Topology;

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;

/// Memory ranges kept from the tree (more are reported and ignored).
pub const MAX_RANGES: usize = 8;

/// Harts whose CLINT the tree may name (ids beyond park at boot).
pub const MAX_CPUS: usize = crate::arch::MAX_HARTS;

/// CLINT nodes kept from the tree.
const MAX_CLINTS: usize = 8;

/// One RAM range of a memory node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ram {
    /// First byte.
    pub base: usize,
    /// Bytes.
    pub size: usize,
    /// Its node's `numa-node-id` (0 without one).
    pub node: usize,
}

/// What boot needs from the tree.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootInfo {
    /// `cpu@N` nodes under `/cpus`.
    pub cpus: usize,
    /// RAM ranges of the memory nodes' `reg`, in tree order.
    pub memory: [Ram; MAX_RANGES],
    /// Entries of `memory` in use.
    pub nr_memory: usize,
    /// Ranges beyond [`MAX_RANGES`] (ignored).
    pub dropped_memory: usize,
    /// CPU (hart id, a cpu node's `reg`) to node, node distances, node
    /// count: from `numa-node-id` and `/distance-map`; one node without.
    pub topology: Topology,
    /// Whether the tree carried any `numa-node-id`.
    pub numa: bool,
    /// Each hart's CLINT: its base and the hart's index in it (`virt` has
    /// one CLINT per socket, and one socket per NUMA node), from the
    /// `clint@...` nodes' `interrupts-extended` (pairs of a hart's
    /// interrupt-controller phandle and an interrupt number). `None` for a
    /// hart no CLINT names.
    pub clint: [Option<(usize, usize)>; MAX_CPUS],
    /// The tree's own size in bytes (`totalsize`).
    pub fdt_size: usize,
}

impl BootInfo {
    /// The RAM ranges found.
    pub fn ram(&self) -> &[Ram] {
        &self.memory[..self.nr_memory]
    }
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
    let mut in_cpu = false;
    let mut in_memory = false;
    let mut in_distance_map = false;
    // The current node's properties, committed at its end (a node's
    // properties come in any order).
    let mut node_id: Option<usize> = None;
    let mut cpu_reg: Option<usize> = None;
    let mut mem_reg = (0usize, 0usize);
    let mut max_node = 0usize;
    let mut in_soc = false;
    let mut in_clint = false;
    let mut in_cpu_intc = false;
    // Interrupt-controller phandle -> hart, and each CLINT's `reg` base
    // and `interrupts-extended` (resolved after the walk: the tree may
    // name a phandle before its node).
    let mut intc: [(u32, usize); MAX_CPUS] = [(0, usize::MAX); MAX_CPUS];
    let mut nr_intc = 0;
    let mut clints: [(usize, usize, usize); MAX_CLINTS] = [(0, 0, 0); MAX_CLINTS];
    let mut nr_clints = 0;
    let mut clint_base = 0usize;
    let mut clint_irqs = (0usize, 0usize);
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
                    in_cpu = true;
                }
                if depth == 2 {
                    in_memory = name.starts_with(b"memory");
                    in_distance_map = name.starts_with(b"distance-map");
                    in_soc = name == b"soc";
                }
                in_clint = depth == 3 && in_soc && name.starts_with(b"clint@");
                in_cpu_intc = depth == 4 && in_cpu && name == b"interrupt-controller";
                if in_clint {
                    clint_base = 0;
                    clint_irqs = (0, 0);
                }
                if depth <= 3 {
                    // A node whose properties matter (subnodes' do not:
                    // a cpu's interrupt-controller comes after its own).
                    node_id = None;
                    cpu_reg = None;
                    mem_reg = (0, 0);
                }
            }
            FDT_END_NODE => {
                if in_cpu && depth == 3 {
                    if let (Some(hart), Some(node)) = (cpu_reg, node_id) {
                        info.topology.set_cpu_node(hart, node);
                        max_node = max_node.max(node);
                    }
                    in_cpu = false;
                }
                if in_memory && depth == 2 {
                    let node = node_id.unwrap_or(0);
                    max_node = max_node.max(node);
                    // `reg` may hold several (base, size) pairs.
                    let (val, len) = mem_reg;
                    let mut off = 0;
                    while off + 16 <= len {
                        let r = Ram {
                            base: be64(val + off) as usize,
                            size: be64(val + off + 8) as usize,
                            node,
                        };
                        if info.nr_memory < MAX_RANGES {
                            info.memory[info.nr_memory] = r;
                            info.nr_memory += 1;
                        } else {
                            info.dropped_memory += 1;
                        }
                        off += 16;
                    }
                    in_memory = false;
                }
                if in_clint && depth == 3 {
                    if nr_clints < MAX_CLINTS {
                        clints[nr_clints] = (clint_base, clint_irqs.0, clint_irqs.1);
                        nr_clints += 1;
                    }
                    in_clint = false;
                }
                in_cpu_intc = false;
                if depth == 2 {
                    in_cpus = false;
                    in_distance_map = false;
                    in_soc = false;
                }
                depth = depth.saturating_sub(1);
            }
            FDT_PROP => {
                let len = be32(p) as usize;
                let nameoff = be32(p + 4) as usize;
                let val = p + 8;
                let pname = bytes(strings + nameoff, cstr_len(strings + nameoff, 64));
                if pname == b"numa-node-id" && len >= 4 && (in_memory || (in_cpu && depth == 3)) {
                    node_id = Some(be32(val) as usize);
                    info.numa = true;
                } else if in_memory && depth == 2 && pname == b"reg" {
                    mem_reg = (val, len);
                } else if in_cpu && depth == 3 && pname == b"reg" && len >= 4 {
                    cpu_reg = Some(be32(val) as usize);
                } else if in_cpu_intc && pname == b"phandle" && len >= 4 {
                    if let (Some(hart), true) = (cpu_reg, nr_intc < MAX_CPUS) {
                        intc[nr_intc] = (be32(val), hart);
                        nr_intc += 1;
                    }
                } else if in_clint && pname == b"reg" && len >= 16 {
                    clint_base = be64(val) as usize;
                } else if in_clint && pname == b"interrupts-extended" {
                    clint_irqs = (val, len);
                } else if in_distance_map && pname == b"distance-matrix" {
                    let mut off = 0;
                    while off + 12 <= len {
                        let (a, b) = (be32(val + off) as usize, be32(val + off + 4) as usize);
                        let d = be32(val + off + 8).min(255) as u8;
                        info.topology = info.topology.with_distance(a, b, d);
                        off += 12;
                    }
                }
                p = (val + len + 3) & !3;
            }
            FDT_NOP => {}
            FDT_END => break,
            _ => return None,
        }
    }
    info.topology.set_nr_nodes(max_node + 1);
    // Each CLINT's harts, in the order of their machine software
    // interrupts (number 3) in `interrupts-extended`.
    for &(base, val, len) in &clints[..nr_clints] {
        let mut index = 0;
        let mut off = 0;
        while off + 8 <= len {
            let (ph, irq) = (be32(val + off), be32(val + off + 4));
            if irq == 3 {
                if let Some(&(_, hart)) = intc[..nr_intc].iter().find(|e| e.0 == ph) {
                    if hart < MAX_CPUS {
                        info.clint[hart] = Some((base, index));
                    }
                }
                index += 1;
            }
            off += 8;
        }
    }
    Some(info)
}
