//! Bad input to the lessons: one line on stderr, a non-zero exit, never a panic or a partial table.
//! These checks come before the GPU is touched, so they run everywhere.

use std::{path::PathBuf, process::Command};

/// The lesson binaries: `target/<profile>/examples/` under cargo, `lessons/` in a bundle.
fn lesson(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    ["examples", "lessons"].iter().map(|d| dir.join(d).join(name)).find(|p| p.is_file())
}

fn fails_with(name: &str, args: &[&str], expected: &str) {
    let Some(bin) = lesson(name) else {
        panic!("lesson {name} is not built next to the tests: run `cargo build --examples` first (`cargo xtask test` does)");
    };
    let out = Command::new(&bin).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let context = format!("{name} {args:?}: exit {:?}, stdout {stdout:?}, stderr {stderr:?}", out.status.code());
    assert!(!out.status.success(), "{context}");
    assert!(stdout.trim().is_empty(), "nothing may be printed as a result: {context}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {context}");
    assert!(stderr.contains(expected), "expected {expected:?}: {context}");
    assert!(!stderr.contains("panicked"), "{context}");
}

#[test]
fn sizes_of_zero() {
    fails_with("overlap", &["-n", "0"], "at least one element");
    fails_with("vector_add_streams", &["--elements", "0"], "at least one element");
    fails_with("double_buffering", &["-n", "0"], "at least one element");
    fails_with("async_memcpy", &["-n", "0"], "at least one element");
    fails_with("pinned_memory", &["--max", "0"], "sizes must run from at least 4 bytes");
    fails_with("zero_copy", &["--min", "0"], "sizes must run from at least 4 bytes");
}

#[test]
fn things_that_are_not_numbers() {
    fails_with("overlap", &["-n", "lots"], "'lots' is not a number");
    fails_with("overlap", &["--streams", "1.5"], "'1.5' is not a whole number");
    fails_with("pinned_memory", &["--max", "12 parsecs"], "unknown unit");
    fails_with("zero_copy", &["--repeats", "-3"], "error:");
    fails_with("async_memcpy", &["--iters", "many"], "invalid value 'many'");
}

#[test]
fn zero_streams_or_chunks() {
    fails_with("overlap", &["--streams", "0"], "--streams must be at least 1");
    fails_with("overlap", &["--chunks", "0"], "--chunks must be at least 1");
    fails_with("vector_add_streams", &["--streams", "0"], "--streams must be at least 1");
    fails_with("overlap", &["--repeats", "0"], "--repeats");
}

#[test]
fn more_streams_than_chunks_or_chunks_than_elements() {
    fails_with("overlap", &["--chunks", "4", "--streams", "8"], "more than --chunks 4");
    fails_with("double_buffering", &["-n", "10", "--chunks", "11", "--streams", "2"], "a chunk would be empty");
}

#[test]
fn sizes_that_are_not_whole_elements() {
    fails_with("pinned_memory", &["--min", "4KiB", "--max", "4099"], "multiples of 4 bytes");
}
