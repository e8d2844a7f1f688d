//! The timeline picture, as SVG: a row per stream, then a row per engine (what ran on it at all), the
//! phases on top, operations coloured by kind, with a time axis and a line of [`Summary`] figures.

use std::fmt::Write as _;

use crate::{
    metrics::{summarize, Summary},
    trace::{Kind, Op, Phase, Trace},
};

fn colour(kind: Kind) -> &'static str {
    match kind {
        Kind::H2D => "#4e79a7",
        Kind::Kernel => "#59a14f",
        Kind::D2H => "#f28e2b",
        Kind::Memset => "#bab0ac",
        Kind::Other => "#b07aa1",
    }
}

/// The timeline as SVG: a row per stream, then a row per engine (what ran on it at all), the phases
/// on top, coloured by operation, with a time axis. `window` limits it to [start, end) ms.
pub fn timeline(t: &Trace, title: &str, window: Option<(f64, f64)>) -> String {
    let ops: Vec<&Op> = t.ops.iter().filter(|o| window.is_none_or(|(s, e)| o.end > s && o.start < e)).collect();
    let (t0, t1) = window.unwrap_or_else(|| {
        let s = ops.iter().map(|o| o.start).fold(f64::INFINITY, f64::min);
        let e = ops.iter().map(|o| o.end).fold(f64::NEG_INFINITY, f64::max);
        (s, e)
    });
    let span = (t1 - t0).max(1e-9);
    let (label_w, plot_w, row_h, top) = (150.0, 1250.0, 22.0, 60.0);
    let x = |ms: f64| label_w + (ms.clamp(t0, t1) - t0) / span * plot_w;
    let mut streams: Vec<&str> = ops.iter().map(|o| o.stream.as_str()).collect();
    streams.sort_by_key(|s| (s.parse::<i64>().unwrap_or(i64::MAX), s.to_string()));
    streams.dedup();
    let phases: Vec<&Phase> = t.phases.iter().filter(|p| p.end > t0 && p.start < t1).collect();
    let rows = 1 + streams.len() + 3;
    let height = top + rows as f64 * row_h + 70.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
        label_w + plot_w + 20.0
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#, xml(title));
    let sum: Summary = summarize(&ops);
    let _ = writeln!(
        s,
        r#"<text x="10" y="42">{:.3} ms: H2D busy {:.3}, kernels {:.3}, D2H {:.3} ms; {:.0}% of copy time under a kernel; both directions at once {:.3} ms; idle {:.3} ms</text>"#,
        span,
        sum.htod,
        sum.kernel,
        sum.dtoh,
        100.0 * sum.overlap_fraction,
        sum.both_directions,
        sum.idle
    );
    let row_y = |r: usize| top + r as f64 * row_h;
    let label = |s: &mut String, r: usize, text: &str| {
        let _ = writeln!(s, r#"<text x="10" y="{}">{}</text>"#, row_y(r) + 15.0, xml(text));
    };
    label(&mut s, 0, "phases");
    for (i, p) in phases.iter().enumerate() {
        let (a, b) = (x(p.start), x(p.end));
        let fill = if i % 2 == 0 { "#eeeeee" } else { "#dddddd" };
        let _ = writeln!(
            s,
            r#"<rect x="{a:.2}" y="{:.2}" width="{:.2}" height="{}" fill="{fill}"><title>{}</title></rect>"#,
            row_y(0),
            (b - a).max(0.5),
            row_h - 4.0,
            xml(&p.name)
        );
        if b - a > 8.0 * p.name.len() as f64 * 0.75 {
            let _ = writeln!(
                s,
                r#"<text x="{:.2}" y="{:.2}" font-size="11">{}</text>"#,
                a + 3.0,
                row_y(0) + 13.0,
                xml(&p.name)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{a:.2}" x2="{a:.2}" y1="{}" y2="{}" stroke="gray" stroke-dasharray="3,3"/>"#,
            row_y(1),
            row_y(rows)
        );
    }
    let rect = |s: &mut String, r: usize, o: &Op| {
        let (a, b) = (x(o.start), x(o.end));
        let _ = writeln!(
            s,
            r#"<rect x="{a:.2}" y="{:.2}" width="{:.2}" height="{}" fill="{}"><title>{} {:.4} ms{}</title></rect>"#,
            row_y(r) + 2.0,
            (b - a).max(0.4),
            row_h - 6.0,
            colour(o.kind),
            xml(&o.name),
            o.end - o.start,
            if o.bytes > 0 { format!(", {} bytes", o.bytes) } else { String::new() }
        );
    };
    for (i, st) in streams.iter().enumerate() {
        label(&mut s, 1 + i, &format!("stream {st}"));
        for o in ops.iter().filter(|o| o.stream == *st) {
            rect(&mut s, 1 + i, o);
        }
    }
    for (j, (name, kind)) in
        [("H2D engine", Kind::H2D), ("SMs (kernels)", Kind::Kernel), ("D2H engine", Kind::D2H)].iter().enumerate()
    {
        let r = 1 + streams.len() + j;
        label(&mut s, r, name);
        for o in ops.iter().filter(|o| o.kind == *kind) {
            rect(&mut s, r, o);
        }
    }
    let axis_y = row_y(rows) + 8.0;
    let _ =
        writeln!(s, r#"<line x1="{label_w}" x2="{}" y1="{axis_y}" y2="{axis_y}" stroke="black"/>"#, label_w + plot_w);
    let step = nice_step(span / 10.0);
    let mut tick = (t0 / step).ceil() * step;
    while tick <= t1 + 1e-12 {
        let tx = x(tick);
        let _ = writeln!(
            s,
            r#"<line x1="{tx:.2}" x2="{tx:.2}" y1="{axis_y}" y2="{}" stroke="black"/><text x="{tx:.2}" y="{}" text-anchor="middle">{}</text>"#,
            axis_y + 5.0,
            axis_y + 18.0,
            fmt_tick(tick - t0, step)
        );
        tick += step;
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">ms</text>"#, label_w + plot_w, axis_y + 32.0);
    for (i, (name, kind)) in
        [("H2D copy", Kind::H2D), ("kernel", Kind::Kernel), ("D2H copy", Kind::D2H), ("memset", Kind::Memset)]
            .iter()
            .enumerate()
    {
        let lx = label_w + i as f64 * 120.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="14" height="12" fill="{}"/><text x="{}" y="{}">{name}</text>"#,
            axis_y + 24.0,
            colour(*kind),
            lx + 18.0,
            axis_y + 34.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-9).log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::{correct_engines, parse_chrome};

    #[test]
    fn svg_draws_every_op_and_phase() {
        let mut t = parse_chrome(&serde_json::from_str(include_str!("../fixtures/h200_overlap_builtin.json")).unwrap())
            .unwrap();
        correct_engines(&mut t.ops);
        let pic = timeline(&t, "overlap", None);
        assert!(pic.starts_with("<svg") && pic.trim_end().ends_with("</svg>"));
        // each op twice (its stream's row and its engine's row), plus phase bands and legend boxes
        assert_eq!(pic.matches("<rect").count(), 1 + 2 * t.ops.len() + t.phases.len() + 4);
        assert!(pic.contains(">overlapped<") && pic.contains("stream 0"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(4.0), 5.0);
        assert_eq!(fmt_tick(0.4, 0.2), "0.4");
    }
}
