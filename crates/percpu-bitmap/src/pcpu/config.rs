//! Configuration and geometry: [`Config`] (the kernel's `pcpu_alloc_info`)
//! and the unit and slot layout derived from it (`pcpu_setup_first_chunk`'s
//! checks, `__pcpu_size_to_slot`).

use local_lock::bits::fls;

use crate::error::PcpuError;
use crate::types::{MAX_UNIT_SIZE, MIN_UNIT_SIZE, PAGE_SIZE, SLOT_BASE_SHIFT};

/// Upper bound of `nr_slots` (a 1 GiB unit needs 32).
pub(crate) const MAX_SLOTS: usize = 40;
const _: () = assert!(MAX_SLOTS <= 64, "the non-empty slot mask is a u64");

/// Most units (CPUs) a chunk may have.
pub const MAX_UNITS: usize = 1 << 16;

/// `__pcpu_size_to_slot`: `max(fls(size) - SLOT_BASE_SHIFT + 2, 1)`.
#[inline(always)]
pub(crate) const fn size_to_slot_raw(size: usize) -> usize {
    let s = fls(size) + 2;
    if s > SLOT_BASE_SHIFT + 1 {
        s - SLOT_BASE_SHIFT
    } else {
        1
    }
}

/// How to build a [`PcpuAllocator`](crate::PcpuAllocator) (the kernel's `pcpu_alloc_info`).
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator};
///
/// fn wake_balance_worker() {}
/// // Two groups (NUMA nodes) of two 64 KiB units; a first chunk with 128
/// // static bytes, no reserved region and 16 KiB for dynamic areas.
/// let cfg = Config::new(64 << 10)
///     .units(4)
///     .groups(2, 1 << 20)
///     .first_chunk(128, 0, 16 << 10)
///     .balance_hook(wake_balance_worker);
/// assert_eq!((cfg.nr_units, cfg.atom_size, cfg.static_size), (4, 1 << 20, 128));
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), cfg).unwrap();
/// assert_eq!(a.nr_units(), 4);
/// assert_eq!(a.static_area().map(|(_, size)| size), Some(128));
/// // Each group's span is rounded up to the atom: group 1 starts 1 MiB on.
/// assert_eq!(a.unit_offset(2), 1 << 20);
/// assert_eq!(Config::default().unit_size, 64 << 10);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Bytes per unit: a multiple of `PAGE_SIZE` (= the block size), at
    /// least [`MIN_UNIT_SIZE`], at most [`MAX_UNIT_SIZE`].
    pub unit_size: usize,
    /// Units per chunk, one per possible CPU; 0 = `platform.nr_cpus()`.
    pub nr_units: usize,
    /// Units per group (NUMA node); 0 = one group. Group `g` holds units
    /// `g * units_per_group ..`, laid out back to back.
    pub units_per_group: usize,
    /// Each group's span is rounded up to this (a power of two, multiple of
    /// `PAGE_SIZE`; the kernel's `atom_size`); 0 = `PAGE_SIZE`.
    pub atom_size: usize,
    /// Static region of the first chunk (the kernel's static per-CPU
    /// variables); rounded up to 4 bytes.
    pub static_size: usize,
    /// Reserved region of the first chunk, served only to reserved
    /// requests; rounded up to 4 bytes. 0 = no reserved chunk.
    pub reserved_size: usize,
    /// Dynamic region of the first chunk; rounded up to 4 bytes. The first
    /// chunk exists iff `static_size + reserved_size + dyn_size > 0`, and
    /// then its dynamic region must not be empty.
    pub dyn_size: usize,
    /// Called (outside every allocator lock) when balance work is wanted,
    /// like `pcpu_schedule_balance_work`; a kernel queues a work item that
    /// calls [`PcpuAllocator::balance`](crate::PcpuAllocator::balance). The request is also recorded (see
    /// [`PcpuAllocator::balance_requested`](crate::PcpuAllocator::balance_requested)).
    pub on_balance_request: Option<fn()>,
}

impl Config {
    /// Units of `unit_size` bytes, one per platform CPU, no first chunk.
    pub const fn new(unit_size: usize) -> Self {
        Config {
            unit_size,
            nr_units: 0,
            units_per_group: 0,
            atom_size: 0,
            static_size: 0,
            reserved_size: 0,
            dyn_size: 0,
            on_balance_request: None,
        }
    }

    /// A fixed number of units.
    pub const fn units(mut self, nr_units: usize) -> Self {
        self.nr_units = nr_units;
        self
    }

    /// Groups of `units_per_group` units, each group's span rounded up to
    /// `atom_size`.
    pub const fn groups(mut self, units_per_group: usize, atom_size: usize) -> Self {
        self.units_per_group = units_per_group;
        self.atom_size = atom_size;
        self
    }

    /// A first chunk with static, reserved and dynamic regions.
    pub const fn first_chunk(
        mut self,
        static_size: usize,
        reserved_size: usize,
        dyn_size: usize,
    ) -> Self {
        self.static_size = static_size;
        self.reserved_size = reserved_size;
        self.dyn_size = dyn_size;
        self
    }

    /// Groups the units by NUMA node, as the kernel's
    /// `pcpu_build_alloc_info` groups CPUs at `LOCAL_DISTANCE`: one group
    /// per node, each group's span rounded up to `atom_size` (the kernel's
    /// embedding allocates each group from its node's memory; here the
    /// chunk source backs each unit from its CPU's node, see
    /// [`ChunkSource::populate_node`](crate::ChunkSource::populate_node)).
    /// Units are CPUs (`unit_offset(cpu)`), so the topology's CPUs
    /// `0..nr_units` must come node by node, the same number per node
    /// (`Topology::uniform`, or any numbering that a kernel's CPU order
    /// makes so); otherwise this returns
    /// [`PcpuError::BadConfig`](crate::PcpuError::BadConfig).
    ///
    /// ```
    /// use local_lock::topology::Topology;
    /// use percpu_bitmap::Config;
    /// let t = Topology::uniform(2, 4);
    /// let c = Config::new(64 << 10).units(8).groups_by_node(&t, 2 << 20).unwrap();
    /// assert_eq!((c.units_per_group, c.atom_size), (4, 2 << 20));
    /// assert!(Config::new(64 << 10).units(6).groups_by_node(&t, 4096).is_err());
    /// ```
    pub fn groups_by_node(
        self,
        topology: &local_lock::topology::Topology,
        atom_size: usize,
    ) -> Result<Self, PcpuError> {
        let n = self.nr_units;
        if n == 0 {
            return Err(PcpuError::BadConfig("groups_by_node: set units first"));
        }
        // The first node change gives the group size; every group must be
        // that size and hold one node.
        let per = (1..n)
            .find(|&c| topology.cpu_to_node(c) != topology.cpu_to_node(c - 1))
            .unwrap_or(n);
        if !n.is_multiple_of(per)
            || (0..n).any(|c| topology.cpu_to_node(c) != topology.cpu_to_node(c - c % per))
            || (per..n)
                .step_by(per)
                .any(|c| topology.cpu_to_node(c) == topology.cpu_to_node(c - per))
        {
            return Err(PcpuError::BadConfig(
                "groups_by_node: CPUs must come node by node, the same number per node",
            ));
        }
        Ok(self.groups(per, atom_size))
    }

    /// The balance hook.
    pub const fn balance_hook(mut self, hook: fn()) -> Self {
        self.on_balance_request = Some(hook);
        self
    }
}

impl Default for Config {
    /// 64 KiB units, one per platform CPU, no first chunk.
    fn default() -> Self {
        Config::new(64 << 10)
    }
}

/// Derived layout of units and slots (immutable after construction).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub unit_size: usize,
    pub unit_pages: usize,
    pub nr_units: usize,
    pub units_per_group: usize,
    pub group_stride: usize,
    /// Bytes of one chunk's reservation (all groups).
    pub span: usize,
    /// Alignment of a chunk's unit 0: `next_power_of_two(unit_size)`.
    pub chunk_align: usize,
    /// `log2(chunk_align)`: lookup key = `addr >> key_shift`.
    pub key_shift: u32,
    pub sidelined_slot: usize,
    pub free_slot: usize,
    pub to_depopulate_slot: usize,
    pub nr_slots: usize,
}

impl Geometry {
    pub const fn new(
        unit_size: usize,
        nr_units: usize,
        units_per_group: usize,
        atom_size: usize,
    ) -> Result<Self, PcpuError> {
        if !unit_size.is_multiple_of(PAGE_SIZE)
            || unit_size < MIN_UNIT_SIZE
            || unit_size > MAX_UNIT_SIZE
        {
            return Err(PcpuError::BadConfig(
                "unit_size must be a multiple of PAGE_SIZE in [MIN_UNIT_SIZE, MAX_UNIT_SIZE]",
            ));
        }
        if nr_units == 0 || nr_units > MAX_UNITS {
            return Err(PcpuError::BadConfig("nr_units must be in 1..=MAX_UNITS"));
        }
        let upg = if units_per_group == 0 || units_per_group > nr_units {
            nr_units
        } else {
            units_per_group
        };
        let atom = if atom_size == 0 { PAGE_SIZE } else { atom_size };
        if !atom.is_power_of_two() || atom < PAGE_SIZE {
            return Err(PcpuError::BadConfig(
                "atom_size must be a power of two >= PAGE_SIZE",
            ));
        }
        let Some(group_bytes) = upg.checked_mul(unit_size) else {
            return Err(PcpuError::BadConfig("group too large"));
        };
        let Some(group_stride) = group_bytes.checked_next_multiple_of(atom) else {
            return Err(PcpuError::BadConfig("group too large"));
        };
        let nr_groups = nr_units.div_ceil(upg);
        let last_units = nr_units - (nr_groups - 1) * upg;
        let Some(before) = (nr_groups - 1).checked_mul(group_stride) else {
            return Err(PcpuError::BadConfig("chunk too large"));
        };
        let Some(span) = before.checked_add(last_units * unit_size) else {
            return Err(PcpuError::BadConfig("chunk too large"));
        };
        let chunk_align = unit_size.next_power_of_two();
        let raw = size_to_slot_raw(unit_size);
        Ok(Geometry {
            unit_size,
            unit_pages: unit_size / PAGE_SIZE,
            nr_units,
            units_per_group: upg,
            group_stride,
            span,
            chunk_align,
            key_shift: chunk_align.trailing_zeros(),
            sidelined_slot: raw + 1,
            free_slot: raw + 2,
            to_depopulate_slot: raw + 3,
            nr_slots: raw + 4,
        })
    }

    /// `pcpu_unit_offsets[cpu]`: offset of unit `cpu` from unit 0.
    #[inline(always)]
    pub fn unit_offset(&self, cpu: usize) -> usize {
        if cpu < self.units_per_group {
            cpu * self.unit_size
        } else {
            (cpu / self.units_per_group) * self.group_stride
                + (cpu % self.units_per_group) * self.unit_size
        }
    }

    /// Pages of one chunk reservation.
    #[inline]
    pub fn span_pages(&self) -> usize {
        self.span / PAGE_SIZE
    }
}
