//! What the scope's bookkeeping costs the host per operation, beside the bare driver call.
//!
//!     cargo bench -p common --bench scope
//!
//! Each benchmark queues tiny 4-byte memsets (GPU work that takes next to nothing, so the host's
//! enqueue cost is what is timed, on the host clock) and synchronizes outside the timed part:
//! - `bare`: `cuMemsetD32Async` on a raw stream, nothing else;
//! - `bare + event`: the same and a `cuEventRecord` after each, which is what tracking adds on the GPU side;
//! - `scope, one stream`: `Scope::fill`, which checks, records an event and remembers the access;
//! - `scope, 4 streams, disjoint`: four streams writing their own ranges, no waits needed;
//! - `scope, 4 streams, conflicting`: four streams writing one range, a cross-stream wait per operation.

use std::time::{Duration, Instant};

use common::ffi;
use common::Gpu;
use criterion::{criterion_group, criterion_main, Criterion};

/// Operations per timed batch: a scope holds its events until it ends, so batches stay bounded.
const BATCH: u64 = 512;

fn batches(iters: u64, mut batch: impl FnMut(u64) -> Duration) -> Duration {
    let (mut left, mut total) = (iters, Duration::ZERO);
    while left > 0 {
        let n = left.min(BATCH);
        total += batch(n);
        left -= n;
    }
    total
}

fn enqueue(c: &mut Criterion) {
    let gpu = match Gpu::init() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("scope benchmarks skipped: {e:#}");
            return;
        }
    };
    let mut g = c.benchmark_group("enqueue");
    g.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));

    // The bare driver: a raw stream, raw memory and events of our own, in the Gpu's (current) context.
    let (mut raw_stream, mut raw_mem) = (std::ptr::null_mut(), 0);
    let mut raw_events = vec![std::ptr::null_mut(); BATCH as usize];
    // SAFETY: valid out-pointers in the current context; released at the end of this function.
    unsafe {
        assert_eq!(ffi::cuStreamCreate(&mut raw_stream, 1), ffi::SUCCESS);
        assert_eq!(ffi::cuMemAlloc_v2(&mut raw_mem, 4 * 4096), ffi::SUCCESS);
        for e in &mut raw_events {
            assert_eq!(ffi::cuEventCreate(e, 0), ffi::SUCCESS);
        }
    }
    for with_event in [false, true] {
        let name = if with_event { "bare + event" } else { "bare" };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                batches(iters, |n| {
                    let t = Instant::now();
                    for (i, event) in raw_events.iter().enumerate().take(n as usize) {
                        // SAFETY: 4 bytes inside the raw allocation, on the raw stream; a live event.
                        unsafe {
                            ffi::cuMemsetD32Async(raw_mem + 4 * (i as u64 % 4096), 1, 1, raw_stream);
                            if with_event {
                                ffi::cuEventRecord(*event, raw_stream);
                            }
                        }
                    }
                    let dt = t.elapsed();
                    // SAFETY: the raw stream.
                    unsafe { ffi::cuStreamSynchronize(raw_stream) };
                    dt
                })
            })
        });
    }

    let streams = gpu.streams(4).unwrap();
    let mut d = gpu.alloc::<f32>(4096).unwrap();
    for (name, lanes, conflicting) in [
        ("scope, one stream", 1, false),
        ("scope, 4 streams, disjoint", 4, false),
        ("scope, 4 streams, conflicting", 4, true),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                batches(iters, |n| {
                    gpu.scope(&streams, |s| {
                        let d = s.device(&mut d);
                        let t = Instant::now();
                        for i in 0..n as usize {
                            let at = if conflicting { 0 } else { i % 4096 };
                            s.fill(&streams[i % lanes], d.slice(at..at + 1), 1.0)?;
                        }
                        Ok(t.elapsed())
                    })
                    .unwrap()
                })
            })
        });
    }
    g.finish();
    // SAFETY: the raw resources made above, each released once, after their work finished.
    unsafe {
        ffi::cuStreamSynchronize(raw_stream);
        for e in raw_events {
            ffi::cuEventDestroy_v2(e);
        }
        ffi::cuMemFree_v2(raw_mem);
        ffi::cuStreamDestroy_v2(raw_stream);
    }
}

criterion_group!(benches, enqueue);
criterion_main!(benches);
