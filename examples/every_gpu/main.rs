//! Lesson 9: every GPU of the host at once (beyond the CUDA C++ programs the first lessons follow).
//!
//! Each GPU gets a host thread, its own context, and pinned memory near its CPU where the host says
//! which that is. Each works alone, then all together in step (a barrier before each phase): H2D copies
//! (nvbandwidth's `host_to_all_memcpy_ce`), D2H copies (`all_to_host_memcpy_ce`), both ways, and the
//! pipeline of lesson 3. Together, each GPU's events give its own rate, and the host clock all of theirs
//! from the first start to the last end. What they lose together, the host cannot supply to all of them.
//!
//!     cargo run --release --example every_gpu [-- --devices all --size 512MiB]

mod lockstep;
mod numa;
mod rig;

use std::process::ExitCode;

use clap::Parser;
use cuda_scope::device::device_count;
use measure::error::bad_args;
use measure::{
    args::{parse_bytes, parse_device_list, RunArgs},
    machine::HostMemory,
    report::Output,
};

use rig::EveryGpu;

/// Every GPU alone, then all at once: H2D copies, D2H copies, both, and the overlap pipeline.
#[derive(Parser)]
struct Args {
    /// The GPUs: `all`, or a list such as `0,1`
    #[arg(long, default_value = "all", value_parser = parse_device_list, allow_negative_numbers = true)]
    devices: String,
    /// Bytes each copy moves
    // 512 MiB, nvbandwidth's own default: copies of it run at the link's full rate, and pinning twice
    // as much per GPU took half a second more of every run.
    #[arg(long, default_value = "512MiB", value_parser = parse_bytes, allow_negative_numbers = true)]
    size: usize,
    #[command(flatten)]
    run: RunArgs,
}

/// `all`, or a list like `0,1`: the devices to run on, checked against the machine.
fn parse_devices(spec: &str) -> anyhow::Result<Vec<u32>> {
    let count = device_count()?;
    let list: Vec<u32> = if spec.trim() == "all" {
        (0..count).collect()
    } else {
        spec.split(',')
            .map(|d| d.trim().parse::<u32>().map_err(|_| bad_args(format!("--devices: '{d}' is not a device number"))))
            .collect::<anyhow::Result<_>>()?
    };
    if let Some(bad) = list.iter().find(|d| **d >= count) {
        return Err(bad_args(format!("--devices: device {bad} does not exist: this machine has {count}")));
    }
    if list.is_empty() {
        return Err(bad_args("--devices: no device named"));
    }
    Ok(list)
}

fn main() -> ExitCode {
    measure::lesson::run(every_gpu)
}

/// Every GPU alone, then all together in step; the rates of each and of all; and why they lose what
/// they lose together: each GPU's own state, then what they share on the host (bridges, memory).
fn every_gpu(args: &Args, out: &Output) -> anyhow::Result<()> {
    let devices = parse_devices(&args.devices)?;
    // Every GPU started, each one's memory and the host's pinned memory for all of them checked (a
    // --size past them refused at once), before any GPU allocates.
    let rig = EveryGpu::start(devices, args.size, args.run.repeats())?;
    let alone = rig.alone()?; // each GPU in turn, on this thread
    let together = rig.together()?; // every GPU on a thread of its own, each phase started together
    rig.table(out, &alone, &together);
    let host = HostMemory::measure(rig::HOST_MEMORY_BYTES)?; // how fast the CPUs read and write host memory
    rig.why(out, &alone, &together, &host);
    rig.finish(out, &alone, &together, &host)
}
