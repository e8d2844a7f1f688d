//! The picture of a copy sweep, as SVG: GB/s against transfer size on a logarithmic axis, a line per
//! kind of memory and direction, and the link's rate drawn across as the ceiling the lines approach.
//!
//! A crate of its own, of std alone, so that `cargo xtask bench-report` draws the same picture from
//! criterion's results as `pinned_memory --svg` does, without depending on the lessons' rig.

use std::fmt::Write as _;

/// One line of the picture: a kind and direction (`pinned H2D`), and its points, (bytes, GB/s).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A rate drawn across the picture, such as the link's raw rate per direction.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceiling {
    pub label: String,
    pub gbps: f64,
}

const COLOURS: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#9c755f", "#edc948"];

/// The kind a series' label names, without its direction: a kind keeps one colour both ways.
fn kind(label: &str) -> &str {
    label.trim_end_matches(" H2D").trim_end_matches(" D2H").trim_end_matches(" both ways")
}

/// `4 KiB`, `1.5 MiB`, `1 GiB`: a size as the lessons write it (`cuda_scope::Bytes`), for an axis or a name.
pub fn size_label(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (bytes, 0);
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A step of 1, 2 or 5 times a power of ten that cuts `0..max` into about six.
fn nice_step(max: f64) -> f64 {
    let raw = max / 6.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The picture: `series` as lines (solid H2D, dashed D2H, dotted both ways; a colour per kind), each
/// point marked with its value on hover, and each of `ceilings` as a horizontal line with its label.
pub fn rate_chart(title: &str, series: &[Series], ceilings: &[Ceiling]) -> String {
    let (w, h, left, right, top, bottom) = (960.0, 560.0, 70.0, 230.0, 56.0, 56.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let good = |&&(x, y): &&(f64, f64)| x > 0.0 && x.is_finite() && y >= 0.0 && y.is_finite();
    let points: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().filter(good)).copied().collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{left}" y="24" font-size="15" font-weight="bold">{}</text>"#, xml(title));
    if points.is_empty() {
        let _ = writeln!(s, r#"<text x="{left}" y="{}">no points to draw</text>"#, top + ph / 2.0);
        s += "</svg>\n";
        return s;
    }
    // x: log2 of the size, from the power of two at or below the smallest to the one at or above the largest.
    let lo = points.iter().map(|p| p.0.log2().floor()).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.0.log2().ceil()).fold(f64::NEG_INFINITY, f64::max).max(lo + 1.0);
    let x = |bytes: f64| left + (bytes.log2() - lo) / (hi - lo) * pw;
    let top_rate = points.iter().map(|p| p.1).chain(ceilings.iter().map(|c| c.gbps)).fold(0.0, f64::max);
    let step = nice_step((top_rate * 1.08).max(1e-9));
    let y_max = ((top_rate * 1.08) / step).ceil() * step;
    let y = |gbps: f64| top + ph - gbps / y_max * ph;
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="42" fill="#555">GB/s (10^9 bytes per second) against transfer size, log scale</text>"##
    );
    // Grid and axes: a line a power of two (labelled every one, or every other where there are many).
    let every = if hi - lo > 12.0 { 2 } else { 1 };
    for (i, p) in (lo as i64..=hi as i64).enumerate() {
        let gx = x(2f64.powi(p as i32));
        let _ = writeln!(s, r##"<line x1="{gx:.1}" y1="{top}" x2="{gx:.1}" y2="{:.1}" stroke="#e4e4e4"/>"##, top + ph);
        if i % every == 0 {
            let _ = writeln!(
                s,
                r#"<text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                top + ph + 18.0,
                size_label(2f64.powi(p as i32))
            );
        }
    }
    let mut v = 0.0;
    while v <= y_max + step * 1e-6 {
        let gy = y(v);
        let _ =
            writeln!(s, r##"<line x1="{left}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#e4e4e4"/>"##, left + pw);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"#, left - 6.0, gy + 4.0);
        v += step;
    }
    let _ = writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">transfer size</text>"#,
        left + pw / 2.0,
        h - 14.0
    );
    for c in ceilings.iter().filter(|c| c.gbps > 0.0 && c.gbps.is_finite()) {
        let cy = y(c.gbps);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="#333" stroke-width="1.5" stroke-dasharray="8 3 2 3"/>"##,
            left + pw
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333">{}: {:.1} GB/s</text>"##,
            left + pw - 6.0,
            cy - 5.0,
            xml(&c.label),
            c.gbps
        );
    }
    let mut kinds: Vec<&str> = Vec::new();
    for (i, line) in series.iter().enumerate() {
        let k = kind(&line.label);
        if !kinds.contains(&k) {
            kinds.push(k);
        }
        let colour = COLOURS[kinds.iter().position(|x| *x == k).unwrap_or(0) % COLOURS.len()];
        let dash = if line.label.ends_with("D2H") {
            r#" stroke-dasharray="7 4""#
        } else if line.label.ends_with("both ways") {
            r#" stroke-dasharray="2 3""#
        } else {
            ""
        };
        let mut pts: Vec<(f64, f64)> = line.points.iter().filter(good).copied().collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|&(b, g)| format!("{:.1},{:.1}", x(b), y(g))).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for &(b, g) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{} {}: {g:.2} GB/s</title></circle>"#,
                x(b),
                y(g),
                xml(&line.label),
                size_label(b)
            );
        }
        let ly = top + 8.0 + 20.0 * i as f64;
        let lx = left + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>"#,
            lx + 28.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, lx + 34.0, ly + 4.0, xml(&line.label));
    }
    s += "</svg>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_lie_on_a_log_scale_and_the_link_across() {
        let line = |label: &str, scale: f64| Series {
            label: label.into(),
            points: (12..=26).step_by(2).map(|p| (2f64.powi(p), scale * 55.0 / (1.0 + 2f64.powi(18 - p)))).collect(),
        };
        let svg = rate_chart(
            "Copies <test>",
            &[line("pinned H2D", 1.0), line("pinned D2H", 0.98), line("pageable H2D", 0.3)],
            &[Ceiling { label: "PCIe link, raw".into(), gbps: 63.0 }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Copies &lt;test&gt;"), "titles are escaped");
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 24);
        assert!(svg.contains(">4 KiB<") && svg.contains(">64 MiB<"), "the axis names sizes: {svg}");
        assert!(svg.contains("PCIe link, raw: 63.0 GB/s"));
        // pinned's two directions share a colour; the second kind has its own.
        let colour = |label: &str| {
            let at = svg.find(&format!(">{label}<")).unwrap();
            let line = &svg[..at].rsplit("<line").next().unwrap().to_string();
            line.split("stroke=\"").nth(1).unwrap()[..7].to_string()
        };
        assert_eq!(colour("pinned H2D"), colour("pinned D2H"));
        assert_ne!(colour("pinned H2D"), colour("pageable H2D"));
        // On a log axis, sizes four times apart lie equally far apart.
        let xs: Vec<f64> = svg
            .lines()
            .filter(|l| l.starts_with("<circle"))
            .take(3)
            .map(|l| l.split("cx=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
            .collect();
        assert!(((xs[1] - xs[0]) - (xs[2] - xs[1])).abs() < 0.2, "{xs:?}");
    }

    #[test]
    fn nothing_to_draw_says_so() {
        let svg = rate_chart("empty", &[Series { label: "x".into(), points: vec![(0.0, 1.0)] }], &[]);
        assert!(svg.contains("no points to draw"));
        assert_eq!((size_label(4096.0), size_label(1.5 * 1024.0 * 1024.0)), ("4 KiB".into(), "1.5 MiB".into()));
        assert_eq!(nice_step(70.0), 20.0);
    }
}
