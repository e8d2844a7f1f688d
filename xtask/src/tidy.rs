//! The repository's own rules, as tests (they read the workspace with cargo, so they run through
//! `cargo test`, not from a bundle).

use cargo_metadata::semver::Version;

use crate::{generate, tools};

/// The workspace's `rust-version` is true: no locked dependency declares a newer one. (Our own code is
/// held to it by clippy's `incompatible_msrv` lint, and `cargo xtask ci msrv` builds with that Rust.)
#[test]
fn no_locked_dependency_needs_a_newer_rust() {
    let meta = tools::metadata().unwrap();
    let ours: Vec<Version> = meta.workspace_packages().iter().map(|p| p.rust_version.clone().unwrap()).collect();
    assert!(ours.windows(2).all(|w| w[0] == w[1]), "every workspace package declares the same rust-version");
    let msrv = &ours[0];
    let newer: Vec<String> = meta
        .packages
        .iter()
        .filter(|p| p.rust_version.as_ref().is_some_and(|v| v > msrv))
        .map(|p| format!("{} {} needs Rust {}", p.name, p.version, p.rust_version.as_ref().unwrap()))
        .collect();
    assert!(newer.is_empty(), "rust-version {msrv} is too old: {}", newer.join(", "));
}

/// The committed libcuda stub defines every entry point that the locked cust_raw's bindings declare.
#[test]
fn the_libcuda_stub_covers_cust_raw() {
    let committed = std::fs::read_to_string(tools::root().join("common/libcuda/stub.c")).unwrap();
    assert!(
        committed == generate::stub_source().unwrap(),
        "common/libcuda/stub.c is not what cust_raw's bindings make: run `cargo xtask generate` and commit it"
    );
}

fn lesson_files() -> Vec<String> {
    let dir = tools::root().join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(String::from))
        .collect();
    names.sort();
    names
}

/// Every lesson is registered once, in `lessons::LESSONS`, and README.md's lesson table names each.
#[test]
fn every_lesson_is_registered_once() {
    let mut registered: Vec<String> = crate::lessons::LESSONS.iter().map(|l| l.name.to_string()).collect();
    registered.sort();
    let unique = registered.len();
    registered.dedup();
    assert_eq!(unique, registered.len(), "a lesson is registered twice in xtask/src/lessons.rs");
    assert_eq!(lesson_files(), registered, "examples/ and xtask/src/lessons.rs disagree");
    let readme = std::fs::read_to_string(tools::root().join("README.md")).unwrap();
    for name in &registered {
        assert!(readme.contains(&format!("| `{name}` |")), "README.md's lesson table lacks `{name}`");
    }
}

/// A lesson is its story: the harness, the bound and the tables live in `common`.
#[test]
fn lessons_stay_short() {
    for name in lesson_files() {
        let text = std::fs::read_to_string(tools::root().join(format!("examples/{name}.rs"))).unwrap();
        let lines = text.lines().count();
        assert!(lines <= 200, "examples/{name}.rs has {lines} lines: move apparatus into common (at most 200)");
    }
}

/// `unsafe` lives only in `common` (its sources, tests and benchmarks), and each use says why it is
/// sound: a `// SAFETY:` comment (or a `# Safety` section for an unsafe fn) in the lines just above.
/// The one exception is the xtask's `main`, which restores SIGPIPE's default as the lessons do.
#[test]
fn unsafe_only_in_common_with_a_safety_note() {
    let root = tools::root();
    for entry in walkdir::WalkDir::new(&root).into_iter().filter_entry(|e| {
        let n = e.file_name().to_string_lossy();
        !(n == "target" || n.starts_with('.') || n == "compile_fail")
    }) {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let rel = entry.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap();
            let uses = ["unsafe {", "unsafe impl", "unsafe fn", "unsafe extern"].iter().any(|u| code.contains(u));
            if !uses || code.contains('"') {
                continue;
            }
            assert!(
                rel.starts_with("common/") || rel == "xtask/src/main.rs" || rel == "xtask/src/tidy.rs",
                "{rel}:{}: unsafe outside common",
                i + 1
            );
            let above = &lines[i.saturating_sub(8)..=i];
            let noted =
                above.iter().any(|l| l.contains("SAFETY:") || l.contains("# Safety")) || code.contains("unsafe extern");
            assert!(noted, "{rel}:{}: unsafe without a SAFETY note just above", i + 1);
        }
    }
}
