//! The xtask's command line: names are checked before anything looks for a GPU, and output into a
//! closed pipe ends quietly.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::ExitStatusExt,
    process::{Command, Stdio},
};

fn xtask(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap()
}

#[test]
fn unknown_lessons_and_tools_are_named_before_the_driver_is_looked_for() {
    for (args, expected) in [
        (&["profile", "overlapp"][..], "invalid value 'overlapp'"),
        (&["sanitize", "nosuch"][..], "invalid value 'nosuch'"),
        (&["sanitize", "--tools", "memchek"][..], "invalid value 'memchek'"),
    ] {
        let out = xtask(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("NVIDIA driver"), "{args:?}: {stderr}");
    }
}

#[test]
fn doctor_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("doctor")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap(); // then the pipe closes, as with `| head -1`
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!first.is_empty());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "ended by SIGPIPE, as `head` expects: {stderr}");
}

#[test]
fn profiling_a_program_needs_nsys_and_says_how_to_get_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["profile", "--", "./my_app", "--size", "1"])
        .env("NSYS", "/nonexistent/nsys")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: nsys not found") && stderr.contains("set NSYS"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_program_or_lessons_not_both() {
    for args in [&["profile", "overlap", "--", "./my_app"][..], &["profile", "--builtin", "--", "./my_app"]] {
        let out = xtask(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot be used with"), "{args:?}: {stderr}");
    }
}
