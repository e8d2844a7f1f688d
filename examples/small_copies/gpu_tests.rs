//! The lesson's ways on the GPU: every way brings every byte of every buffer back, the copy kernel does
//! what its CPU twin does (whatever its table holds), and the planner predicts every rival and runs it.
//! Each needs an NVIDIA GPU: without one they are reported as ignored, and `cargo xtask test` runs them
//! where it finds a driver.

use cuda_scope::Gpu;
use kernels::{cpu, Kernels, TableCopy};
use measure::timing::Repeats;

use crate::{
    buffers::{BufferPlacement, BufferSet},
    plan::{placements, rivals, SetPlan},
    rig::SmallCopiesRig,
    ways::TransferWay,
};

const QUICK: Repeats = Repeats { warmup: 0, repeats: 2 };

/// The GPU with the lessons' kernels, and a lock: libtest runs tests on parallel threads, and those of
/// one test binary share one device.
fn gpu() -> (Gpu, Kernels, std::sync::MutexGuard<'static, ()>) {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = Gpu::init().expect("these tests need a GPU");
    let kernels = Kernels::load(&gpu).unwrap();
    (gpu, kernels, lock)
}

/// The lock, a rig for `set` alone on one stream, and where the set's buffers lie. The lock comes first,
/// so that it is dropped last, after the rig and its GPU.
fn rig_for(set: &BufferSet) -> (std::sync::MutexGuard<'static, ()>, SmallCopiesRig, BufferPlacement) {
    let (gpu, kernels, lock) = gpu();
    let places = BufferPlacement::new(set);
    let rig = SmallCopiesRig::new(gpu, kernels, std::slice::from_ref(&places), 1, QUICK).unwrap();
    (lock, rig, places)
}

/// Odd sizes (4 and 100 bytes: the kernel's byte path), aligned ones, a 64 KiB pair, and 300 tiny
/// buffers: every way, each checked byte for byte against the inputs after its outputs were poisoned.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn every_way_brings_every_byte_back() {
    let (gpu, kernels, _lock) = gpu();
    let sets =
        [BufferSet::parse("4*3,1KiB*5,100*7,64KiB*2").unwrap(), BufferSet::uniform(300, 256), BufferSet::model()];
    let places: Vec<BufferPlacement> = sets.iter().map(BufferPlacement::new).collect();
    let zero_copy = gpu.info.can_map_host_memory;
    let mut rig = SmallCopiesRig::new(gpu, kernels, &places, 3, QUICK).unwrap();
    let ways = TransferWay::all(3, cuda_scope::batch_support().is_ok(), zero_copy);
    assert!(ways.len() >= 10, "the batched ways run on a CUDA 13 driver: {:?}", cuda_scope::batch_support());
    assert_eq!(ways, rig.ways());
    for set in &sets {
        let run = rig.run_set(set, &ways).unwrap();
        assert_eq!(run.ways.len(), ways.len());
        for w in &run.ways {
            assert_eq!(
                (w.check.buffers, w.check.bytes, w.check.wrong_buffers),
                (set.count(), set.bytes(), 0),
                "{}",
                w.name
            );
            assert!(w.gpu.median_ms > 0.0 && w.wall.median_ms >= w.gpu.median_ms * 0.5, "{}: {:?}", w.name, w);
        }
        assert!(run.one_copy_ms > 0.0);
    }
}

/// The kernel against its twin, both ways, over a table with aligned and odd entries, and entries that
/// reach past either buffer (skipped, by both).
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_copy_kernel_matches_its_cpu_twin_both_ways() {
    let (gpu, kernels, _lock) = gpu();
    let packed: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let table: Vec<u64> =
        vec![0, 0, 4096, 4096, 8192, 65536, 3, 70_001, 5, 69_990, 100, 20, 100, 200, 1 << 40, 0, 0, 0, 8, 300];
    let whole = &table[..table.len() - 2]; // 6 whole entries
    let (poison, mut arena, mut back) = (vec![0xEEu8; 70_100], vec![0u8; 70_100], vec![0u8; packed.len()]);
    let mut d_packed = gpu.alloc::<u8>(packed.len()).unwrap();
    let (mut d_arena, mut d_table) = (gpu.alloc::<u8>(arena.len()).unwrap(), gpu.alloc::<u64>(whole.len()).unwrap());
    let streams = gpu.streams(1).unwrap();
    gpu.scope(&streams, |s| {
        let (p, a, t) = (s.device(&mut d_packed), s.device(&mut d_arena), s.device(&mut d_table));
        let st = s.stream(0);
        st.htod(&packed, p)?;
        st.htod(&poison, a)?;
        st.htod(whole, t)?;
        kernels.copy_by_table(st, TableCopy::Scatter, p.read_only(), t.read_only(), a, 65536)?;
        st.dtoh(a, &mut arena)?;
        kernels.copy_by_table(st, TableCopy::Gather, a.read_only(), t.read_only(), p, 65536)?;
        st.dtoh(p, &mut back)
    })
    .unwrap();
    let mut expected = vec![0xEEu8; 70_100];
    cpu::copy_by_table(TableCopy::Scatter, &packed, whole, &mut expected);
    assert!(arena == expected, "the scatter differs from its twin");
    let mut expected_back = packed.clone();
    cpu::copy_by_table(TableCopy::Gather, &expected, whole, &mut expected_back);
    assert!(back == expected_back, "the gather differs from its twin");
    // A table that is not whole triples is refused before anything runs.
    let e = gpu
        .scope(&streams, |s| {
            let (p, a, t) = (s.device(&mut d_packed), s.device(&mut d_arena), s.device(&mut d_table));
            kernels.copy_by_table(s.stream(0), TableCopy::Scatter, p.read_only(), t.slice(0..17).read_only(), a, 1)
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("not whole (offset, offset, bytes) triples"), "{e:#}");
}

/// The planner measures its costs, predicts every rival, recommends one, and runs them all.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_planner_predicts_and_runs_every_rival() {
    let (gpu, kernels, _lock) = gpu();
    let set = BufferSet::parse("256KiB*4,4KiB*64,16*100").unwrap();
    let ways = rivals(gpu.info.can_map_host_memory, cuda_scope::batch_support().is_ok());
    let mut rig = SmallCopiesRig::new(gpu, kernels, &placements(&set), 2, QUICK).unwrap();
    let plan = SetPlan::make(&mut rig, &set, &ways).unwrap();
    assert_eq!(plan.predictions.len(), ways.len());
    assert_eq!(plan.run.ways.len(), ways.len());
    assert!(plan.predictions.iter().all(|p| p.wall_ms.is_finite() && p.wall_ms > 0.0), "{:?}", plan.predictions);
    assert!(ways.contains(&plan.recommended));
    assert!(plan.verdict().contains("is recommended, predicted"), "{}", plan.verdict());
    eprintln!("{}\n{}", plan.table().render(), plan.verdict());
}

/// The scope's price: a round trip of one memcpy per buffer through the scope and the same calls made
/// bare, in turn; the bare calls bring every byte back too.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_scopes_price_is_held_against_the_same_calls_made_bare() {
    let set = BufferSet::uniform(100, 4096);
    let (_lock, mut rig, places) = rig_for(&set);
    let run = rig.run_set(&set, &[TransferWay::Each { streams: 1, pageable: false, coalesced: false }]).unwrap();
    assert!(run.scope_price.is_none(), "run_set alone does not price the scope");
    let price = rig.scope_price(&set).unwrap();
    assert_eq!(price.copies, 200);
    assert!(price.scope_us > 0.0 && price.bare_us > 0.0 && price.ratio.is_finite(), "{price:?}");
    // The bare calls alone, after the outputs were poisoned, bring every byte back.
    let mut none = crate::rig::PageableCopies { ins: vec![], outs: vec![] };
    rig.poison(&places, &mut none).unwrap();
    let pieces: Vec<_> = (0..100).map(|i| (places.host_range(i), places.device_range(i).start)).collect();
    assert!(rig.bare_round_trip(&pieces).unwrap() > 0.0);
    let check = rig.check(&places, TransferWay::Each { streams: 1, pageable: false, coalesced: false }, &none);
    check.ensure("the bare calls").unwrap();
    eprintln!("{price:?}");
}

/// The packed way's parts measured alone: packing and unpacking on its threads, held against the packed
/// way's wall time over the same set.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_packed_way_is_held_against_its_parts_measured_alone() {
    let set = BufferSet::uniform(1000, 4096);
    let (_lock, mut rig, _) = rig_for(&set);
    let mut run = rig.run_set(&set, &[TransferWay::Packed]).unwrap();
    assert!(run.packed_parts.is_none(), "run_set alone does not measure the parts");
    let parts = rig.packed_parts(&set).unwrap();
    let most = crate::packing::MOST_THREADS;
    assert!((1..=most).contains(&parts.threads) && parts.pack_ms > 0.0 && parts.unpack_ms > 0.0, "{parts:?}");
    run.packed_parts = Some(parts);
    let table = crate::results::packed_table(std::slice::from_ref(&run)).unwrap().render();
    assert!(table.lines().any(|l| l.starts_with("1000 x 4 KiB")), "{table}");
    eprintln!("{table}");
}
