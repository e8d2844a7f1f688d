//! A run without NVTX ranges, cut into segments at host synchronizations.
//!
//! The cut: a device, stream or event synchronize (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
//! `cudaEventSynchronize` and their driver forms) that returned with nothing running on the GPU and
//! nothing issued before it still waiting to start, with GPU work before and after. Synchronous copies
//! do not cut: a program that copies, computes and copies back on the legacy stream idles the GPU after
//! every copy, and cutting there would split one version of its work into pieces. Idle gaps do not cut
//! either: the gap between two versions of a program's work is as short as the gaps inside one.

use crate::{
    api::{base_name, classify, ApiCall, Call, Calls},
    trace::Op,
};

/// How late a GPU operation may seem to end after the host saw it end (two clocks), in ms.
const CLOCK_SLACK_MS: f64 = 0.005;

/// One stretch of the run, and the call that closed it.
pub struct Segment<'a> {
    /// "segment 1", "segment 2"...
    pub name: String,
    /// Its operations, in order of their starts.
    pub ops: Vec<&'a Op>,
    /// The synchronize whose return closed it (its name without a version suffix); None for the last.
    pub closed_by: Option<String>,
}

/// The run's operations cut into segments at the host synchronizations after which the GPU sat idle with
/// nothing queued (see the module's doc); the whole run where there is no such cut, or no API trace.
pub fn split<'a>(ops: &'a [Op], api: &[ApiCall]) -> Vec<Segment<'a>> {
    let calls = Calls::new(api);
    let mut sorted: Vec<&Op> = ops.iter().collect();
    sorted.sort_by(|a, b| a.start.total_cmp(&b.start));
    let n = sorted.len();
    // The latest end among the first i operations, and the earliest issue among the operations from i on.
    let mut ended = vec![f64::NEG_INFINITY; n + 1];
    for (i, o) in sorted.iter().enumerate() {
        ended[i + 1] = ended[i].max(o.end);
    }
    let mut issued = vec![f64::INFINITY; n + 1];
    for i in (0..n).rev() {
        let issue = calls.of(sorted[i]).map_or(f64::INFINITY, |c| c.start);
        issued[i] = issued[i + 1].min(issue);
    }
    let mut cuts: Vec<(f64, &str)> = api
        .iter()
        .filter(|c| classify(&c.name) == Call::HostSync)
        .filter_map(|c| {
            let i = sorted.partition_point(|o| o.start < c.end);
            let idle = ended[i] <= c.end + CLOCK_SLACK_MS;
            let nothing_waiting = issued[i] >= c.start;
            (i > 0 && i < n && idle && nothing_waiting).then_some((c.end, base_name(&c.name)))
        })
        .collect();
    cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut segments: Vec<Segment> = Vec::new();
    let mut current: Vec<&Op> = Vec::new();
    let mut next_cut = 0;
    for o in sorted {
        while next_cut < cuts.len() && o.start >= cuts[next_cut].0 {
            if !current.is_empty() {
                let name = format!("segment {}", segments.len() + 1);
                segments.push(Segment {
                    name,
                    ops: std::mem::take(&mut current),
                    closed_by: Some(cuts[next_cut].1.into()),
                });
            }
            next_cut += 1;
        }
        current.push(o);
    }
    if !current.is_empty() {
        segments.push(Segment { name: format!("segment {}", segments.len() + 1), ops: current, closed_by: None });
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::parse_api_trace_csv,
        limits::{limit, speedups},
        metrics::summarize,
        trace::{parse_gpu_trace_csv, Kind},
    };

    fn op(stream: &str, kind: Kind, start: f64, end: f64, corr: u64) -> Op {
        Op { corr: Some(corr), ..crate::trace::test_op(stream, kind, start, end) }
    }

    fn call(name: &str, start: f64, end: f64, corr: u64) -> ApiCall {
        ApiCall { start, end, name: name.into(), corr }
    }

    #[test]
    fn cuts_only_where_a_synchronize_left_the_gpu_idle() {
        let ops = [
            op("7", Kind::H2D, 0.0, 1.0, 1),
            op("7", Kind::Kernel, 1.1, 2.0, 2),
            op("13", Kind::H2D, 3.0, 4.0, 3),
            op("14", Kind::H2D, 4.0, 5.0, 4),
            op("14", Kind::Kernel, 6.0, 7.0, 5),
        ];
        let api = [
            call("cudaMemcpy", 0.0, 1.0, 1),                // a synchronous copy: no cut
            call("cudaLaunchKernel", 1.05, 1.06, 2),        //
            call("cudaEventSynchronize", 1.9, 2.001, 90),   // GPU idle after it: cut
            call("cudaMemcpyAsync", 2.9, 2.91, 3),          //
            call("cudaMemcpyAsync", 2.92, 2.93, 4),         //
            call("cudaStreamSynchronize", 2.94, 4.002, 91), // stream 13 done, 14 still copying: no cut
            call("cudaLaunchKernel", 4.5, 4.51, 5),         // issued after the next sync began...
            call("cuStreamSynchronize", 4.4, 5.0, 92),      // ...so that sync's return is a cut
        ];
        let s = split(&ops, &api);
        let shape: Vec<(&str, usize, Option<&str>)> =
            s.iter().map(|s| (s.name.as_str(), s.ops.len(), s.closed_by.as_deref())).collect();
        assert_eq!(
            shape,
            [
                ("segment 1", 2, Some("cudaEventSynchronize")),
                ("segment 2", 2, Some("cuStreamSynchronize")),
                ("segment 3", 1, None)
            ]
        );
        // Work issued before a synchronize and still queued when it returned: no cut there.
        let api = [call("cudaLaunchKernel", 4.3, 4.31, 5), call("cuStreamSynchronize", 4.4, 5.0, 92)];
        assert_eq!(split(&ops, &api).len(), 1);
        assert_eq!(split(&ops, &[]).len(), 1, "no API trace: the whole run");
    }

    /// overlap_pattern.cu (synthetic trace, see fixtures/README.md): its two versions are two segments, the
    /// first serialized on the legacy stream, the second compute-bound on four streams, 1.17x faster.
    #[test]
    fn the_seeds_overlap_pattern_in_two_segments() {
        let ops =
            parse_gpu_trace_csv(include_str!("../fixtures/synthetic_overlap_pattern_cuda_gpu_trace.csv")).unwrap();
        let api =
            parse_api_trace_csv(include_str!("../fixtures/synthetic_overlap_pattern_cuda_api_trace.csv")).unwrap();
        let segs = split(&ops, &api);
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].closed_by.as_deref(), Some("cudaEventSynchronize"), "not the synchronous copies");
        let (a, b) = (summarize(&segs[0].ops), summarize(&segs[1].ops));
        assert_eq!((a.ops, b.ops), (12, 12));
        assert!((a.span - 15.989572).abs() < 1e-9 && (b.span - 13.663960).abs() < 1e-9, "{} {}", a.span, b.span);
        assert!(limit(&a).starts_with("serialized: H2D 8%, kernels 84%, D2H 8% one after another"), "{}", limit(&a));
        assert!(limit(&b).starts_with("compute-bound: kernels busy 96% of the span"), "{}", limit(&b));
        let rows: Vec<(String, Vec<&Op>)> = segs.into_iter().map(|s| (s.name, s.ops)).collect();
        assert_eq!(speedups(&rows), ["segment 2 does segment 1's work 1.17x faster (15.990 ms, then 13.664 ms)"]);
    }
}
