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
