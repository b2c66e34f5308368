//! Child-process scenarios for tests of misuse that must abort (a
//! `GlobalAlloc` cannot unwind, so a bad `dealloc` ends the process):
//! the test binary runs itself again with one test selected and an
//! environment variable naming the scenario, and the parent checks how the
//! child ended and what it wrote to stderr. A child that does not end
//! within the timeout is killed and reported as hung.
//!
//! ```no_run
//! use local_lock::child;
//! use std::time::Duration;
//!
//! #[test]
//! fn double_free_aborts() {
//!     if child::scenario("MY_SCENARIO").as_deref() == Some("double_free") {
//!         // ... the misuse; never returns
//!     }
//!     let err = child::expect_abort("double_free_aborts", "MY_SCENARIO", "double_free");
//!     assert!(err.contains("double free"));
//! }
//! ```

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::string::String;
use std::time::{Duration, Instant};

/// How long a child may run before it counts as hung.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// In the child: the scenario named by `var` (`None` in the normal run).
pub fn scenario(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// Runs test `test` (exact name) of this binary in a child with `var` set
/// to `name`; returns its exit status and stderr. Panics if it does not
/// end within [`TIMEOUT`] (it is killed).
pub fn run(test: &str, var: &str, name: &str) -> (ExitStatus, String) {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, name)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    // Read stderr on a thread, so a chatty child cannot block on a full
    // pipe while we wait.
    let mut pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the child") {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scenario {name}: the child hung (killed after {TIMEOUT:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, reader.join().unwrap_or_default())
}

/// [`run`], asserting that the child died of `SIGABRT`; returns its
/// stderr.
pub fn expect_abort(test: &str, var: &str, name: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let (status, stderr) = run(test, var, name);
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "scenario {name}: expected SIGABRT, got {status:?}; stderr:\n{stderr}"
    );
    stderr
}

/// [`run`], asserting that the child exited with status 0; returns its
/// stderr.
pub fn expect_success(test: &str, var: &str, name: &str) -> String {
    let (status, stderr) = run(test, var, name);
    assert!(
        status.success(),
        "scenario {name}: expected success, got {status:?}; stderr:\n{stderr}"
    );
    stderr
}
