//! The interleaved judgement of a lesson's pairs, and what it prints.

use figures::{Figure, MemoryKind, Stats};

use super::*;

/// A run's figures: a pinned copy of 64 MiB at `copy` ms, a pageable one at `pageable` ms, host-timed
/// calls at `host` ms.
fn run(copy: f64, pageable: f64, host: f64) -> Vec<Figure> {
    vec![
        Figure::sized("pinned H2D", 64 << 20, &Stats::one(copy)),
        Figure::sized("pageable H2D", 64 << 20, &Stats::one(pageable)).memory(MemoryKind::Pageable),
        Figure::new("synchronous: host in the calls", &Stats::one(host)).on_host(),
    ]
}

/// `k` pairs: A and B alike but for `shift` on the pinned copy in B, with noise that pairs share.
fn pairs(k: usize, shift: f64) -> RunPairs {
    (0..k)
        .map(|i| {
            let w = 1.0 + 0.004 * (((i * 7) % 5) as f64 - 2.0);
            let u = 1.0 + 0.004 * (((i * 3) % 5) as f64 - 2.0);
            let page = 4.7 * (1.0 + 0.3 * (((i * 5) % 7) as f64 / 6.0));
            (run(1.23 * w, page, 0.8 * w), run(1.23 * u * shift, page * u, 0.8 * u))
        })
        .collect()
}

#[test]
fn a_lesson_against_itself_is_the_same_and_a_planted_change_is_slow() {
    let same = judge_lesson("pinned_memory", &pairs(15, 1.0));
    assert_eq!((same.pairs, same.least_pairs, same.figures.len()), (15, 10, 3));
    assert!(same.figures.iter().all(|f| f.paired.verdict == Verdict::Same), "{same:#?}");
    let text = report(&same, false);
    assert!(text.contains(&format!("{GPU_GROUP}: 1 figures: 0 SLOW")), "{text}");
    assert!(text.contains(&format!("{HOST_GROUP}: 2 figures")), "{text}");
    assert!(!text.contains("SAME  "), "a quiet lesson lists no figure: {text}");
    let slow = judge_lesson("pinned_memory", &pairs(15, 1.05));
    let verdicts: Vec<&str> = slow.figures.iter().map(|f| f.verdict).collect();
    assert_eq!(verdicts, ["SLOW", "SAME", "SAME"]);
    let copy = &slow.figures[0];
    assert!(copy.lo > 1.0 && copy.hi > 1.05 && (copy.ratio - 1.05).abs() < 0.01, "{copy:?}");
    assert!((copy.a_ms - 1.23).abs() < 0.01 && (copy.b_ms / copy.a_ms - 1.05).abs() < 0.01, "{copy:?}");
    let mut planted = slow.clone();
    planted.planted = serde_json::json!({ "percent": 5, "figures": ["pinned H2D 64 MiB", "pinned D2H 64 MiB"] });
    let text = report(&planted, false);
    assert!(
        text.contains(
            "planted: B says it made a 5% change to 2 figures: 1 of 1 judged are SLOW; 0 of the 2 others are not SAME"
        ),
        "{text}"
    );
    let text = report(&slow, true);
    assert!(text.contains("pinned H2D 64 MiB") && text.contains("SLOW"), "{text}");
    let json = serde_json::to_value(&slow).unwrap();
    assert_eq!(json["figures"][0]["verdict"], "SLOW");
    assert_eq!(json["figures"][1]["memory"], "pageable");
    assert_eq!(json["figures"][0]["pairs_ms"].as_array().unwrap().len(), 15);
}

/// A GPU time that the host's calls took most of (small_copies' memcpy per buffer of 256 B) is reported
/// with the host's figures, in the JSON too; one the GPU paced stays with the GPU's.
#[test]
fn a_gpu_time_paced_by_the_hosts_calls_is_reported_with_the_hosts_figures() {
    let way = |gpu: f64, host: f64| {
        let (g, h) = (Stats::one(gpu), Stats::one(host));
        vec![Figure::new("1000 x 256 B / memcpy each / gpu", &g).paced_by(&h), Figure::new("graph / gpu", &g)]
    };
    let runs: RunPairs = (0..15).map(|i| (way(4.75 + 0.01 * i as f64, 4.7), way(4.75, 4.7))).collect();
    let l = judge_lesson("small_copies", &runs);
    assert!(l.figures[0].host_paced && !l.figures[0].on_the_gpu(), "{:?}", l.figures[0]);
    assert!(!l.figures[1].host_paced && l.figures[1].on_the_gpu());
    let text = report(&l, false);
    assert!(
        text.contains(&format!("{GPU_GROUP}: 1 figures")) && text.contains(&format!("{HOST_GROUP}: 1 figures")),
        "{text}"
    );
    let json = serde_json::to_value(&l).unwrap();
    assert_eq!((json["figures"][0]["host_paced"].as_bool(), json["figures"][1].get("host_paced")), (Some(true), None));
}

#[test]
fn too_few_pairs_say_so_and_a_figure_missing_from_b_is_left_out() {
    let mut few = pairs(6, 2.0);
    few[0].1.pop();
    let l = judge_lesson("x", &few);
    assert_eq!(l.figures.iter().map(|f| f.paired.pairs).collect::<Vec<_>>(), [6, 6, 5]);
    assert!(l.figures.iter().all(|f| f.detect_slower.is_none()), "6 pairs reach no level for 3 figures");
    assert!(report(&l, false).contains("needs 10 to call any"), "{}", report(&l, false));
}

#[test]
fn builds_are_bundles_or_folders_of_lessons() {
    let dir = std::env::temp_dir().join(format!("xtask-interleave-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("bundle/lessons")).unwrap();
    assert_eq!(lessons_in(&dir.join("bundle")).unwrap(), dir.join("bundle/lessons"));
    assert_eq!(lessons_in(&dir.join("bundle/lessons")).unwrap(), dir.join("bundle/lessons"));
    assert!(lessons_in(&dir.join("nowhere")).is_err());
    assert_eq!(key_values(&["A=1=2".into()]).unwrap(), [("A".to_string(), "1=2".to_string())]);
    assert!(key_values(&["A".into()]).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

/// A lesson that calibrates its work says how to repeat it; every run of A and B then gets those flags,
/// and a run given them calibrates nothing (so says nothing).
#[test]
fn a_lesson_that_calibrates_its_work_is_pinned_to_a_first_run_of_a() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("xtask-pin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("args.log");
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *--iters*) echo '{{\"figures\": []}}' ;; \
         *) echo '{{\"figures\": [], \"repeat_with\": [\"--iters\", \"77\"]}}' ;; esac\n",
        log.display()
    );
    let lesson = dir.join("overlap");
    std::fs::write(&lesson, script).unwrap();
    std::fs::set_permissions(&lesson, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = Build { lessons: dir.clone(), args: vec!["-n".into(), "4M".into()], env: vec![], beside: None };
    let pinned = pin_calibration(&a, &a, "overlap");
    assert_eq!(pinned, ["--iters", "77"]);
    let (doc, _) = run_once(&a, "overlap", &pinned);
    assert!(doc.unwrap().repeat_with.is_empty(), "a run given --iters calibrates nothing");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, "--json -n 4M\n--json -n 4M --iters 77\n");
    // B that sets the rounds itself keeps them: nothing pinned (a lesson takes --iters once).
    let b = Build { args: vec!["--iters".into(), "900".into()], ..a.clone() };
    assert!(pin_calibration(&a, &b, "overlap").is_empty());
    let _ = std::fs::remove_dir_all(dir);
}
