//! `cargo xtask <task>`: the project's chores, in Rust. `main` parses flags and dispatches; each task
//! is a module named for it.

mod bench_report;
mod bundle;
mod check_ffi;
mod ci;
mod compare;
mod decls;
mod doctor;
mod drift;
mod flags;
mod generate;
mod kernels;
mod lessons;
mod profile;
mod readme;
mod results;
mod sanitize;
mod setup;
mod test;
#[cfg(test)]
mod tidy;
mod tools;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Output into a closed pipe (`cargo xtask doctor | head -1`) ends the program quietly, as it does
    // for C programs, instead of a panic in println!.
    // SAFETY: restoring a signal's default action, before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let flags = flags::Xtask::parse();
    let result = match flags.task {
        flags::Task::Setup => setup::run().map(|_| ()),
        flags::Task::Test(f) => return test::main(f),
        flags::Task::Doctor => doctor::run(),
        flags::Task::Generate => generate::run(),
        flags::Task::CheckFfi => check_ffi::run(),
        flags::Task::Ci(f) => ci::run(f),
        flags::Task::Kernels(f) => kernels::run(f),
        flags::Task::Profile(f) => profile::run(f),
        flags::Task::Sanitize(f) => sanitize::run(f),
        flags::Task::BenchReport(f) => bench_report::run(f),
        flags::Task::Compare(f) => return compare::main(*f),
        flags::Task::Bundle(f) => bundle::run(f),
        flags::Task::Results(f) => results::run(f),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
