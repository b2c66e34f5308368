//! The OS layer of the std front-ends (feature `std`, unix): anonymous
//! memory from `mmap`, aligned by over-mapping and trimming, and given back
//! with `munmap` (or, keeping the range, `madvise(MADV_DONTNEED)`).
//!
//! Buddy's `GlobalBuddy` (its arena and large direct mappings) and
//! percpu-bitmap's `MmapSource` (its chunks) both get their memory here.
//! Nothing in this module calls a Rust allocator, so it can back a
//! `#[global_allocator]`; failures are returned (null), never reported, so
//! each caller keeps its own messages.
//!
//! The page-size cache uses `core`'s atomics even under `cfg(loom)`: it is
//! OS state, not allocator state the model checker should explore.

use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The OS page size (`sysconf(_SC_PAGESIZE)`, 4096 if that fails), cached
/// after the first call.
pub fn page_size() -> usize {
    static P: AtomicUsize = AtomicUsize::new(0);
    let p = P.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let v = if v > 0 { v as usize } else { 4096 };
    P.store(v, Ordering::Relaxed);
    v
}

/// `mmap` of private anonymous memory (`MAP_PRIVATE | MAP_ANONYMOUS |
/// extra`) with protection `prot`; null on failure.
///
/// # Safety
///
/// With `MAP_FIXED` in `extra`, `addr..addr+len` must be a range the caller
/// owns (it is replaced).
pub unsafe fn map(addr: *mut u8, len: usize, prot: i32, extra: i32) -> *mut u8 {
    // SAFETY: caller's contract.
    let p = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

/// `munmap(ptr, len)`; the result is ignored (as every caller here did:
/// unmapping a range of one's own mapping only fails on bad arguments).
///
/// # Safety
///
/// `ptr..ptr+len` is page aligned, mapped by the caller (from [`map`] or
/// [`map_aligned`]) and no longer used.
pub unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: caller's contract.
    unsafe { libc::munmap(ptr.cast(), len) };
}

/// `madvise(ptr, len, MADV_DONTNEED)`: gives the pages of a private
/// anonymous mapping back to the OS, keeping the range mapped; afterwards
/// they read as zero (fresh zero pages on the next touch). False if the OS
/// refused.
///
/// # Safety
///
/// `ptr..ptr+len` is page aligned, inside a private anonymous mapping of
/// the caller, and its contents are no longer needed.
pub unsafe fn purge(ptr: *mut u8, len: usize) -> bool {
    // SAFETY: caller's contract.
    unsafe { libc::madvise(ptr.cast(), len, libc::MADV_DONTNEED) == 0 }
}

/// `len` bytes of fresh private anonymous memory aligned to `align` (a power
/// of two), with protection `prot` and the extra flags `extra` (e.g.
/// `MAP_NORESERVE`); null on failure (or if the sizes overflow).
///
/// For an alignment above the OS page size it maps `len + align - page`
/// bytes and unmaps the head before the first aligned address and the tail
/// after `len` bytes: the kernel places mappings at page granularity only.
/// `len` should be a multiple of the page size (the whole of the last page
/// is kept otherwise).
pub fn map_aligned(len: usize, align: usize, prot: i32, extra: i32) -> *mut u8 {
    let page = page_size();
    if align <= page {
        // SAFETY: a fresh mapping anywhere (no MAP_FIXED).
        return unsafe { map(ptr::null_mut(), len, prot, extra & !libc::MAP_FIXED) };
    }
    let Some(over) = len.checked_add(align - page) else {
        return ptr::null_mut();
    };
    // SAFETY: a fresh mapping anywhere (no MAP_FIXED).
    let p = unsafe { map(ptr::null_mut(), over, prot, extra & !libc::MAP_FIXED) };
    if p.is_null() {
        return p;
    }
    let a = p as usize;
    let head = ((a + align - 1) & !(align - 1)) - a;
    let tail = over - head - len;
    // SAFETY: trimming our own fresh mapping (page-aligned pieces: `p`,
    // `align` and `over` are multiples of the page size).
    unsafe {
        if head > 0 {
            unmap(p, head);
        }
        if tail > 0 {
            unmap(p.add(head + len), tail);
        }
    }
    p.wrapping_add(head)
}

/// Reads a small file into `buf` with `open`/`read` (no allocation, so
/// it may run inside a global allocator); the bytes read, or `None`.
fn read_small(path: &core::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: reads at most `buf.len()` bytes into our buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our fd, closed once.
    unsafe { libc::close(fd) };
    usize::try_from(n).ok()
}

/// `/sys/devices/system/node/node<N>/<file>` as a C string in `buf`.
fn node_path<'a>(buf: &'a mut [u8; 64], node: usize, file: &str) -> &'a core::ffi::CStr {
    let mut w = 0;
    let mut put = |b: &[u8]| {
        buf[w..w + b.len()].copy_from_slice(b);
        w += b.len();
    };
    put(b"/sys/devices/system/node/node");
    let mut digits = [0u8; 4];
    let mut k = digits.len();
    let mut v = node;
    loop {
        k -= 1;
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 || k == 0 {
            break;
        }
    }
    put(&digits[k..]);
    put(b"/");
    put(file.as_bytes());
    put(b"\0");
    match core::ffi::CStr::from_bytes_until_nul(&buf[..w]) {
        Ok(c) => c,
        Err(_) => c"",
    }
}

/// The machine's NUMA topology from `/sys/devices/system/node` (Linux):
/// the `online` nodes, each node's `cpulist` and `distance` row (whose
/// columns are the online nodes in id order). A machine without that directory (another OS, a
/// container hiding it) reads as one node ([`Topology::flat`]). Read once
/// and cached; allocation-free, so a global allocator may call it.
///
/// ```
/// # #[cfg(not(miri))] {
/// let t = local_lock::os::system_topology();
/// assert!(t.nr_nodes() >= 1);
/// assert_eq!(t.node_distance(0, 0), local_lock::topology::LOCAL_DISTANCE);
/// # }
/// ```
///
/// [`Topology::flat`]: crate::topology::Topology::flat
pub fn system_topology() -> &'static crate::topology::Topology {
    static T: spin::Once<crate::topology::Topology> = spin::Once::new();
    T.call_once(read_system_topology)
}

/// [`system_topology`] without the cache.
pub fn read_system_topology() -> crate::topology::Topology {
    use crate::topology::{parse_distances, parse_id_list, Topology, MAX_NUMNODES};
    let mut t = Topology::flat();
    let mut buf = [0u8; 4096];
    let mut nodes = [false; MAX_NUMNODES];
    let mut highest = None;
    let Some(n) = read_small(c"/sys/devices/system/node/online", &mut buf) else {
        return t;
    };
    if !parse_id_list(&buf[..n], |i| {
        if i < MAX_NUMNODES {
            nodes[i] = true;
            highest = Some(highest.map_or(i, |h: usize| h.max(i)));
        }
    }) {
        return Topology::flat();
    }
    let Some(h) = highest else { return t };
    t.set_nr_nodes(h + 1);
    let mut online = [0usize; MAX_NUMNODES];
    let mut nr_online = 0;
    for (node, _) in nodes.iter().enumerate().filter(|(_, &on)| on) {
        online[nr_online] = node;
        nr_online += 1;
    }
    let mut path = [0u8; 64];
    for &node in &online[..nr_online] {
        if let Some(n) = read_small(node_path(&mut path, node, "cpulist"), &mut buf) {
            parse_id_list(&buf[..n], |cpu| t.set_cpu_node(cpu, node));
        }
        if let Some(n) = read_small(node_path(&mut path, node, "distance"), &mut buf) {
            let mut row = [0u8; MAX_NUMNODES];
            let mut cols = 0;
            if parse_distances(&buf[..n], |j, d| {
                if j < nr_online {
                    row[j] = d;
                    cols = cols.max(j + 1);
                }
            }) {
                for (j, &d) in row.iter().enumerate().take(cols) {
                    t = t.with_distance(node, online[j], d);
                }
            }
        }
    }
    t
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot open /sys")]
    fn system_topology_agrees_with_sysfs_and_the_std_platforms() {
        use crate::Platform;
        let t = read_system_topology();
        assert_eq!(*system_topology(), t);
        assert!(t.nr_nodes() >= 1);
        assert_eq!(t.node_distance(0, 0), crate::topology::LOCAL_DISTANCE);
        // Every CPU this process may run on is on a node sysfs lists, and
        // its `cpulist` names it.
        let mut buf = [0u8; 4096];
        let mut path = [0u8; 64];
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0);
        let node = t.cpu_to_node(cpu);
        assert!(node < t.nr_nodes());
        if let Some(n) = read_small(node_path(&mut path, node, "cpulist"), &mut buf) {
            let mut found = false;
            assert!(crate::topology::parse_id_list(&buf[..n], |c| found |= c == cpu));
            assert!(found, "CPU {cpu} not in node {node}'s cpulist");
        }
        assert_eq!(
            node_path(&mut path, 12, "distance").to_bytes(),
            b"/sys/devices/system/node/node12/distance"
        );
        let p = crate::std_platform::StdCpu::new();
        assert_eq!(p.nr_node_ids(), t.nr_nodes());
        assert_eq!(p.cpu_to_node(cpu), node);
        assert!(p.numa_node_id() < t.nr_nodes());
        assert_eq!(p.node_distance(0, 0), crate::topology::LOCAL_DISTANCE);
        let q = crate::std_platform::PerThread::new();
        assert_eq!(q.nr_node_ids(), t.nr_nodes());
        assert!(q.numa_node_id() < t.nr_nodes());
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        let p = page_size();
        assert!(p.is_power_of_two() && p >= 4096);
        assert_eq!(page_size(), p);
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri's mmap cannot unmap part of a mapping (the trim)")]
    fn map_aligned_aligns_and_is_writable() {
        let page = page_size();
        for align in [page, 2 * page, 1 << 21] {
            let len = 3 * page;
            let p = map_aligned(len, align, libc::PROT_READ | libc::PROT_WRITE, 0);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0);
            // SAFETY: `p..p+len` is our fresh read-write mapping.
            unsafe {
                p.write(1);
                p.add(len - 1).write(2);
                assert_eq!(p.read() + p.add(len - 1).read(), 3);
                unmap(p, len);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri has no madvise")]
    fn purge_gives_back_zero_pages() {
        let page = page_size();
        let len = 4 * page;
        let p = map_aligned(len, page, libc::PROT_READ | libc::PROT_WRITE, 0);
        assert!(!p.is_null());
        // SAFETY: `p..p+len` is our fresh read-write private mapping.
        unsafe {
            p.write_bytes(0xa5, len);
            assert!(purge(p, len));
            assert!(core::slice::from_raw_parts(p, len).iter().all(|&b| b == 0));
            unmap(p, len);
        }
    }

    #[test]
    fn map_aligned_fails_on_overflow() {
        let p = map_aligned(usize::MAX - 4095, 1 << 21, libc::PROT_READ, 0);
        assert!(p.is_null());
    }
}

/// The process's resident bytes (`/proc/self/statm`, second field, times
/// the page size), `None` where there is no such file. Allocation-free (a
/// stack buffer), so an allocator's tests and reports may call it from
/// anywhere.
///
/// ```
/// # #[cfg(not(miri))] {
/// if let Some(rss) = local_lock::os::resident_bytes() {
///     assert!(rss > 0);
/// }
/// # }
/// ```
pub fn resident_bytes() -> Option<usize> {
    let mut buf = [0u8; 128];
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(c"/proc/self/statm".as_ptr(), libc::O_RDONLY) };
    if fd < 0 {
        return None;
    }
    // SAFETY: reads at most `buf.len()` bytes into our buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our fd, closed once.
    unsafe { libc::close(fd) };
    let text = core::str::from_utf8(buf.get(..usize::try_from(n).ok()?)?).ok()?;
    let pages: usize = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}
