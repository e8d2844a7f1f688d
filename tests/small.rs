//! The small-copies lesson's ways on the GPU: every way brings every byte of every buffer back, the scatter
//! and gather kernels do what their CPU twins do (whatever their tables hold), and the planner predicts
//! every rival and runs it. Each needs an NVIDIA GPU: without one they are reported as ignored, and
//! `cargo xtask test` runs them where it finds a driver.

use kernels::cpu;
use measure::{
    small::{Layout, Rig, Set, Way},
    small_plan,
    timing::Repeats,
};

mod support;

use support::gpu;

const QUICK: Repeats = Repeats { warmup: 0, repeats: 2 };

/// Odd sizes (4 and 100 bytes: the kernels' byte path), aligned ones, a 64 KiB pair, and 300 tiny
/// buffers: every way, each checked byte for byte against the inputs after its outputs were poisoned.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn every_way_brings_every_byte_back() {
    let (gpu, kernels, _lock) = gpu();
    let sets = [Set::parse("4*3,1KiB*5,100*7,64KiB*2").unwrap(), Set::uniform(300, 256), Set::model()];
    let layouts: Vec<Layout> = sets.iter().map(Layout::new).collect();
    let mut rig = Rig::new(&gpu, &kernels, &layouts, 3).unwrap();
    let ways = Way::all(3, common::batch_support().is_ok(), gpu.info.can_map_host_memory);
    assert!(ways.len() >= 10, "the batched ways run on a CUDA 13 driver: {:?}", common::batch_support());
    for set in &sets {
        let run = rig.run_set(set, &ways, QUICK).unwrap();
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

/// The kernels against their twins over a table with aligned and odd entries, and entries that reach
/// past either buffer (skipped, by both).
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn scatter_and_gather_match_their_cpu_twins() {
    let (gpu, kernels, _lock) = gpu();
    let packed: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let table: Vec<u64> =
        vec![0, 0, 4096, 4096, 8192, 65536, 3, 70_001, 5, 69_990, 100, 20, 100, 200, 1 << 40, 0, 0, 0, 8, 300];
    let poison = vec![0xEEu8; 70_100];
    let mut arena = vec![0u8; 70_100];
    let (mut d_packed, mut d_arena, mut d_table) = (
        gpu.alloc::<u8>(packed.len()).unwrap(),
        gpu.alloc::<u8>(arena.len()).unwrap(),
        gpu.alloc::<u64>(table.len() - 2).unwrap(),
    );
    let streams = gpu.streams(1).unwrap();
    let mut back = vec![0u8; packed.len()];
    gpu.scope(&streams, |s| {
        let (p, a, t) = (s.device(&mut d_packed), s.device(&mut d_arena), s.device(&mut d_table));
        let st = s.stream(0);
        st.htod(&packed, p)?;
        st.htod(&poison, a)?;
        st.htod(&table[..table.len() - 2], t)?; // 6 whole entries
        kernels.scatter(st, p.read_only(), t.read_only(), a, 65536)?;
        st.dtoh(a, &mut arena)?;
        kernels.gather(st, a.read_only(), t.read_only(), p, 65536)?;
        st.dtoh(p, &mut back)
    })
    .unwrap();
    let mut expected = vec![0xEEu8; 70_100];
    cpu::scatter(&packed, &table[..table.len() - 2], &mut expected);
    assert!(arena == expected, "scatter differs from its twin");
    let mut expected_back = packed.clone();
    cpu::gather(&expected, &table[..table.len() - 2], &mut expected_back);
    assert!(back == expected_back, "gather differs from its twin");
    // A table that is not whole triples is refused before anything runs.
    let e = gpu
        .scope(&streams, |s| {
            let (p, a, t) = (s.device(&mut d_packed), s.device(&mut d_arena), s.device(&mut d_table));
            kernels.scatter(s.stream(0), p.read_only(), t.slice(0..17).read_only(), a, 1)
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("not whole (offset, offset, bytes) triples"), "{e:#}");
}

/// The planner measures its costs, predicts every rival, recommends one, and runs them all.
#[test]
#[ignore = "needs an NVIDIA GPU; cargo xtask test runs it where a driver is found"]
fn the_planner_predicts_and_runs_every_rival() {
    let (gpu, kernels, _lock) = gpu();
    let set = Set::parse("256KiB*4,4KiB*64,16*100").unwrap();
    let ways = small_plan::rivals(gpu.info.can_map_host_memory, common::batch_support().is_ok());
    let plan = small_plan::plan(&gpu, &kernels, &set, &ways, 2, QUICK).unwrap();
    assert_eq!(plan.predictions.len(), ways.len());
    assert_eq!(plan.run.ways.len(), ways.len());
    assert!(plan.predictions.iter().all(|p| p.wall_ms.is_finite() && p.wall_ms > 0.0), "{:?}", plan.predictions);
    assert!(ways.contains(&plan.recommended));
    assert!(plan.verdict().contains("is recommended, predicted"), "{}", plan.verdict());
    eprintln!("{}\n{}", plan.table().render(), plan.verdict());
}
