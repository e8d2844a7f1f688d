//! Batches of copies (`cuMemcpyBatchAsync`) and graphs of a scope's work, through the scope: every range
//! of a batch ordered against the other streams, lists that do not match refused before anything is
//! queued, graphs replayed with the right bytes and ordered like any operation. Each needs an NVIDIA GPU:
//! without one they are reported as ignored, and `cargo xtask test` runs them where it finds a driver.

mod support;

use cuda_scope::{Gpu, SrcOrder};
use support::{busy_cpu, TestKernels};

fn gpu() -> (Gpu, std::sync::MutexGuard<'static, ()>) {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    (Gpu::init().expect("these tests need a GPU"), lock)
}

/// The driver this runs on has the batched copy: CUDA 12.8 or newer must (the project needs 13.0).
fn batches(gpu: &Gpu) -> bool {
    match cuda_scope::batch_support() {
        Ok(()) => true,
        Err(why) if gpu.info.driver_version < (12, 8) => {
            eprintln!("skipped: {why}");
            false
        }
        Err(why) => panic!("a driver for CUDA {:?} without the batched copy: {why}", gpu.info.driver_version),
    }
}

const N: usize = 64; // buffers
const LEN: usize = 4099; // elements each: not a round number of anything

/// A long kernel on stream 1 writes a buffer in place; a batch on stream 0 downloads its 64 slices. Nothing
/// of the program orders the two: the scope adds the wait, and every element is the kernel's result.
/// Then the other way: a batch uploads the slices on stream 0 (from pageable memory, each source order),
/// and a kernel on stream 1 reads them; again the scope orders it.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_batch_over_ranges_another_stream_writes_is_ordered_by_the_scope() {
    let (gpu, _lock) = gpu();
    if !batches(&gpu) {
        return;
    }
    let k = TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let start: Vec<f32> = (0..N * LEN).map(|i| (i % 1000) as f32 / 1000.0).collect();
    let mut d = gpu.alloc::<f32>(N * LEN).unwrap();
    let mut back: Vec<Vec<f32>> = vec![vec![0.0; LEN]; N];
    let waits = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            s.stream(1).htod(&start, v)?;
            k.busy(s.stream(1), v, 3000)?; // long enough that an unordered download would see zeros or input
            let parts: Vec<_> = (0..N).map(|i| v.slice(i * LEN..(i + 1) * LEN)).collect();
            s.stream(0).dtoh_batch(&parts, back.iter_mut().map(|b| &mut b[..]))?;
            Ok::<_, cuda_scope::Error>(s.waits())
        })
        .unwrap();
    assert_eq!((waits.made, waits.added), (0, 1), "{waits:?}");
    let first = waits.first_added.unwrap();
    assert!(
        first.contains("memcpy batch DtoH on stream 0 reads") && first.contains("kernel busy on stream 1"),
        "{first}"
    );
    let wrong = (0..N * LEN).filter(|&i| back[i / LEN][i % LEN] != busy_cpu(start[i], 3000)).count();
    assert_eq!(wrong, 0, "{wrong} elements differ from the CPU's");

    for order in SrcOrder::ALL {
        let tensors: Vec<Vec<f32>> = (0..N).map(|t| (0..LEN).map(|j| (t * 7 + j) as f32).collect()).collect();
        let (x, mut y) = (gpu.alloc::<f32>(N * LEN).unwrap(), gpu.alloc::<f32>(N * LEN).unwrap());
        let mut x = x;
        let mut out = vec![0f32; N * LEN];
        let waits = gpu
            .scope(&streams, |s| {
                let (dx, dy) = (s.device(&mut x), s.device(&mut y));
                let parts: Vec<_> = (0..N).map(|i| dx.slice(i * LEN..(i + 1) * LEN)).collect();
                let srcs: Vec<&[f32]> = tensors.iter().map(|t| &t[..]).collect();
                s.stream(0).htod_batch(&srcs, &parts, order)?;
                k.saxpy(s.stream(1), dx, dy, 2.0)?; // y = 2x + 0
                s.stream(1).dtoh(dy, &mut out)?;
                Ok::<_, cuda_scope::Error>(s.waits())
            })
            .unwrap();
        assert_eq!(waits.added, 1, "{order:?}: {waits:?}");
        let wrong = (0..N * LEN).filter(|&i| out[i] != 2.0 * tensors[i / LEN][i % LEN]).count();
        assert_eq!(wrong, 0, "{order:?}: {wrong} elements wrong");
    }
}

/// Lists of different lengths, a copy whose source and destination differ, and two destinations that
/// overlap are refused before anything is queued; the device buffer is untouched.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_batch_whose_lists_do_not_match_is_refused() {
    let (gpu, _lock) = gpu();
    if !batches(&gpu) {
        return;
    }
    let streams = gpu.streams(1).unwrap();
    let mut d = gpu.alloc::<u32>(64).unwrap();
    let ones = vec![1u32; 64];
    let untouched = |d: &mut cuda_scope::DeviceBuffer<u32>| {
        let mut now = vec![7u32; 64];
        gpu.scope(&streams, |s| s.stream(0).dtoh(s.device(d), &mut now)).unwrap();
        assert!(now.iter().all(|v| *v == 0), "the refused batch wrote the buffer");
    };
    let (a, b) = (&ones[..8], &ones[..9]);
    let e = gpu.scope(&streams, |s| {
        let v = s.device(&mut d);
        s.stream(0).htod_batch(&[a, a], &[v.slice(0..8)], SrcOrder::StreamOrder)
    });
    assert!(format!("{:#}", e.unwrap_err()).contains("htod_batch: 2 sources but 1 destinations"));
    untouched(&mut d);
    let e = gpu.scope(&streams, |s| {
        let v = s.device(&mut d);
        s.stream(0).htod_batch(&[a, b], &[v.slice(0..8), v.slice(8..16)], SrcOrder::Any)
    });
    assert!(format!("{:#}", e.unwrap_err()).contains("htod_batch: copy 1: source has 9 elements, destination 8"));
    untouched(&mut d);
    let e = gpu.scope(&streams, |s| {
        let v = s.device(&mut d);
        s.stream(0).htod_batch(&[a, a], &[v.slice(0..8), v.slice(4..12)], SrcOrder::StreamOrder)
    });
    let e = format!("{:#}", e.unwrap_err());
    assert!(e.contains("writes overlapping bytes of one buffer twice"), "{e}");
    untouched(&mut d);
    let mut host = [vec![0u32; 8], vec![0u32; 8]];
    let e = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            s.stream(0).dtoh_batch(&[v.slice(0..8)], host.iter_mut().map(|h| &mut h[..]))
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("dtoh_batch: 1 sources but 2 destinations"), "{e:#}");
}

/// A graph that runs a kernel on a buffer in place and downloads it, replayed three times: the kernel ran
/// three times, and the bytes downloaded are the CPU's. Its launch is ordered after an upload on another
/// stream like any operation, and a graph whose kernel reads and writes overlapping bytes is refused.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn a_graph_replayed_gives_the_right_bytes() {
    let (gpu, _lock) = gpu();
    let k = TestKernels::load(&gpu);
    let streams = gpu.streams(2).unwrap();
    let n = 100_003;
    let h = gpu.pinned_from_fn(n, |i| (i % 100) as f32 / 100.0).unwrap();
    let mut back = gpu.pinned::<f32>(n).unwrap();
    let mut d = gpu.alloc::<f32>(n).unwrap();
    let (nodes, waits) = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            s.stream(1).htod(&h, v)?; // on another stream: the first launch must wait for it
            let graph = s.graph(|g| {
                k.busy(g, v, 100)?; // captured, not run
                g.dtoh(v, &mut back)
            })?;
            for _ in 0..3 {
                s.stream(0).replay(&graph)?;
            }
            Ok::<_, cuda_scope::Error>((graph.nodes(), s.waits()))
        })
        .unwrap();
    assert_eq!(nodes, 2);
    assert_eq!(waits.added, 1, "{waits:?}");
    assert!(waits.first_added.unwrap().contains("graph launch on stream 0"));
    let wrong = (0..n).filter(|&i| back[i] != busy_cpu(busy_cpu(busy_cpu(h[i], 100), 100), 100)).count();
    assert_eq!(wrong, 0, "{wrong} of {n} elements differ from three rounds on the CPU");

    let e = gpu
        .scope(&streams, |s| {
            let v = s.device(&mut d);
            s.graph(|g| k.saxpy(g, v.slice(0..512), v.slice(256..768), 1.0)).map(|_| ())
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("reads and writes overlapping bytes"), "{e:#}");
    // A failed build leaves no capture behind: the scope after it works.
    gpu.scope(&streams, |s| s.stream(0).htod(&h, s.device(&mut d))).unwrap();
}
