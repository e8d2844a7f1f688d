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

/// A lesson that prints a document of two figures, each run's times jittered by a percent: `copy`, 5%
/// slower where `PLANT` is set, and `steady`.
const FAKE_LESSON: &str = r#"#!/bin/sh
awk -v seed="$$" -v plant="${PLANT:-0}" 'BEGIN {
    srand(seed); a = 1.23 * (1 + 0.01 * (rand() - 0.5)); b = 0.81 * (1 + 0.01 * (rand() - 0.5));
    if (plant) a *= 1.05;
    printf "{\"schema_version\": 2, \"machine\": {}, \"result\": {}, \"figures\": [";
    printf "{\"name\": \"copy\", \"clock\": \"gpu\", \"memory\": \"pinned\", \"stats\": {\"median_ms\": %f, \"min_ms\": %f, \"max_ms\": %f, \"q3_ms\": %f, \"runs\": 10, \"cv\": 0.01}},", a, a, a, a;
    printf "{\"name\": \"steady\", \"clock\": \"host\", \"memory\": \"pageable\", \"stats\": {\"median_ms\": %f, \"min_ms\": %f, \"max_ms\": %f, \"q3_ms\": %f, \"runs\": 10, \"cv\": 0.01}}]}\n", b, b, b, b;
}'
"#;

#[test]
fn interleaved_runs_of_two_settings_find_the_planted_change() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("xtask-cli-interleave-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("lessons")).unwrap();
    let lesson = dir.join("lessons/async_memcpy");
    std::fs::write(&lesson, FAKE_LESSON).unwrap();
    std::fs::set_permissions(&lesson, std::fs::Permissions::from_mode(0o755)).unwrap();
    let json = dir.join("judged.json");
    let d = dir.to_str().unwrap();
    let out = xtask(&[
        "compare",
        "--interleave",
        d,
        d,
        "--lesson",
        "async_memcpy",
        "--pairs",
        "12",
        "--b-env",
        "PLANT=1",
        "--json",
        json.to_str().unwrap(),
        "--keep",
        dir.join("kept").to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a SLOW figure exits 1: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("== async_memcpy: 12 pairs"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let figures = &v["lessons"][0]["figures"];
    assert_eq!((figures[0]["name"].as_str(), figures[0]["verdict"].as_str()), (Some("copy"), Some("SLOW")), "{stdout}");
    assert_eq!(figures[1]["verdict"], "SAME", "{stdout}");
    let ratio = figures[0]["ratio"].as_f64().unwrap();
    assert!((ratio - 1.05).abs() < 0.01, "{ratio}");
    // Each run kept: a pair of them is two processes for the two-process compare, which cannot see 5%.
    let kept = |side: &str| dir.join("kept/pair-12").join(side).to_str().unwrap().to_string();
    let out = xtask(&["compare", &kept("a"), &kept("b")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("0 of 2 figures changed") && text.contains("same means"), "{text}");
    // The same build against itself: nothing, exit 0.
    let out = xtask(&["compare", "--interleave", d, d, "--lesson", "async_memcpy", "--pairs", "12"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(dir);
}
