//! NUMA topology as the platforms report it: which node each CPU belongs
//! to and how far nodes are from each other (the kernel's `nr_node_ids`,
//! `cpu_to_node()`, `node_distance()`), and the fallback order a node's
//! allocations follow (`build_zonelists()`'s node order).
//!
//! A [`Topology`] is a plain `Copy` value, built in `const` context (a
//! kernel's static, a test's machine) or read from the OS
//! ([`crate::os::system_topology`] on Linux: `/sys/devices/system/node`).
//! Platforms answer through [`Platform::cpu_to_node`](crate::Platform::cpu_to_node)
//! and its siblings; the default is one node, which is what every
//! single-socket machine is.
//!
//! ```
//! use local_lock::topology::{Topology, LOCAL_DISTANCE};
//!
//! // Two sockets of two CPUs; node 1 is 21 away (a SLIT entry).
//! let t = Topology::uniform(2, 2).with_distance(0, 1, 21);
//! assert_eq!(t.nr_nodes(), 2);
//! assert_eq!(t.cpu_to_node(3), 1);
//! assert_eq!(t.node_distance(1, 0), 21);
//! assert_eq!(t.node_distance(1, 1), LOCAL_DISTANCE);
//! let (order, n) = t.nodes_by_distance(1);
//! assert_eq!(&order[..n], &[1, 0]);
//! ```

/// Distance of a node to itself (`LOCAL_DISTANCE`, the ACPI SLIT value).
pub const LOCAL_DISTANCE: u8 = 10;
/// Default distance between two nodes (`REMOTE_DISTANCE`).
pub const REMOTE_DISTANCE: u8 = 20;
/// Most nodes a [`Topology`] describes (`MAX_NUMNODES` with
/// `CONFIG_NODES_SHIFT=4`).
pub const MAX_NUMNODES: usize = 16;
/// CPUs a [`Topology`] maps one by one; higher CPU ids are on node 0
/// (as `cpu_to_node()` of a CPU that is not possible).
pub const MAX_MAPPED_CPUS: usize = 256;

/// CPU-to-node map and node distance table (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    nr_nodes: u8,
    cpu_node: [u8; MAX_MAPPED_CPUS],
    distance: [[u8; MAX_NUMNODES]; MAX_NUMNODES],
}

impl Default for Topology {
    fn default() -> Self {
        Self::flat()
    }
}

impl Topology {
    /// One node holding every CPU (a UMA machine, and the default of every
    /// platform).
    ///
    /// ```
    /// let t = local_lock::topology::Topology::flat();
    /// assert_eq!((t.nr_nodes(), t.cpu_to_node(7)), (1, 0));
    /// ```
    pub const fn flat() -> Self {
        let mut distance = [[REMOTE_DISTANCE; MAX_NUMNODES]; MAX_NUMNODES];
        let mut i = 0;
        while i < MAX_NUMNODES {
            distance[i][i] = LOCAL_DISTANCE;
            i += 1;
        }
        Topology {
            nr_nodes: 1,
            cpu_node: [0; MAX_MAPPED_CPUS],
            distance,
        }
    }

    /// `nr_nodes` nodes of `cpus_per_node` consecutive CPUs each (CPU `c`
    /// on node `c / cpus_per_node`, CPUs past the last node on the last
    /// node), every pair of nodes [`REMOTE_DISTANCE`] apart. `nr_nodes` is
    /// clamped to `1..=MAX_NUMNODES` and `cpus_per_node` to at least 1.
    ///
    /// ```
    /// let t = local_lock::topology::Topology::uniform(4, 2);
    /// assert_eq!([t.cpu_to_node(0), t.cpu_to_node(5), t.cpu_to_node(99)], [0, 2, 3]);
    /// ```
    pub const fn uniform(nr_nodes: usize, cpus_per_node: usize) -> Self {
        let nodes = if nr_nodes == 0 {
            1
        } else if nr_nodes > MAX_NUMNODES {
            MAX_NUMNODES
        } else {
            nr_nodes
        };
        let per = if cpus_per_node == 0 { 1 } else { cpus_per_node };
        let mut t = Self::flat();
        t.nr_nodes = nodes as u8;
        let mut c = 0;
        while c < MAX_MAPPED_CPUS {
            let n = c / per;
            t.cpu_node[c] = if n < nodes {
                n as u8
            } else {
                (nodes - 1) as u8
            };
            c += 1;
        }
        t
    }

    /// This topology with nodes `a` and `b` `d` apart, both ways (a SLIT
    /// is symmetric on every machine Linux supports); `a == b`, nodes out
    /// of range and `d` below [`LOCAL_DISTANCE`] (not a valid SLIT entry)
    /// leave it unchanged.
    pub const fn with_distance(mut self, a: usize, b: usize, d: u8) -> Self {
        if a != b && a < MAX_NUMNODES && b < MAX_NUMNODES && d >= LOCAL_DISTANCE {
            self.distance[a][b] = d;
            self.distance[b][a] = d;
        }
        self
    }

    /// Puts `cpu` on `node` (ignored for CPUs past [`MAX_MAPPED_CPUS`] and
    /// nodes past [`MAX_NUMNODES`]); the node count grows to include
    /// `node`.
    ///
    /// ```
    /// let mut t = local_lock::topology::Topology::flat();
    /// t.set_cpu_node(3, 2);
    /// assert_eq!((t.nr_nodes(), t.cpu_to_node(3)), (3, 2));
    /// ```
    pub fn set_cpu_node(&mut self, cpu: usize, node: usize) {
        if cpu < MAX_MAPPED_CPUS && node < MAX_NUMNODES {
            self.cpu_node[cpu] = node as u8;
            self.nr_nodes = self.nr_nodes.max(node as u8 + 1);
        }
    }

    /// Sets the node count (`nr_node_ids`: the highest node id + 1, which
    /// may include memory-only or offline nodes), clamped to
    /// `1..=MAX_NUMNODES`.
    pub fn set_nr_nodes(&mut self, n: usize) {
        self.nr_nodes = n.clamp(1, MAX_NUMNODES) as u8;
    }

    /// `nr_node_ids`.
    #[inline]
    pub const fn nr_nodes(&self) -> usize {
        self.nr_nodes as usize
    }

    /// `cpu_to_node(cpu)` (node 0 for CPUs past the map).
    #[inline]
    pub const fn cpu_to_node(&self, cpu: usize) -> usize {
        if cpu < MAX_MAPPED_CPUS {
            self.cpu_node[cpu] as usize
        } else {
            0
        }
    }

    /// `node_distance(a, b)` ([`REMOTE_DISTANCE`] for nodes out of range,
    /// [`LOCAL_DISTANCE`] for a node to itself).
    #[inline]
    pub const fn node_distance(&self, a: usize, b: usize) -> u8 {
        if a == b {
            LOCAL_DISTANCE
        } else if a < MAX_NUMNODES && b < MAX_NUMNODES {
            self.distance[a][b]
        } else {
            REMOTE_DISTANCE
        }
    }

    /// The order in which node `from`'s allocations try the nodes
    /// (`build_zonelists()`: `from` first, then by increasing distance,
    /// ties by node id; the kernel's `find_next_best_node()` also spreads
    /// ties by a load count and penalises nodes with CPUs, which matters
    /// for interleaving many nodes and is left out). Returns the order and
    /// how many entries of it are used ([`nr_nodes`](Self::nr_nodes)).
    pub fn nodes_by_distance(&self, from: usize) -> ([u8; MAX_NUMNODES], usize) {
        let n = self.nr_nodes();
        let mut order = [0u8; MAX_NUMNODES];
        for (i, o) in order.iter_mut().enumerate().take(n) {
            *o = i as u8;
        }
        let from = from.min(n - 1);
        // Insertion sort by (distance from `from`, node id): n <= 16.
        let key = |node: u8| (self.node_distance(from, node as usize), node);
        for i in 1..n {
            let mut j = i;
            while j > 0 && key(order[j]) < key(order[j - 1]) {
                order.swap(j, j - 1);
                j -= 1;
            }
        }
        (order, n)
    }
}

/// Parses a Linux CPU or node list (`0-3,8-11`, `0`, `0,2`; the format of
/// `/sys/devices/system/node/online` and `nodeN/cpulist`), calling `f` for
/// each id. Returns `false` on a malformed list (ids seen before the error
/// were passed to `f`). Trailing whitespace is ignored.
///
/// ```
/// let mut v = Vec::new();
/// assert!(local_lock::topology::parse_id_list(b"0-2,8\n", |i| v.push(i)));
/// assert_eq!(v, [0, 1, 2, 8]);
/// assert!(!local_lock::topology::parse_id_list(b"3-1", |_| {}));
/// ```
pub fn parse_id_list(s: &[u8], mut f: impl FnMut(usize)) -> bool {
    let s = trim_ascii(s);
    if s.is_empty() {
        return true;
    }
    for part in s.split(|&b| b == b',') {
        let mut ends = part.splitn(2, |&b| b == b'-');
        let Some(lo) = ends.next().and_then(parse_usize) else {
            return false;
        };
        let hi = match ends.next() {
            Some(h) => match parse_usize(h) {
                Some(h) if h >= lo => h,
                _ => return false,
            },
            None => lo,
        };
        for i in lo..=hi {
            f(i);
        }
    }
    true
}

/// Parses one line of `nodeN/distance` (`10 21 ...`, one entry per node in
/// id order), calling `f(node, distance)` for each. Returns `false` on a
/// malformed line.
///
/// ```
/// let mut v = Vec::new();
/// assert!(local_lock::topology::parse_distances(b"10 21\n", |n, d| v.push((n, d))));
/// assert_eq!(v, [(0, 10), (1, 21)]);
/// ```
pub fn parse_distances(s: &[u8], mut f: impl FnMut(usize, u8)) -> bool {
    for (i, w) in trim_ascii(s)
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .enumerate()
    {
        match parse_usize(w).and_then(|d| u8::try_from(d).ok()) {
            Some(d) => f(i, d),
            None => return false,
        }
    }
    true
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn parse_usize(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 9 {
        return None;
    }
    let mut v = 0usize;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as usize;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn flat_is_one_node_at_local_distance() {
        let t = Topology::flat();
        assert_eq!(t.nr_nodes(), 1);
        assert_eq!(t.cpu_to_node(0), 0);
        assert_eq!(t.cpu_to_node(MAX_MAPPED_CPUS + 5), 0);
        assert_eq!(t.node_distance(0, 0), LOCAL_DISTANCE);
        assert_eq!(t.nodes_by_distance(0), ([0; MAX_NUMNODES], 1));
        assert_eq!(Topology::default(), t);
    }

    #[test]
    fn zonelist_order_is_by_distance_then_id() {
        // A ring of 4 nodes: neighbours 20, the opposite node 30.
        let t = Topology::uniform(4, 1)
            .with_distance(0, 2, 30)
            .with_distance(1, 3, 30);
        let (o, n) = t.nodes_by_distance(0);
        assert_eq!(&o[..n], &[0, 1, 3, 2]);
        let (o, n) = t.nodes_by_distance(3);
        assert_eq!(&o[..n], &[3, 0, 2, 1]);
        // Out-of-range `from` is the last node.
        assert_eq!(t.nodes_by_distance(99).0[0], 3);
    }

    #[test]
    fn bad_inputs_are_clamped_or_ignored() {
        let t = Topology::uniform(0, 0);
        assert_eq!(t.nr_nodes(), 1);
        let t = Topology::uniform(99, 1);
        assert_eq!(t.nr_nodes(), MAX_NUMNODES);
        let t2 = t
            .with_distance(1, 1, 50)
            .with_distance(0, 99, 50)
            .with_distance(0, 1, 3);
        assert_eq!(t2, t);
        let mut t = Topology::flat();
        t.set_cpu_node(MAX_MAPPED_CPUS, 3);
        t.set_cpu_node(0, MAX_NUMNODES);
        assert_eq!(t, Topology::flat());
        t.set_nr_nodes(0);
        assert_eq!(t.nr_nodes(), 1);
        assert_eq!(t.node_distance(0, MAX_NUMNODES + 1), REMOTE_DISTANCE);
    }

    #[test]
    fn id_lists_and_distances_parse_as_sysfs_writes_them() {
        let mut v = Vec::new();
        assert!(parse_id_list(b"0-3,8-11\n", |i| v.push(i)));
        assert_eq!(v, [0, 1, 2, 3, 8, 9, 10, 11]);
        assert!(parse_id_list(b"\n", |_| panic!("empty list")));
        for bad in [&b"1-"[..], b"a", b"2-1", b",", b"0-1,x", b"99999999999"] {
            assert!(!parse_id_list(bad, |_| {}), "{bad:?}");
        }
        let mut d = Vec::new();
        assert!(parse_distances(b"10 21 31\n", |n, x| d.push((n, x))));
        assert_eq!(d, [(0, 10), (1, 21), (2, 31)]);
        assert!(!parse_distances(b"10 300", |_, _| {}));
        assert!(!parse_distances(b"10 x", |_, _| {}));
    }
}
