//! GPU tests of managed memory (`Gpu::managed`, `Scope::managed`, `ScopeStream::prefetch`): what the types
//! cannot rule out at compile time (those are `compile_fail/managed_*.rs`), tried at run time. Each needs
//! an NVIDIA GPU: without one they are reported as ignored, and `cargo xtask test` runs them
//! (`--include-ignored`) where it finds a driver.

use cuda_scope::{host::fill, Destination, Gpu, HostAlloc};
use kernels::{cpu, Kernels};
use measure::{
    verify::{self, input},
    Chunking,
};

mod support;

/// The GPU with the lessons' kernels and the test binary's lock; managed memory must be usable there.
fn gpu() -> (Gpu, Kernels, std::sync::MutexGuard<'static, ()>) {
    let (gpu, kernels, lock) = support::gpu();
    assert!(gpu.info.managed_memory, "{} lacks concurrent managed access: the H100/H200 have it", gpu.info.name);
    (gpu, kernels, lock)
}

/// The lesson's two managed ways on a prime length cut into chunks over streams: pages faulted in on
/// demand, and prefetched both ways. Chunk boundaries fall inside pages, so a prefetch on one stream
/// moves pages that a kernel on another stream is writing: the driver keeps managed memory coherent
/// while it moves, and every element must come out right.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn kernels_on_managed_memory_on_demand_and_prefetched() {
    let (gpu, kernels, _lock) = gpu();
    let chunking = Chunking::new(10_000_019, 37, 8).unwrap();
    let iters = 20;
    let streams = gpu.streams(chunking.streams).unwrap();
    let mut m = gpu.managed::<f32>(chunking.elements).unwrap();
    assert!(m.iter().all(|x| *x == 0.0), "new managed memory is zeroed");
    for prefetch in [false, true] {
        fill(&mut m, input); // the host writes through the same pointer the kernels use
        let ordering = gpu
            .scope(&streams, |s| {
                let data = s.managed(&mut m);
                for c in chunking.iter() {
                    let (st, d) = (s.stream(c.stream), data.slice(c.range()));
                    if prefetch {
                        st.prefetch(d, Destination::Device)?;
                    }
                    kernels.process(st, d, iters)?;
                    if prefetch {
                        st.prefetch(d, Destination::Host)?;
                    }
                }
                Ok::<_, cuda_scope::Error>(s.waits())
            })
            .unwrap();
        verify::exact(&m, |i| cpu::process(input(i), iters)).ensure().unwrap();
        assert_eq!(ordering.added, 0, "disjoint chunks on their own streams need no waits: {ordering:?}");
    }
}

/// A prefetch is ordered like a write: one on another stream than the kernel that wrote the range waits
/// for it (the scope adds the wait and says so), and a kernel after a prefetch on another stream waits
/// for the prefetch.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_prefetch_is_ordered_like_a_write() {
    let (gpu, kernels, _lock) = gpu();
    let n = 1 << 22;
    let iters = 2000;
    let streams = gpu.streams(2).unwrap();
    let mut m = gpu.managed::<f32>(n).unwrap();
    fill(&mut m, input);
    let ordering = gpu
        .scope(&streams, |s| {
            let d = s.managed(&mut m);
            s.stream(0).prefetch(d, Destination::Device)?;
            kernels.process(s.stream(1), d, iters)?; // waits for the prefetch
            s.stream(0).prefetch(d, Destination::Host)?; // waits for the kernel
            Ok::<_, cuda_scope::Error>(s.waits())
        })
        .unwrap();
    assert_eq!((ordering.made, ordering.added), (0, 2), "{ordering:?}");
    let first = ordering.first_added.unwrap();
    assert!(first.starts_with("kernel process on stream 1 writes") && first.contains("prefetch to device"), "{first}");
    verify::exact(&m, |i| cpu::process(input(i), iters)).ensure().unwrap();
}

/// Only managed memory prefetches: device and mapped views are refused with a reason, before the
/// driver sees them, as is a stream the scope does not hold. An empty prefetch does nothing.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn only_managed_memory_prefetches() {
    let (gpu, _, _lock) = gpu();
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<f32>(16).unwrap();
    let mut mapped = gpu.pinned_with::<f32>(16, HostAlloc::MAPPED).unwrap();
    let mut m = gpu.managed::<f32>(16).unwrap();
    m.copy_from_slice(&[7.0; 16]);
    gpu.scope(&streams, |s| {
        for view in [s.device(&mut d), s.mapped(&mut mapped)?] {
            let err = s.stream(0).prefetch(view, Destination::Device).unwrap_err();
            assert!(format!("{err:#}").contains("only managed memory"), "{err:#}");
        }
        let view = s.managed(&mut m);
        s.stream(0).prefetch(view.slice(3..3), Destination::Device)?;
        s.stream(0).prefetch(view.slice(3..3), Destination::Host)
    })
    .unwrap();
    assert_eq!(&m[..], &[7.0; 16]);
}

/// Managed views are device addresses to copies and memsets too, and managed memory is host memory to
/// them from outside a scope: every combination round-trips.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn copies_to_from_and_through_managed_memory() {
    let (gpu, _, _lock) = gpu();
    let n = 1_000_003;
    let streams = gpu.streams(2).unwrap();
    let h = gpu.pinned_from_fn(n, input).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    let (mut m, mut m2) = (gpu.managed::<f32>(n).unwrap(), gpu.managed::<f32>(n).unwrap());
    let mut d = gpu.alloc::<f32>(n).unwrap();
    gpu.scope(&streams, |s| {
        let (v, v2) = (s.managed(&mut m), s.managed(&mut m2));
        s.stream(1).fill(v2, f32::NAN)?;
        s.stream(0).htod(&h, v)?; //                    pinned -> managed
        s.stream(0).dtod(v, v2)?; //                    managed -> managed, after the fill (the scope orders it)
        s.stream(1).dtoh(v2, &mut back) //              managed -> pinned
    })
    .unwrap();
    verify::exact(&back, input).ensure().unwrap();
    verify::exact(&m2, input).ensure().unwrap();
    // Outside a scope managed memory is a host slice, and may be the host side of a copy.
    back.fill(0.0);
    gpu.scope(&streams, |s| {
        let d = s.device(&mut d);
        s.stream(0).htod(&m, d)?; //                   managed (as host memory) -> device
        s.stream(0).dtoh(d, &mut m2)?; //              device -> managed (as host memory)
        s.stream(0).dtoh(d, &mut back)
    })
    .unwrap();
    verify::exact(&m2, input).ensure().unwrap();
    verify::exact(&back, input).ensure().unwrap();
}

/// Asking for more than the room is refused before anything is allocated, with the reason; what is
/// allocated counts as held until it is freed, and allocating and freeing leaks nothing.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_room_refuses_more_than_free_memory_less_the_margin() {
    let (gpu, _, _lock) = gpu();
    let room = gpu.room().unwrap();
    assert!(room.free <= room.total && room.margin() >= 1 << 30, "{room:?}");
    // Past what may be asked for (by 256 MiB, so that other programs freeing memory meanwhile do not
    // make it fit), and less than free memory: were the check wrong, this would still fit.
    let err = gpu.managed::<f32>((room.available() + (256 << 20)) / 4).unwrap_err();
    assert!(matches!(&err, cuda_scope::Error::TooLarge(t) if t.memory == cuda_scope::Memory::Managed), "{err:#}");
    let msg = format!("{err:#}");
    assert!(msg.contains("kept free for others") && msg.contains("choose a smaller size"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(gpu.room().unwrap().managed_held, room.managed_held, "nothing was allocated");
    let err = gpu.managed::<f32>(0).unwrap_err();
    assert!(matches!(&err, cuda_scope::Error::Refused(r) if r.why == cuda_scope::Refusal::Empty), "{err:#}");
    assert!(gpu.managed::<f64>(usize::MAX / 4).is_err(), "a size that overflows is an error, not a panic");

    let bytes = 64 << 20;
    drop(gpu.managed::<u8>(bytes).unwrap()); // whatever the driver sets up once, before measuring
    let (free_before, _) = gpu.memory().unwrap();
    for _ in 0..20 {
        let m = gpu.managed::<u8>(bytes).unwrap();
        assert_eq!(gpu.room().unwrap().managed_held, room.managed_held + bytes);
        drop(m);
    }
    assert_eq!(gpu.room().unwrap().managed_held, room.managed_held);
    assert_eq!(gpu.memory().unwrap().0, free_before, "managed memory leaked");

    // Zeroed by the host, new managed memory takes no device memory until the GPU touches it (else the
    // room would count it twice); and a device buffer that would leave it no room there is refused.
    let m = gpu.managed::<u8>(1 << 30).unwrap();
    let free_with = gpu.memory().unwrap().0;
    assert!(free_before.saturating_sub(free_with) < 64 << 20, "{free_before} then {free_with}");
    let now = gpu.room().unwrap();
    assert_eq!(now.managed_held, room.managed_held + (1 << 30));
    let err = gpu.alloc::<u8>(now.free - now.managed_held + (16 << 20)).unwrap_err();
    assert!(format!("{err:#}").contains("of managed memory this process holds there may come"), "{err:#}");
    drop(m);
}

/// Managed memory keeps its context alive: it outlives the Gpu that made it, works in the scope of the
/// next one (the same primary context), and drops after it without a crash.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn managed_memory_outlives_the_gpu_that_made_it() {
    let (gpu, _kernels_of_the_first_gpu, _lock) = gpu();
    let n = 1 << 20;
    let mut m = gpu.managed::<f32>(n).unwrap();
    drop(gpu);
    fill(&mut m, input); // the host may still write it
    let gpu = Gpu::init().unwrap();
    let kernels = Kernels::load(&gpu).unwrap();
    let streams = gpu.streams(1).unwrap();
    gpu.scope(&streams, |s| {
        let d = s.managed(&mut m);
        s.stream(0).prefetch(d, Destination::Device)?;
        kernels.process(s.stream(0), d, 3)
    })
    .unwrap();
    verify::exact(&m, |i| cpu::process(input(i), 3)).ensure().unwrap();
    drop(gpu);
    drop((streams, m));
}

/// An error in the middle of a scope (here a refused prefetch of device memory) returns only once the
/// long kernel already queued on the managed memory has finished, so the host's reads after it see the
/// results; a panic mid-scope unwinds only after the GPU is done too.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn an_error_or_a_panic_mid_scope_returns_only_when_the_gpu_is_done() {
    let (gpu, kernels, _lock) = gpu();
    let n = 1 << 22;
    let iters = 100_000;
    let streams = gpu.streams(2).unwrap();
    let mut m = gpu.managed::<f32>(n).unwrap();
    let mut d = gpu.alloc::<f32>(8).unwrap();
    fill(&mut m, input);
    let err = gpu
        .scope(&streams, |s| {
            kernels.process(s.stream(1), s.managed(&mut m), iters)?;
            s.stream(0).prefetch(s.device(&mut d), Destination::Host)
        })
        .unwrap_err();
    assert!(format!("{err:#}").contains("only managed memory"), "{err:#}");
    verify::within(&m, 4099, 0.0, |i| cpu::process(input(i), iters)).ensure().unwrap();

    fill(&mut m, input);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
            kernels.process(s.stream(0), s.managed(&mut m), iters)?;
            panic!("a bug in the program, mid-scope");
            #[allow(unreachable_code)]
            Ok(())
        });
    }));
    assert!(caught.is_err());
    verify::within(&m, 4099, 0.0, |i| cpu::process(input(i), iters)).ensure().unwrap();
}
