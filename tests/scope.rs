//! GPU tests of `common`. Each needs an NVIDIA GPU: without one they are reported as ignored, and
//! `cargo xtask test` runs them (`--include-ignored`) where it finds a driver.

use cuda_scope::ScopeEvent;
use cuda_scope::{Gpu, HostAlloc};
use kernels::cpu;
use measure::{
    verify::{self, input},
    Chunking,
};

mod support;

use support::gpu;

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn round_trip_through_every_host_kind() {
    let (gpu, _, _lock) = gpu();
    let n = 1_000_003; // prime: no chunk divides it
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    let mut pageable: Vec<f32> = (0..n).map(input).collect();
    let mut pinned = gpu.pinned_from_fn(n, input).unwrap();
    let mut wc = gpu.pinned_with(n, HostAlloc::WRITE_COMBINED | HostAlloc::PORTABLE).unwrap();
    wc.copy_from_slice(&pageable);
    let mut registered = gpu.register(pageable.clone()).unwrap();
    let mut part = pageable.clone();
    for host in [&mut pageable[..], &mut pinned[..], &mut wc[..], &mut registered[..]] {
        gpu.scope(&streams, |s| s.stream(0).htod(&host[..], s.device(&mut d))).unwrap();
        host.fill(0.0);
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d), &mut host[..])).unwrap();
        verify::exact(host, input).ensure().unwrap();
    }
    assert_eq!(registered.into_vec().len(), n);
    // Part of a Vec pinned for one transfer.
    gpu.pin_in_place(&mut part[1000..2000], |locked| {
        locked.fill(0.0);
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut d).slice(1000..2000), locked))
    })
    .unwrap()
    .unwrap();
    verify::exact(&part, input).ensure().unwrap();
}

/// Two device buffers shared by three streams (upload, compute, download), with no waits of the
/// program's own: only the waits the scope adds keep an upload from overwriting a buffer still in use.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn double_buffering_without_events_is_ordered_by_the_scope() {
    let (gpu, kernels, _lock) = gpu();
    let chunking = Chunking::new(64 << 20, 64, 1).unwrap();
    let iters = 50;
    let h_in = gpu.pinned_from_fn(chunking.elements, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(chunking.elements).unwrap();
    let mut bufs =
        vec![gpu.alloc::<f32>(chunking.max_chunk()).unwrap(), gpu.alloc::<f32>(chunking.max_chunk()).unwrap()];
    let streams = gpu.streams(3).unwrap();
    let ordering = gpu
        .scope(&streams, |s| {
            let d = s.devices(&mut bufs);
            for (c, out) in chunking.iter().zip(chunking.split_mut(&mut h_out)) {
                let buf = d[c.index % 2].slice(0..c.len);
                s.stream(0).htod(&h_in[c.range()], buf)?;
                kernels.process(s.stream(1), buf, iters)?;
                s.stream(2).dtoh(buf, out)?;
            }
            Ok::<_, anyhow::Error>(s.waits())
        })
        .unwrap();
    verify::exact(&h_out, |i| cpu::process(input(i), iters)).ensure().unwrap();
    assert_eq!(ordering.made, 0);
    assert!(ordering.added >= 2 * 64, "expected added waits, got {ordering:?}");
    let first = ordering.first_added.unwrap();
    assert!(first.contains("kernel process on stream 1") && first.contains("memcpy HtoD on stream 0"), "{first}");
}

/// The same with the events of CUDA's Exercise 3: the scope recognizes them and adds nothing; drop one
/// and it adds exactly what is missing.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn double_buffering_with_events_needs_no_added_waits() {
    let (gpu, kernels, _lock) = gpu();
    let chunking = Chunking::new(16 << 20, 32, 1).unwrap();
    let iters = 20;
    let h_in = gpu.pinned_from_fn(chunking.elements, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(chunking.elements).unwrap();
    let mut bufs =
        vec![gpu.alloc::<f32>(chunking.max_chunk()).unwrap(), gpu.alloc::<f32>(chunking.max_chunk()).unwrap()];
    let streams = gpu.streams(3).unwrap();
    for skip_upload_wait in [false, true] {
        h_out.fill(f32::NAN);
        let ordering = gpu
            .scope(&streams, |s| {
                let d = s.devices(&mut bufs);
                let (up, compute, down) = (s.stream(0), s.stream(1), s.stream(2));
                let mut freed: [Option<ScopeEvent>; 2] = [None, None];
                for (c, out) in chunking.iter().zip(chunking.split_mut(&mut h_out)) {
                    let b = c.index % 2;
                    let buf = d[b].slice(0..c.len);
                    if let Some(e) = freed[b] {
                        up.wait_event(e)?;
                    }
                    up.htod(&h_in[c.range()], buf)?;
                    if !(skip_upload_wait && c.index == 5) {
                        let uploaded = up.record_event()?;
                        compute.wait_event(uploaded)?;
                    }
                    kernels.process(compute, buf, iters)?;
                    let computed = compute.record_event()?;
                    down.wait_event(computed)?;
                    down.dtoh(buf, out)?;
                    freed[b] = Some(down.record_event()?);
                }
                Ok::<_, anyhow::Error>(s.waits())
            })
            .unwrap();
        verify::exact(&h_out, |i| cpu::process(input(i), iters)).ensure().unwrap();
        if skip_upload_wait {
            assert_eq!(ordering.added, 1, "{ordering:?}");
            assert!(ordering.first_added.as_deref().unwrap().starts_with("kernel process on stream 1"), "{ordering:?}");
        } else {
            assert_eq!(ordering.added, 0, "{ordering:?}");
            assert_eq!(ordering.made, 3 * 32 - 2);
        }
    }
}

/// Chunks of one buffer on many streams: disjoint ranges must not wait for each other, and the
/// result of each chunk's addition must land in its own place.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn sub_ranges_of_one_buffer_on_many_streams() {
    let (gpu, kernels, _lock) = gpu();
    let chunking = Chunking::new(10_000_019, 37, 8).unwrap();
    let a = gpu.pinned_from_fn(chunking.elements, input).unwrap();
    let b = gpu.pinned_from_fn(chunking.elements, |i| input(i + 7)).unwrap();
    let mut c = gpu.pinned::<f32>(chunking.elements).unwrap();
    let (mut da, mut db, mut dc) = (
        gpu.alloc(chunking.elements).unwrap(),
        gpu.alloc(chunking.elements).unwrap(),
        gpu.alloc(chunking.elements).unwrap(),
    );
    let streams = gpu.streams(chunking.streams).unwrap();
    let ordering = gpu
        .scope(&streams, |s| {
            let (da, db, dc) = (s.device(&mut da), s.device(&mut db), s.device(&mut dc));
            for (k, out) in chunking.iter().zip(chunking.split_mut(&mut c)) {
                let (st, r) = (s.stream(k.stream), k.range());
                st.fill(dc.slice(r.clone()), f32::NAN)?;
                st.htod(&a[r.clone()], da.slice(r.clone()))?;
                st.htod(&b[r.clone()], db.slice(r.clone()))?;
                kernels.vector_add(st, da.slice(r.clone()), db.slice(r.clone()), dc.slice(r.clone()))?;
                st.dtoh(dc.slice(r), out)?;
            }
            Ok::<_, anyhow::Error>(s.waits())
        })
        .unwrap();
    verify::exact(&c, |i| input(i) + input(i + 7)).ensure().unwrap();
    assert_eq!(ordering.added, 0, "disjoint chunks on their own streams need no cross-stream waits");
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn kernels_read_and_write_mapped_host_memory() {
    let (gpu, kernels, _lock) = gpu();
    assert!(gpu.info.can_map_host_memory);
    let n = 1 << 20;
    let mut h_in = gpu.pinned_with(n, HostAlloc::MAPPED).unwrap();
    h_in.iter_mut().enumerate().for_each(|(i, x)| *x = input(i));
    let mut h_out = gpu.pinned_with::<f32>(n, HostAlloc::MAPPED).unwrap();
    let streams = gpu.streams(1).unwrap();
    gpu.scope(&streams, |s| {
        let (i, o) = (s.mapped(&mut h_in)?, s.mapped(&mut h_out)?);
        kernels.scale(s.stream(0), i, o, 2.0)?;
        kernels.accumulate(s.stream(0), i, o)
    })
    .unwrap();
    verify::exact(&h_out, |i| input(i) * 2.0 + input(i)).ensure().unwrap();
    let mut plain = gpu.pinned::<f32>(4).unwrap();
    let err = gpu.scope(&streams, |s| s.mapped(&mut plain).map(|_| ())).unwrap_err();
    assert!(format!("{err:#}").contains("MAPPED"), "{err:#}");
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn errors_say_what_was_being_done() {
    let (gpu, kernels, _lock) = gpu();
    let streams = gpu.streams(1).unwrap();
    let (mut a, mut c) = (gpu.alloc::<f32>(10).unwrap(), gpu.alloc::<f32>(11).unwrap());
    let err = gpu
        .scope(&streams, |s| {
            let (a, c) = (s.device(&mut a), s.device(&mut c));
            kernels.vector_add(s.stream(0), a, a, c)
        })
        .unwrap_err();
    assert!(format!("{err:#}").contains("lengths differ"), "{err:#}");
    let host = vec![1.0f32; 5];
    let err = gpu.scope(&streams, |s| s.stream(0).htod(&host, s.device(&mut a))).unwrap_err();
    assert!(format!("{err:#}").contains("5 elements, destination 10"), "{err:#}");
    let too_big = gpu.info.total_memory / 4 + 1;
    let err = gpu.alloc::<f32>(too_big).unwrap_err();
    assert!(format!("{err:#}").contains("free"), "{err:#}");
    // Work goes only on the scope's own streams, named by index: one past the last panics, as a slice does.
    let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gpu.scope(&streams, |s| s.stream(streams.len()).htod(&host, s.device(&mut a).slice(0..5)))
    }));
    let why = past.unwrap_err();
    let why = why.downcast_ref::<String>().map(String::as_str).unwrap_or_default();
    assert!(why.starts_with(&format!("stream {0} of a scope of {0} streams", streams.len())), "{why}");
}

/// One operation whose input and output overlap would race with itself: refused, and nothing runs.
/// Disjoint parts of one buffer are fine.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn overlapping_input_and_output_are_refused() {
    let (gpu, kernels, _lock) = gpu();
    let streams = gpu.streams(1).unwrap();
    let n = 1 << 16;
    let h = gpu.pinned_from_fn(n, input).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    gpu.scope(&streams, |s| {
        let d = s.device(&mut d);
        s.stream(0).htod(&h, d)?;
        let err = kernels.scale(s.stream(0), d.slice(0..1000), d.slice(500..1500), 2.0).unwrap_err();
        assert!(format!("{err:#}").contains("overlapping bytes"), "{err:#}");
        let err = s.stream(0).dtod(d.slice(0..100), d.slice(99..199)).unwrap_err();
        assert!(format!("{err:#}").contains("overlapping bytes"), "{err:#}");
        // Disjoint halves: allowed. The second half becomes twice the first, the first half stays.
        kernels.scale(s.stream(0), d.slice(0..n / 2), d.slice(n / 2..n), 2.0)?;
        s.stream(0).dtoh(d, &mut back)
    })
    .unwrap();
    verify::exact(&back, |i| if i < n / 2 { input(i) } else { input(i - n / 2) * 2.0 }).ensure().unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn timed_scopes_measure_the_gpu() {
    let (gpu, kernels, _lock) = gpu();
    let streams = gpu.streams(2).unwrap();
    let mut d = gpu.alloc::<f32>(1 << 22).unwrap();
    // The first launch in a process loads the kernel (lazy loading): warm up before timing.
    gpu.timed(&streams, |s| kernels.process(s.stream(1), s.device(&mut d), 1)).unwrap();
    let short = gpu.timed(&streams, |s| kernels.process(s.stream(1), s.device(&mut d), 10)).unwrap();
    let long = gpu.timed(&streams, |s| kernels.process(s.stream(1), s.device(&mut d), 10_000)).unwrap();
    assert!(short > 0.0 && long > 5.0 * short, "short {short} ms, long {long} ms: the join must wait for stream 1");
}

/// Dropping the Gpu first once released the context and, with it, every allocation: a stale buffer's
/// free then freed a newer allocation, and pinned memory segfaulted. Now each resource keeps the context.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn resources_outlive_the_gpu_that_made_them() {
    let (gpu, _, _lock) = gpu();
    let n = 1 << 20;
    let stale = gpu.alloc::<f32>(n).unwrap();
    let mut pinned = gpu.pinned_from_fn(n, input).unwrap();
    let old_streams = gpu.streams(2).unwrap();
    let stager = gpu.stager::<f32>(2, 1 << 20).unwrap();
    drop(gpu);
    pinned[0] = input(0); // the host memory is still ours
    let gpu = Gpu::init().unwrap();
    let streams = gpu.streams(1).unwrap();
    let mut live = gpu.alloc::<f32>(n).unwrap();
    gpu.scope(&streams, |s| s.stream(0).htod(&pinned, s.device(&mut live))).unwrap();
    drop((stale, old_streams, stager)); // frees only what they own
    let mut newer = gpu.alloc::<f32>(n).unwrap();
    let zeros = vec![0f32; n];
    gpu.scope(&streams, |s| s.stream(0).htod(&zeros, s.device(&mut newer))).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(&mut live), &mut back)).unwrap();
    verify::exact(&back, input).ensure().unwrap();
    drop(gpu);
    drop((live, newer, pinned, back, streams)); // after their Gpu: no crash
}

/// An error in the middle of a scope (here a refused copy on stream 0) returns only after everything
/// already queued (a long kernel and a download on stream 1) has finished: no copy keeps running into
/// memory whose borrow ends.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn an_error_mid_scope_returns_only_when_the_gpu_is_done() {
    let (gpu, kernels, _lock) = gpu();
    let n = 1 << 22;
    let iters = 100_000;
    let streams = gpu.streams(2).unwrap();
    let h_in = gpu.pinned_from_fn(n, input).unwrap();
    let mut h_out = gpu.pinned::<f32>(n).unwrap();
    h_out.fill(f32::NAN);
    let (mut d, mut small) = (gpu.alloc::<f32>(n).unwrap(), gpu.alloc::<f32>(8).unwrap());
    let started = std::time::Instant::now();
    let err = gpu
        .scope(&streams, |s| {
            let d = s.device(&mut d);
            s.stream(1).htod(&h_in, d)?;
            kernels.process(s.stream(1), d, iters)?;
            s.stream(1).dtoh(d, &mut h_out)?;
            s.stream(0).htod(&h_in[..4], s.device(&mut small)) // 4 elements into 8: refused
        })
        .unwrap_err();
    assert!(format!("{err:#}").contains("4 elements, destination 8"), "{err:#}");
    eprintln!("the scope returned its error after {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    verify::within(&h_out, 4099, 0.0, |i| cpu::process(input(i), iters)).ensure().unwrap();
}

fn locked_host_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field =
        |name: &str| status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse::<u64>().ok();
    Some(field("VmLck:").unwrap_or(0) + field("VmPin:").unwrap_or(0))
}

/// Running a whole pipeline many times leaves device memory and locked host memory where they were.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn repeated_pipelines_leak_nothing() {
    let (gpu, kernels, _lock) = gpu();
    let run = || {
        let chunking = Chunking::new(4 << 20, 8, 4).unwrap();
        let h_in = gpu.pinned_from_fn(chunking.elements, input).unwrap();
        let mut h_out = gpu.pinned::<f32>(chunking.elements).unwrap();
        let mut bufs: Vec<_> = (0..chunking.streams).map(|_| gpu.alloc::<f32>(chunking.max_chunk()).unwrap()).collect();
        let streams = gpu.streams(chunking.streams).unwrap();
        let registered = gpu.register(vec![1f32; 1 << 16]).unwrap();
        gpu.scope(&streams, |s| {
            let d = s.devices(&mut bufs);
            for (c, out) in chunking.iter().zip(chunking.split_mut(&mut h_out)) {
                let buf = d[c.stream].slice(0..c.len);
                s.stream(c.stream).htod(&h_in[c.range()], buf)?;
                kernels.process(s.stream(c.stream), buf, 3)?;
                s.stream(c.stream).dtoh(buf, out)?;
            }
            Ok::<_, anyhow::Error>(())
        })
        .unwrap();
        verify::exact(&h_out, |i| cpu::process(input(i), 3)).ensure().unwrap();
        drop(registered);
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

/// The tracker and its vector clocks on small sequences (from an adversarial review): how many waits
/// the scope adds where the program's own do not order a conflict. W = fill (a write), R = a download
/// (a read), e = record_event, "s1 waits e" = wait_event.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_scope_adds_exactly_the_missing_waits() {
    let (gpu, _, _lock) = gpu();
    let n = 1 << 16;
    let streams = gpu.streams(3).unwrap();
    let mut d = gpu.alloc::<f32>(2 * n).unwrap();
    let mut h = gpu.pinned::<f32>(2 * n).unwrap();
    let mut added = |case: u32| -> usize {
        gpu.scope(&streams, |s| {
            let d = s.device(&mut d);
            let (s0, s1, s2) = (s.stream(0), s.stream(1), s.stream(2));
            let (all, half) = (d.slice(0..n), d.slice(0..n / 2));
            let (h1, rest) = h.split_at_mut(n);
            let (h2, h3) = rest.split_at_mut(n / 2);
            match case {
                // W s0; e; s1 waits e; W s1 (it covers s0's); R s2 of half: one wait, on s1's write.
                1 => {
                    s0.fill(all, 1.0)?;
                    let e = s0.record_event()?;
                    s1.wait_event(e)?;
                    s1.fill(all, 2.0)?;
                    s2.dtoh(half, &mut h1[..n / 2])?;
                }
                // e recorded on s0 before its write: waiting for it does not cover the write.
                2 => {
                    let e = s0.record_event()?;
                    s0.fill(all, 1.0)?;
                    s1.wait_event(e)?;
                    s1.dtoh(all, h1)?;
                }
                // e after W1, then W2 on s0: waiting for e covers W1 only.
                3 => {
                    s0.fill(all, 1.0)?;
                    let e = s0.record_event()?;
                    s0.fill(all, 2.0)?;
                    s1.wait_event(e)?;
                    s1.dtoh(all, h1)?;
                }
                // R s0, R s1, R s0 (covers the first), W s2: waits for both streams' reads.
                4 => {
                    s0.dtoh(half, &mut h1[..n / 2])?;
                    s1.dtoh(half, h2)?;
                    s0.dtoh(half, &mut h3[..n / 2])?;
                    s2.fill(all, 3.0)?;
                }
                // W s0; e0; s1 waits e0; e1 on s1; s2 waits e1; R s2: ordered transitively.
                5 => {
                    s0.fill(all, 1.0)?;
                    let e0 = s0.record_event()?;
                    s1.wait_event(e0)?;
                    let e1 = s1.record_event()?;
                    s2.wait_event(e1)?;
                    s2.dtoh(all, h1)?;
                }
                // Overlapping ranges: W s0 [0, n); W s1 [n/2, 3n/2): one wait; R s2 [n/2, n/2 + 10):
                // one more, on s1's write, which covers s0's through the clocks.
                _ => {
                    s0.fill(d.slice(0..n), 1.0)?;
                    s1.fill(d.slice(n / 2..3 * n / 2), 2.0)?;
                    s2.dtoh(d.slice(n / 2..n / 2 + 10), &mut h1[..10])?;
                }
            }
            Ok::<_, anyhow::Error>(s.waits().added)
        })
        .unwrap()
    };
    let got: Vec<usize> = (1..=6).map(&mut added).collect();
    assert_eq!(got, vec![1, 1, 1, 2, 0, 2]);
}

/// Empty ranges are ordinary operations: they succeed and leave the data alone.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn zero_length_operations_do_nothing() {
    let (gpu, kernels, _lock) = gpu();
    let streams = gpu.streams(2).unwrap();
    let mut d = gpu.alloc::<f32>(16).unwrap();
    let h = gpu.pinned_from_fn(16, input).unwrap();
    let mut back = gpu.pinned::<f32>(16).unwrap();
    gpu.scope(&streams, |s| {
        let d = s.device(&mut d);
        s.stream(0).htod(&h, d)?;
        let empty = d.slice(3..3);
        s.stream(1).htod(&[], empty)?;
        s.stream(1).fill(empty, 9.0)?;
        kernels.process(s.stream(1), empty, 7)?;
        s.stream(1).dtoh(empty, &mut [])?;
        s.stream(0).dtoh(d, &mut back)
    })
    .unwrap();
    verify::exact(&back, input).ensure().unwrap();
}

/// A panic inside a scope, after a large download was queued, unwinds only once the download is done;
/// a panic inside `pin_in_place` leaves the memory unregistered, so it can be pinned again.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn panics_unwind_only_after_the_gpu_is_done() {
    let (gpu, _, _lock) = gpu();
    let n = 1 << 24;
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    let h = gpu.pinned_from_fn(n, input).unwrap();
    gpu.scope(&streams, |s| s.stream(0).htod(&h, s.device(&mut d))).unwrap();
    let mut back = vec![0f32; n];
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = gpu.scope(&streams, |s| -> cuda_scope::Result<()> {
            s.stream(0).dtoh(s.device(&mut d), &mut back)?;
            panic!("a bug in the program, mid-scope");
            #[allow(unreachable_code)]
            Ok(())
        });
    }));
    assert!(caught.is_err());
    verify::exact(&back, input).ensure().unwrap();
    let mut v = vec![1f32; 1 << 20];
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = gpu.pin_in_place(&mut v, |_| panic!("a bug while pinned"));
    }));
    assert!(caught.is_err());
    gpu.pin_in_place(&mut v, |v| v[0] = 2.0).expect("unregistered by the panic, so it pins again");
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_machine_reports_the_link_clocks_and_where_a_buffer_lies() {
    let (gpu, _, _lock) = gpu();
    let h = measure::machine::Health::read(&gpu);
    // The driver ships NVML: it must be read, and what it says must hang together.
    assert_eq!(h.nvml_missing, None, "{}", h.summary());
    let link = h.link.as_ref().expect("NVML reports the PCIe link");
    assert!(link.gen >= 1 && link.gen <= link.max_gen && link.width <= link.max_width, "{link:?}");
    let (cur, max) = h.sm_clock_mhz.expect("NVML reports the SM clock");
    assert!(cur > 0 && cur <= max, "{cur} of {max}");
    assert!(h.link_gbps(&gpu).unwrap() > 1.0);
    let pinned = gpu.pinned::<f32>(1 << 20).unwrap();
    let line = h.numa_line(measure::machine::numa_node_of(&pinned[..]));
    assert!(line.contains("NUMA"), "{line}");
    eprintln!("{}\n{line}", h.summary());
}

#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_chase_kernel_ends_where_its_cpu_twin_does_in_mapped_and_device_memory() {
    let (gpu, kernels, _lock) = gpu();
    let (n, stride) = (1 << 16, 32);
    let streams = gpu.streams(1).unwrap();
    let mut mapped = gpu.pinned_with::<u32>(n, HostAlloc::MAPPED).unwrap();
    mapped.iter_mut().enumerate().for_each(|(i, x)| *x = cpu::chain(i, n, stride));
    let mut device = gpu.alloc::<u32>(n).unwrap();
    let mut end = gpu.alloc::<u32>(1).unwrap();
    let mut got = [u32::MAX];
    gpu.scope(&streams, |s| s.stream(0).htod(&mapped, s.device(&mut device))).unwrap();
    for accesses in [1, 777, 2048] {
        for in_device in [true, false] {
            gpu.scope(&streams, |s| {
                let (next, e) =
                    (if in_device { s.device(&mut device) } else { s.mapped(&mut mapped)? }, s.device(&mut end));
                kernels.chase(s.stream(0), next, 5, accesses, e)?; // chase<<<1, 1>>>
                s.stream(0).dtoh(e, &mut got)
            })
            .unwrap();
            assert_eq!(got[0], cpu::chase(n, stride, 5, accesses), "{accesses} accesses, device memory: {in_device}");
        }
    }
    // An empty chain is refused before anything is queued.
    let e = gpu.scope(&streams, |s| {
        let empty = s.device(&mut device).slice(0..0);
        kernels.chase(s.stream(0), empty, 0, 1, s.device(&mut end))
    });
    assert!(format!("{:#}", e.unwrap_err()).contains("empty chain"));
    // Links that point outside the chain (safe code can write any data) lead back to link 0: the kernel
    // reads nothing but the chain, and the context survives.
    for bad in [128u32, 0xFFFF_FFF0, n as u32] {
        let links = [bad, bad, bad];
        gpu.scope(&streams, |s| {
            let (next, e) = (s.device(&mut device).slice(0..3), s.device(&mut end));
            s.stream(0).htod(&links, next)?;
            kernels.chase(s.stream(0), next, 2, 7, e)?;
            s.stream(0).dtoh(e, &mut got)
        })
        .unwrap();
        assert_eq!(got[0], 0, "link {bad:#x}");
    }
}
