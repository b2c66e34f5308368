//! The library's environment settings (`MM_STATS`, `MM_SLUB_DEBUG`,
//! `MM_SHEAF_CAPACITY`, `MM_DECAY`, `MM_MMAP_THRESHOLD`), read once at init without allocating:
//! from libc's `environ` once it is set, else from `/proc/self/environ`
//! through a stack buffer (the first allocation may come before libc has
//! set `environ` up: the loader's, during relocation). The constructor
//! finds `environ` set: no system call (the `/proc` read was four, about
//! 20 us of every process's start).

/// The longest value kept (longer ones are cut).
pub const VALUE_MAX: usize = 255;

/// A variable's value, copied out of the environment.
#[derive(Clone, Copy)]
pub struct Value {
    b: [u8; VALUE_MAX],
    n: usize,
}

impl Value {
    /// The value's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }

    fn from(v: &[u8]) -> Value {
        let mut b = [0; VALUE_MAX];
        let n = v.len().min(VALUE_MAX);
        b[..n].copy_from_slice(&v[..n]);
        Value { b, n }
    }
}

/// The variables the library reads.
pub const NAMES: [&str; 5] = [
    "MM_STATS",
    "MM_SLUB_DEBUG",
    "MM_SHEAF_CAPACITY",
    "MM_DECAY",
    "MM_MMAP_THRESHOLD",
];

/// The values of [`NAMES`] (`None`: unset).
pub type Settings = [Option<Value>; NAMES.len()];

/// Reads [`NAMES`] from the environment (nothing is allocated).
pub fn read() -> Settings {
    let mut s: Settings = [None; NAMES.len()];
    if !read_environ(&mut s) {
        read_proc(&mut s);
    }
    s
}

extern "C" {
    /// libc's environment (`environ(7)`), null until libc has set it up.
    static environ: *const *const core::ffi::c_char;
}

/// The entries of libc's `environ`; `false` while it is not set up yet.
fn read_environ(s: &mut Settings) -> bool {
    // SAFETY: libc's variable, read once; null or a null-terminated array
    // of NUL-terminated strings (nothing modifies it during init).
    let mut e = unsafe { core::ptr::addr_of!(environ).read_volatile() };
    if e.is_null() {
        return false;
    }
    // SAFETY: as above.
    unsafe {
        while !(*e).is_null() {
            let c = core::ffi::CStr::from_ptr(*e).to_bytes();
            if c.starts_with(b"MM_") {
                entry(s, c);
            }
            e = e.add(1);
        }
    }
    true
}

/// Records `NAME=value` if `NAME` is one of [`NAMES`].
fn entry(s: &mut Settings, e: &[u8]) {
    for (k, name) in NAMES.iter().enumerate() {
        let n = name.len();
        if e.len() > n && &e[..n] == name.as_bytes() && e[n] == b'=' {
            s[k] = Some(Value::from(&e[n + 1..]));
        }
    }
}

/// `/proc/self/environ`, in 4 KiB reads; entries longer than the buffer
/// are skipped (none of ours is). `false` if it cannot be read.
fn read_proc(s: &mut Settings) -> bool {
    // SAFETY: a NUL-terminated path; open allocates nothing.
    let fd = unsafe {
        libc::open(
            c"/proc/self/environ".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    // `buf[..have]` holds the start of an entry not yet complete.
    let mut have = 0;
    let mut skipping = false;
    loop {
        // SAFETY: reads into our own buffer, within its bounds.
        let r = unsafe { libc::read(fd, buf[have..].as_mut_ptr().cast(), buf.len() - have) };
        if r < 0 && crate::errno() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            break;
        }
        let end = have + r as usize;
        let mut start = 0;
        while let Some(z) = buf[start..end].iter().position(|&b| b == 0) {
            if !skipping {
                entry(s, &buf[start..start + z]);
            }
            skipping = false;
            start += z + 1;
        }
        if start == 0 && end == buf.len() {
            // An entry longer than the buffer: not one of ours.
            skipping = true;
            have = 0;
        } else {
            buf.copy_within(start..end, 0);
            have = end - start;
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    true
}

/// A decimal number, if the value is one.
pub fn number(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 12 {
        return None;
    }
    let mut n = 0usize;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + usize::from(b - b'0');
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_numbers() {
        let mut s: Settings = [None; NAMES.len()];
        entry(&mut s, b"MM_SLUB_DEBUG=Z,kmalloc-64");
        entry(&mut s, b"MM_STATSX=1");
        entry(&mut s, b"MM_SHEAF_CAPACITY=32");
        assert_eq!(s[1].unwrap().bytes(), b"Z,kmalloc-64");
        assert!(s[0].is_none());
        assert_eq!(number(s[2].unwrap().bytes()), Some(32));
        assert_eq!(number(b"3x"), None);
        // this process's environment is readable and complete, both ways
        let r = read();
        assert_eq!(r[0].is_some(), std::env::var_os("MM_STATS").is_some());
        let mut p: Settings = [None; NAMES.len()];
        assert!(read_proc(&mut p));
        for (a, b) in r.iter().zip(&p) {
            assert_eq!(a.map(|v| v.bytes().to_vec()), b.map(|v| v.bytes().to_vec()));
        }
    }
}
