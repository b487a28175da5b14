//! Named points where a test can stop argus deterministically: with
//! `ARGUS_TESTPOINT=<name>` and `ARGUS_TESTPOINT_FILE=<path>` in the environment, the
//! process that reaches `<name>` writes its pid to `<path>` and waits there until it is
//! killed (or the file is removed, which lets it go on). Tests kill, race or resume
//! argus at exactly the point they name instead of guessing with timers. Without the
//! variables this is a no-op.

use std::time::Duration;

/// Pauses here when a test asked for this point.
pub fn reach(name: &str) {
    let Some(wanted) = std::env::var_os("ARGUS_TESTPOINT") else {
        return;
    };
    if wanted.to_string_lossy().split(',').all(|w| w != name) {
        return;
    }
    let Some(file) = std::env::var_os("ARGUS_TESTPOINT_FILE") else {
        return;
    };
    let file = std::path::PathBuf::from(file);
    let marker = format!("{} {name}\n", std::process::id());
    if std::fs::write(&file, marker).is_err() {
        return;
    }
    tracing::warn!(
        "test point {name}: paused until {} is removed",
        file.display()
    );
    while file.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
}
