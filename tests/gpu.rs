//! GPU tests of `common`: they need a GPU and skip, saying so, where there is none.

use gpu_transfers::{
    kernels::cpu,
    verify::{self, input},
    ChunkPlan, Gpu, HostAlloc, PinnedBuffer, Registered,
};

/// The GPU, or `None` (with a message) on a machine without a driver or device. Any other failure fails.
/// Holds a lock too: libtest runs tests on parallel threads, and these share one device (and the leak
/// test reads its free memory).
fn gpu() -> Option<(Gpu, std::sync::MutexGuard<'static, ()>)> {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    match Gpu::init() {
        Ok(g) => Some((g, lock)),
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(
                msg.starts_with("no NVIDIA driver") || msg.starts_with("no CUDA GPU"),
                "GPU start-up failed: {msg}"
            );
            // Once, and past libtest's output capture, so that a run without a GPU says why nothing ran.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "GPU tests skipped: {msg}");
            });
            None
        }
    }
}

#[test]
fn round_trip_through_every_host_kind() {
    let Some((gpu, _lock)) = gpu() else { return };
    let n = 1_000_003; // prime: no chunk divides it
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    let mut pageable: Vec<f32> = (0..n).map(input).collect();
    let mut pinned = PinnedBuffer::from_fn(n, input).unwrap();
    let mut wc = PinnedBuffer::with_flags(n, HostAlloc::WRITE_COMBINED | HostAlloc::PORTABLE).unwrap();
    wc.copy_from_slice(&pageable);
    let mut backing = pageable.clone();
    let mut registered = Registered::new(&mut backing).unwrap();
    for host in [&mut pageable[..], &mut pinned[..], &mut wc[..], &mut registered[..]] {
        gpu.scope(&streams, |s| s.htod(&streams[0], &host[..], s.device(&mut d))).unwrap();
        host.fill(0.0);
        gpu.scope(&streams, |s| s.dtoh(&streams[0], s.device(&mut d), &mut host[..])).unwrap();
        verify::exact(host, input).ensure().unwrap();
    }
}

/// Two device buffers shared by three streams (upload, compute, download): only the scope's events
/// keep an upload from overwriting a buffer that is still being computed on or downloaded.
#[test]
fn double_buffering_across_streams_is_ordered() {
    let Some((gpu, _lock)) = gpu() else { return };
    let plan = ChunkPlan::new(64 << 20, 64, 1).unwrap();
    let iters = 50;
    let h_in = PinnedBuffer::from_fn(plan.elements, input).unwrap();
    let mut h_out = PinnedBuffer::<f32>::new(plan.elements).unwrap();
    let mut bufs = vec![gpu.alloc::<f32>(plan.max_chunk()).unwrap(), gpu.alloc::<f32>(plan.max_chunk()).unwrap()];
    let streams = gpu.streams(3).unwrap();
    let waits = gpu
        .scope(&streams, |s| {
            let d = s.devices(&mut bufs);
            for (c, out) in plan.iter().zip(plan.split_mut(&mut h_out)) {
                let buf = d[c.index % 2].slice(0..c.len);
                s.htod(&streams[0], &h_in[c.range()], buf)?;
                s.launch(&streams[1], gpu.kernels.process(buf, iters))?;
                s.dtoh(&streams[2], buf, out)?;
            }
            Ok(s.waits_inserted())
        })
        .unwrap();
    verify::exact(&h_out, |i| cpu::process(input(i), iters)).ensure().unwrap();
    assert!(waits >= 2 * 64, "expected cross-stream waits, got {waits}");
}

/// Chunks of one buffer on many streams: disjoint ranges must not wait for each other, and the
/// result of each chunk's addition must land in its own place.
#[test]
fn sub_ranges_of_one_buffer_on_many_streams() {
    let Some((gpu, _lock)) = gpu() else { return };
    let plan = ChunkPlan::new(10_000_019, 37, 8).unwrap();
    let a = PinnedBuffer::from_fn(plan.elements, input).unwrap();
    let b = PinnedBuffer::from_fn(plan.elements, |i| input(i + 7)).unwrap();
    let mut c = PinnedBuffer::<f32>::new(plan.elements).unwrap();
    let (mut da, mut db, mut dc) =
        (gpu.alloc(plan.elements).unwrap(), gpu.alloc(plan.elements).unwrap(), gpu.alloc(plan.elements).unwrap());
    let streams = gpu.streams(plan.streams).unwrap();
    let waits = gpu
        .scope(&streams, |s| {
            let (da, db, dc) = (s.device(&mut da), s.device(&mut db), s.device(&mut dc));
            for (k, out) in plan.iter().zip(plan.split_mut(&mut c)) {
                let (st, r) = (&streams[k.stream], k.range());
                s.fill(st, dc.slice(r.clone()), f32::NAN)?;
                s.htod(st, &a[r.clone()], da.slice(r.clone()))?;
                s.htod(st, &b[r.clone()], db.slice(r.clone()))?;
                s.launch(st, gpu.kernels.vector_add(da.slice(r.clone()), db.slice(r.clone()), dc.slice(r.clone())))?;
                s.dtoh(st, dc.slice(r), out)?;
            }
            Ok(s.waits_inserted())
        })
        .unwrap();
    verify::exact(&c, |i| input(i) + input(i + 7)).ensure().unwrap();
    assert_eq!(waits, 0, "disjoint chunks on their own streams need no cross-stream waits");
}

#[test]
fn kernels_read_and_write_mapped_host_memory() {
    let Some((gpu, _lock)) = gpu() else { return };
    assert!(gpu.info.can_map_host_memory);
    let n = 1 << 20;
    let mut h_in = PinnedBuffer::with_flags(n, HostAlloc::MAPPED).unwrap();
    h_in.iter_mut().enumerate().for_each(|(i, x)| *x = input(i));
    let mut h_out = PinnedBuffer::<f32>::with_flags(n, HostAlloc::MAPPED).unwrap();
    let streams = gpu.streams(1).unwrap();
    gpu.scope(&streams, |s| {
        let (i, o) = (s.mapped(&mut h_in)?, s.mapped(&mut h_out)?);
        s.launch(&streams[0], gpu.kernels.scale(i, o, 2.0))?;
        s.launch(&streams[0], gpu.kernels.accumulate(i, o))
    })
    .unwrap();
    verify::exact(&h_out, |i| input(i) * 2.0 + input(i)).ensure().unwrap();
    let mut plain = PinnedBuffer::<f32>::new(4).unwrap();
    let err = gpu.scope(&streams, |s| s.mapped(&mut plain).map(|_| ())).unwrap_err();
    assert!(format!("{err:#}").contains("MAPPED"), "{err:#}");
}

#[test]
fn errors_say_what_was_being_done() {
    let Some((gpu, _lock)) = gpu() else { return };
    let streams = gpu.streams(1).unwrap();
    let (mut a, mut c) = (gpu.alloc::<f32>(10).unwrap(), gpu.alloc::<f32>(11).unwrap());
    let err = gpu
        .scope(&streams, |s| {
            let (a, c) = (s.device(&mut a), s.device(&mut c));
            s.launch(&streams[0], gpu.kernels.vector_add(a, a, c))
        })
        .unwrap_err();
    assert!(format!("{err:#}").contains("lengths differ"), "{err:#}");
    let host = vec![1.0f32; 5];
    let err = gpu.scope(&streams, |s| s.htod(&streams[0], &host, s.device(&mut a))).unwrap_err();
    assert!(format!("{err:#}").contains("5 elements, destination 10"), "{err:#}");
    let too_big = gpu.info.total_memory / 4 + 1;
    let err = gpu.alloc::<f32>(too_big).unwrap_err();
    assert!(format!("{err:#}").contains("free"), "{err:#}");
    let other = gpu.streams(1).unwrap();
    let err = gpu.scope(&streams, |s| s.htod(&other[0], &host, s.device(&mut a).slice(0..5))).unwrap_err();
    assert!(format!("{err:#}").contains("not one of the scope's streams"), "{err:#}");
}

#[test]
fn timed_scopes_measure_the_gpu() {
    let Some((gpu, _lock)) = gpu() else { return };
    let streams = gpu.streams(2).unwrap();
    let mut d = gpu.alloc::<f32>(1 << 22).unwrap();
    // The first launch in a process loads the kernel (lazy loading): warm up before timing.
    gpu.timed(&streams, |s| s.launch(&streams[1], gpu.kernels.process(s.device(&mut d), 1))).unwrap();
    let short = gpu.timed(&streams, |s| s.launch(&streams[1], gpu.kernels.process(s.device(&mut d), 10))).unwrap();
    let long = gpu.timed(&streams, |s| s.launch(&streams[1], gpu.kernels.process(s.device(&mut d), 10_000))).unwrap();
    assert!(short > 0.0 && long > 5.0 * short, "short {short} ms, long {long} ms: the join must wait for stream 1");
}

fn locked_host_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field =
        |name: &str| status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse::<u64>().ok();
    Some(field("VmLck:").unwrap_or(0) + field("VmPin:").unwrap_or(0))
}

/// Running a whole pipeline many times leaves device memory and locked host memory where they were.
#[test]
fn repeated_pipelines_leak_nothing() {
    let Some((gpu, _lock)) = gpu() else { return };
    let run = || {
        let plan = ChunkPlan::new(4 << 20, 8, 4).unwrap();
        let h_in = PinnedBuffer::from_fn(plan.elements, input).unwrap();
        let mut h_out = PinnedBuffer::<f32>::new(plan.elements).unwrap();
        let mut bufs: Vec<_> = (0..plan.streams).map(|_| gpu.alloc::<f32>(plan.max_chunk()).unwrap()).collect();
        let streams = gpu.streams(plan.streams).unwrap();
        gpu.scope(&streams, |s| {
            let d = s.devices(&mut bufs);
            for (c, out) in plan.iter().zip(plan.split_mut(&mut h_out)) {
                let buf = d[c.stream].slice(0..c.len);
                s.htod(&streams[c.stream], &h_in[c.range()], buf)?;
                s.launch(&streams[c.stream], gpu.kernels.process(buf, 3))?;
                s.dtoh(&streams[c.stream], buf, out)?;
            }
            Ok(())
        })
        .unwrap();
        verify::exact(&h_out, |i| cpu::process(input(i), 3)).ensure().unwrap();
    };
    run();
    let (free_before, _) = gpu.memory().unwrap();
    let locked_before = locked_host_kib();
    for _ in 0..50 {
        run();
    }
    let (free_after, _) = gpu.memory().unwrap();
    assert_eq!(free_before, free_after, "device memory leaked");
    assert_eq!(locked_before, locked_host_kib(), "pinned host memory leaked");
}
