//! Bad input to the lessons: one line on stderr, a non-zero exit, never a panic or a partial table.
//! These checks come before the GPU is touched, so they run everywhere.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

/// The lesson binaries: `target/<profile>/examples/` under cargo, `lessons/` in a bundle.
fn lesson(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let found = ["examples", "lessons"].iter().map(|d| dir.join(d).join(name)).find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("lesson {name} is not built next to the tests: run `cargo build --examples` first (`cargo xtask test` does)")
    })
}

fn run(name: &str, args: &[&str]) -> (Output, String) {
    let out = Command::new(lesson(name)).args(args).output().unwrap();
    let context = format!(
        "{name} {args:?}: exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, context)
}

fn fails_with(name: &str, args: &[&str], expected: &str) {
    let (out, context) = run(name, args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{context}");
    assert!(stdout.trim().is_empty(), "nothing may be printed as a result: {context}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {context}");
    assert!(stderr.contains(expected), "expected {expected:?}: {context}");
    assert!(!stderr.contains("panicked"), "{context}");
}

/// A bad flag that clap's value parsers catch: one line and exit code 2.
fn bad_flag(name: &str, args: &[&str], expected: &str) {
    fails_with(name, args, expected);
    let (out, context) = run(name, args);
    assert_eq!(out.status.code(), Some(2), "{context}");
}

#[test]
fn sizes_of_zero() {
    bad_flag("overlap", &["-n", "0"], "must be at least 1");
    bad_flag("vector_add_streams", &["--elements", "0"], "must be at least 1");
    bad_flag("double_buffering", &["-n", "0"], "must be at least 1");
    bad_flag("async_memcpy", &["-n", "0"], "must be at least 1");
    fails_with("pinned_memory", &["--max", "0"], "--max 0: sizes must run from at least 4 bytes");
    fails_with("zero_copy", &["--min", "0"], "--min 0: sizes must run from at least 4 bytes");
    fails_with("managed_memory", &["--max", "0"], "--max 0: sizes must run from at least 4 bytes");
}

#[test]
fn things_that_are_not_numbers() {
    bad_flag("overlap", &["-n", "lots"], "'lots' is not a whole number");
    bad_flag("overlap", &["--streams", "1.5"], "'1.5' is not a whole number");
    bad_flag("overlap", &["--repeats", "abc"], "'abc' is not a whole number");
    bad_flag("pinned_memory", &["--max", "12 parsecs"], "unknown unit");
    bad_flag(
        "async_memcpy",
        &["--iters", "many"],
        "invalid value 'many' for '--iters <ITERS>': 'many' is not a whole number",
    );
    bad_flag("overlap", &["-n", "99999999999999999999"], "'99999999999999999999' is too large");
}

#[test]
fn negative_numbers_are_values_that_must_be_positive() {
    bad_flag("overlap", &["-n", "-5"], "'-5' is negative: give a positive whole number");
    bad_flag("zero_copy", &["--repeats", "-3"], "'-3' is negative");
    bad_flag("pinned_memory", &["--min", "-4096"], "'-4096' is negative");
    bad_flag("bidirectional", &["--ref-both", "-5"], "'-5' is not a rate");
}

#[test]
fn zero_streams_or_chunks() {
    bad_flag("overlap", &["--streams", "0"], "'--streams <STREAMS>': must be at least 1");
    bad_flag("overlap", &["--chunks", "0"], "'--chunks <CHUNKS>': must be at least 1");
    bad_flag("vector_add_streams", &["--streams", "0"], "must be at least 1");
    bad_flag("overlap", &["--repeats", "0"], "'--repeats <REPEATS>': must be at least 1");
}

#[test]
fn more_streams_than_chunks_or_chunks_than_elements() {
    fails_with("overlap", &["--chunks", "4", "--streams", "8"], "more than --chunks 4");
    fails_with("double_buffering", &["-n", "10", "--chunks", "11", "--streams", "2"], "a chunk would be empty");
    // managed_memory cuts every size of its sweep: the smallest must hold a chunk per element at least.
    fails_with("managed_memory", &["--min", "32", "--max", "1MiB"], "--chunks 16 is more than the 8 elements");
    fails_with("managed_memory", &["--chunks", "2"], "--streams 4 is more than --chunks 2");
}

#[test]
fn defaults_that_do_not_fit_name_the_flag_to_pass() {
    fails_with("overlap", &["-n", "5"], "-n 5 is fewer elements than the 32 chunks");
    fails_with("overlap", &["-n", "5"], "pass --chunks 5 or fewer");
    fails_with("overlap", &["--chunks", "2"], "pass --streams 2 or fewer");
}

#[test]
fn sizes_that_are_not_whole_elements_or_run_backwards() {
    fails_with("pinned_memory", &["--min", "4KiB", "--max", "4099"], "multiples of 4 bytes");
    fails_with("pinned_memory", &["--min", "1GiB", "--max", "4KiB"], "--min 1 GiB is more than --max 4 KiB");
}

#[test]
fn lesson_specific_flags() {
    bad_flag("every_gpu", &["--devices", "foo"], "'foo' is not a device number");
    bad_flag("every_gpu", &["--devices", ""], "no device named");
    bad_flag("every_gpu", &["--devices", "0,0"], "device 0 is named twice");
    bad_flag("staged_copy", &["--slot", "0"], "at least one f32 element");
    bad_flag("staged_copy", &["--slot", "6"], "not a whole number of f32 elements");
    bad_flag("staged_copy", &["--threads", "1000000"], "4 per CPU core");
    for bad in ["nan", "inf", "0"] {
        bad_flag("pinned_memory", &["--ref-htod", bad], "is not a rate");
    }
}

#[test]
fn small_copies_flags() {
    bad_flag("small_copies", &["--sizes", "4KiB,0"], "must be at least 1 byte");
    bad_flag("small_copies", &["--counts", "10,-3"], "'-3' is negative");
    bad_flag("small_copies", &["--counts", "10,2M"], "at most 1,000,000 buffers");
    bad_flag("small_copies", &["--plan", "4KiB*x"], "'4KiB*x': the count 'x' is not a whole number");
    bad_flag("small_copies", &["--plan", "0*3"], "a buffer of 0 bytes");
    bad_flag("small_copies", &["--streams", "33"], "--streams 33: at most 32");
    bad_flag("small_copies", &["--max-total", "1KiB", "--sizes", "4KiB", "--no-model"], "every count and size is over");
}

#[test]
fn latency_flags() {
    bad_flag("latency", &["--bytes", "0"], "must be at least 1 byte");
    bad_flag("latency", &["--accesses", "100"], "--accesses: 256 (launch costs must not swamp reads) to 16384");
}

#[test]
fn a_device_that_does_not_exist() {
    // Only the driver knows how many GPUs there are: without one, that is what the line says.
    let (out, context) = run("every_gpu", &["--devices", "99"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.trim().lines().count() == 1, "{context}");
    assert!(stderr.contains("device 99 does not exist") || stderr.contains("NVIDIA driver"), "{context}");
}

#[test]
fn clap_tips_stay_on_the_line() {
    bad_flag(
        "overlap",
        &["--stream", "4"],
        "unexpected argument '--stream' found (tip: a similar argument exists: '--streams')",
    );
    bad_flag("overlap", &["--size", "0"], "unexpected argument '--size' found (--help lists the flags)");
}

#[test]
fn json_errors_are_one_object_on_stdout() {
    let (out, context) = run("overlap", &["--json", "-n", "-5"]);
    assert_eq!(out.status.code(), Some(2), "{context}");
    assert!(out.stderr.is_empty(), "{context}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&context);
    assert_eq!(v["kind"], "bad_arguments", "{context}");
    assert!(v["error"].as_str().unwrap().contains("'-5' is negative"), "{context}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim().lines().count(), 1, "{context}");
}

#[test]
fn a_kernel_of_your_own_is_checked_before_the_gpu_starts() {
    bad_flag(
        "planner",
        &["--ptx", "/nonexistent/mine.ptx", "--kernel", "mine"],
        "--ptx: reading /nonexistent/mine.ptx",
    );
    let dir = std::env::temp_dir().join(format!("cli-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("mine.ptx");
    let three = ".visible .entry mine(\n\t.param .u64 a,\n\t.param .u32 b,\n\t.param .f32 c\n)\n{\n}\n";
    std::fs::write(&ptx, three).unwrap();
    let path = ptx.to_str().unwrap();
    bad_flag("planner", &["--ptx", path, "--kernel", "mine"], "takes (.u64, .u32, .f32)");
    bad_flag("planner", &["--ptx", path, "--kernel", "theirs"], "no kernel named theirs");
    bad_flag("planner", &["--ptx", path], "--kernel");
    bad_flag("planner", &["--ptx", path, "--kernel", "mine", "--iters", "3"], "cannot be used with");
    let _ = std::fs::remove_dir_all(dir);
}

/// No safe path runs a user's PTX: only the planner's own `main` acts on the job that names a kernel of
/// the user's (it reads the PTX first, and says so when it cannot). Any other lesson given the same job
/// in its environment ignores it and runs as itself (here, without a GPU: exit 3, no GPU).
#[test]
fn only_the_planner_acts_as_the_child_that_runs_a_users_kernel() {
    let job = r#"{"kernel":{"ptx":"/nonexistent/yours.ptx","name":"yours"},"sizes":[1024],"elements":0,"configs":[],"repeats":{"warmup":0,"repeats":1}}"#;
    let child = |name: &str| Command::new(lesson(name)).env("GPU_TRANSFERS_USER_KERNEL", job).output().unwrap();
    let planner = child("planner");
    let said = String::from_utf8_lossy(&planner.stderr);
    assert!(said.contains("reading /nonexistent/yours.ptx"), "the planner's child reads the PTX: {said}");
    for other in ["overlap", "pinned_memory"] {
        let out = child(other);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!said.contains("yours.ptx"), "{other} acted on the planner's job: {said}");
        if said.contains("no NVIDIA driver") {
            assert_eq!(out.status.code(), Some(3), "{other}: {said}");
        }
    }
}

/// Each lesson with a size past any machine (4 TiB of data, or a thousand-fold more than the defaults):
/// the flags it takes, and how long it may take to refuse. Every lesson of `examples/` is here.
const OVERSIZE: [(&str, &[&str]); 16] = [
    ("pinned_memory", &["--max", "4096GiB"]),
    ("async_memcpy", &["-n", "1024G"]),
    ("overlap", &["-n", "1024G"]),
    ("overlap_sweep", &["-n", "1024G"]),
    ("vector_add_streams", &["-n", "1024G"]),
    ("zero_copy", &["--max", "4096GiB"]),
    ("double_buffering", &["-n", "1024G"]),
    ("staged_copy", &["--max", "4096GiB"]),
    ("staged_copy", &["--slot", "4096GiB"]),
    ("bidirectional", &["--max", "4096GiB"]),
    ("managed_memory", &["--max", "4096GiB"]),
    ("every_gpu", &["--size", "4096GiB"]),
    ("latency", &["--bytes", "4096GiB"]),
    ("planner", &["--size", "4096GiB"]),
    ("small_copies", &["--counts", "1", "--sizes", "4096GiB", "--max-total", "4096GiB", "--no-model"]),
    ("small_copies", &["--counts", "1000000", "--sizes", "1MiB", "--max-total", "4096GiB", "--no-model"]),
];

/// A lesson given a size past the machine works out what it needs before it allocates anything, and
/// refuses at once: one line, exit code 2, nothing on stdout, never a hang (each is killed after a
/// minute). How long each took is printed, not asserted. `vector_add_streams -n 20G` once pinned 80 GiB
/// for 90 s before finding that the next vector would not fit.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn every_lesson_refuses_a_size_past_the_machine_at_once() {
    let examples = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples")).map(|d| {
        d.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let lesson = name.strip_suffix(".rs").map(String::from);
                lesson.or_else(|| e.path().join("main.rs").is_file().then_some(name))
            })
            .filter(|n| n != "your_kernel")
            .collect::<Vec<_>>()
    });
    if let Ok(mut names) = examples {
        names.sort();
        let mut listed: Vec<String> = OVERSIZE.iter().map(|l| l.0.to_string()).collect();
        listed.sort();
        listed.dedup();
        assert_eq!(names, listed, "every lesson (but your_kernel, which takes no size) has an oversize run here");
    }
    let mut failures = Vec::new();
    for (name, args) in OVERSIZE {
        let start = std::time::Instant::now();
        let mut child = Command::new(lesson(name))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{name} {}: {:.2} s, exit {:?}: {}",
            args.join(" "),
            secs,
            status.and_then(|s| s.code()),
            stderr.trim()
        );
        let one_line = stderr.trim().lines().count() == 1 && stdout.trim().is_empty();
        if status.is_none() || status.and_then(|s| s.code()) != Some(2) || !one_line || stderr.contains("panicked") {
            failures
                .push(format!("{name} {args:?}: {status:?} after {secs:.1} s, stdout {stdout:?}, stderr {stderr:?}"));
        }
    }
    assert!(failures.is_empty(), "{} lessons did not refuse at once:\n  {}", failures.len(), failures.join("\n  "));
}

/// A sweep of one size passes every sweeping lesson's argument checks: without a GPU the lesson goes on
/// to say there is none (exit 3), never that the flags are wrong (exit 2); with one, it measures.
#[test]
fn a_sweep_of_one_size_is_valid() {
    for name in ["pinned_memory", "managed_memory", "zero_copy"] {
        let (out, context) = run(name, &["--min", "64MiB", "--max", "64MiB", "--repeats", "3"]);
        match cuda_scope::Gpu::init() {
            Err(_) => assert_eq!(out.status.code(), Some(3), "{context}"),
            Ok(_) => assert!(out.status.success(), "{context}"),
        }
    }
}
