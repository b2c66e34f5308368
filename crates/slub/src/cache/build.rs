//! Building a cache: `kmem_cache_create` as a `const fn` ([`KmemCache::new`],
//! for statics), in place over zero memory ([`KmemCache::new_in_zeroed`],
//! for a cache in a zero `.bss` slot), and fallible at run time
//! ([`KmemCache::create`], [`KmemCache::create_with`]), from one list of
//! the header's fields.

use super::*;

/// The header's fields and initial values (every field but the per-CPU
/// records and the nodes), handed to `$out!` after `$pre`: the struct
/// literal of the constructors ([`build_cache!`]) and the in-place writes
/// of [`KmemCache::new_in_zeroed`] take the one list, so a field cannot be
/// left out of either (the literal fails to compile without it).
macro_rules! cache_header {
    ($out:ident!($($pre:tt)*), $name:expr, $lay:expr, $flags:expr, $g:expr, $source:expr) => {
        $out!($($pre)*;
            name: $name,
            id: CoreAtomicUsize::new(0),
            kidx: 0,
            random: CoreAtomicUsize::new(0),
            shuffle: CoreAtomicUsize::new(0),
            random_seq: CoreAtomicUsize::new(0),
            sheaf_capacity: 0,
            lay: $lay,
            flags: $flags,
            geometry: $g,
            source: $source,
            mode: AtomicU8::new(Mode::Unknown as u8),
            dispatch: AtomicU8::new(Fast::Special as u8),
            fast_area: [const { core::sync::atomic::AtomicIsize::new(0) }; 3],
            defrag_ratio: CoreAtomicUsize::new(DEFAULT_REMOTE_NODE_DEFRAG_RATIO),
            node_rng: CoreAtomicUsize::new(0),
            fcheck: FreeCheck::new(),
            map_tag: core::sync::atomic::AtomicU8::new(0),
            mcheck: pagemap::MapCheck::new(),
            slab_lo: CoreAtomicUsize::new(usize::MAX),
            slab_hi: CoreAtomicUsize::new(0),
            slab_ref: CoreAtomicUsize::new(0),
            slab_mask: CoreAtomicUsize::new(usize::MAX),
            spill_stats: StatCells::new(),
            ctor: None,
            idle: AtomicU8::new(0),
        )
    };
}

/// The struct literal: the header's fields ([`cache_header!`]) and the
/// per-CPU records and nodes.
macro_rules! cache_literal {
    ($cpu:expr, $fast:expr, $nodes:expr; $($f:ident: $v:expr,)*) => {
        KmemCache {
            cpu: $cpu,
            $($f: $v,)*
            node0: CachePadded::new(KmemCacheNode::new()),
            fast: $fast,
            nodes: $nodes,
        }
    };
}

/// Writes the header's fields ([`cache_header!`]) through `$p` (a
/// `*mut KmemCache`), dropping nothing.
#[cfg(not(loom))]
macro_rules! cache_header_in_place {
    ($p:expr; $($f:ident: $v:expr,)*) => {
        $(
            // SAFETY: the caller's pointer is valid for writes of the
            // cache; the field held zero bytes, nothing to drop.
            unsafe { core::ptr::addr_of_mut!((*$p).$f).write($v) };
        )*
    };
}

/// Builds the struct (shared by the const and the loom constructors).
macro_rules! build_cache {
    ($name:expr, $lay:expr, $flags:expr, $g:expr, $source:expr, $cpu:expr, $fast:expr, $nodes:expr) => {
        cache_header!(
            cache_literal!($cpu, $fast, $nodes),
            $name,
            $lay,
            $flags,
            $g,
            $source
        )
    };
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// A cache (`kmem_cache_create`), usable in a `static`: objects of
    /// `size` bytes aligned to `align`, slabs sized for `geometry`.
    ///
    /// # Panics
    ///
    /// On an invalid size or alignment (at compile time in a `static`).
    #[cfg(not(loom))]
    pub const fn new(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        geometry: Geometry,
        source: S,
        platform: P,
    ) -> Self {
        let lay = Self::const_layout(size, align, flags, &geometry);
        build_cache!(
            name,
            lay,
            flags,
            geometry,
            source,
            LocalLock::new(platform),
            recs::CpuRecs::new(),
            [const { CachePadded::new(KmemCacheNode::new()) }; MAX_NUMNODES - 1]
        )
    }

    /// [`new`](Self::new)'s layout, or its panic.
    #[cfg(not(loom))]
    const fn const_layout(
        size: usize,
        align: usize,
        flags: SlabFlags,
        geometry: &Geometry,
    ) -> CacheLayout {
        match calculate_layout(size, align, flags, geometry) {
            Ok(l) => l,
            Err(CacheError::ZeroSize) => panic!("KmemCache::new: object size 0"),
            Err(CacheError::BadAlign(_)) => {
                panic!("KmemCache::new: alignment not a power of two up to the page size")
            }
            Err(CacheError::TooLarge(_)) => panic!("KmemCache::new: object too large for a slab"),
            Err(CacheError::BadPageSize(_)) => panic!("KmemCache::new: bad page size"),
            Err(CacheError::TooManyNodes(_)) => panic!("KmemCache::new: too many nodes"),
        }
    }

    /// [`new`](Self::new), written in place over zeroed memory: only the
    /// header is written (and the platform, and node 0), never the rest
    /// of the per-CPU records and nodes, whose initial state is all zero
    /// bytes (`new_in_zeroed_is_new` compares the two byte for byte). A
    /// cache kept in a zero `.bss` slot (mm-malloc's) then has only the
    /// pages it uses written: the header's and node 0's (the first CPUs'
    /// records share them, see the field order), not 6 pages of zeros,
    /// nor a 23 KiB image built elsewhere and copied (mm-malloc's scratch
    /// cost every process 6 pages, and `tr` 300k of its 800k
    /// instructions, measured with callgrind). Node 0 is written although
    /// it is zero, so that its page (the first CPUs' sheaf records) is
    /// faulted in once, by this write, rather than read first (mapping
    /// the shared zero page) and then written (a second fault).
    ///
    /// # Safety
    ///
    /// `slot` is valid for writes of `Self`, aligned, and all its bytes
    /// are zero; nothing else accesses it during the call.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    #[cfg(not(loom))]
    #[allow(clippy::too_many_arguments, reason = "`new`'s arguments and the slot")]
    pub unsafe fn new_in_zeroed(
        slot: *mut Self,
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        geometry: Geometry,
        source: S,
        platform: P,
    ) {
        let lay = Self::const_layout(size, align, flags, &geometry);
        cache_header!(
            cache_header_in_place!(slot),
            name,
            lay,
            flags,
            geometry,
            source
        );
        // SAFETY: the caller's slot; its lock's slots are zero, which is
        // `CpuLocked::INIT` (all zero fields) unlocked (`ZeroInit`).
        unsafe { LocalLock::init_in_zeroed(core::ptr::addr_of_mut!((*slot).cpu), platform) };
        // SAFETY: the caller's slot.
        unsafe {
            core::ptr::addr_of_mut!((*slot).node0).write(CachePadded::new(KmemCacheNode::new()))
        };
    }

    /// A cache sized from the source's page size and the platform's CPU
    /// count (`slub_max_order` 3); an invalid size or alignment is an error.
    pub fn create(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        source: S,
        platform: P,
    ) -> Result<Self, CacheError> {
        let g = Geometry {
            page_size: source.page_size(),
            nr_cpus: platform.nr_cpus().min(N),
            max_order: 3,
            page_max_order: source.max_order().get(),
        };
        Self::create_with(name, size, align, flags, g, source, platform)
    }

    /// [`create`](Self::create) with an explicit geometry (e.g. another
    /// `slub_max_order`). Both add the global default flags
    /// ([`set_default_flags`](crate::layout::set_default_flags), the
    /// `slub_debug` of this crate).
    pub fn create_with(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        g: Geometry,
        source: S,
        platform: P,
    ) -> Result<Self, CacheError> {
        let flags = flags.union(crate::layout::default_flags());
        let lay = calculate_layout(size, align, flags, &g)?;
        let nodes = source.nr_node_ids();
        if nodes == 0 || nodes > MAX_NUMNODES {
            return Err(CacheError::TooManyNodes(nodes));
        }
        Ok(build_cache!(
            name,
            lay,
            flags,
            g,
            source,
            LocalLock::new_with(platform, |_| CpuLocked::INIT),
            recs::CpuRecs::new(),
            core::array::from_fn(|_| CachePadded::new(KmemCacheNode::new()))
        ))
    }
}
