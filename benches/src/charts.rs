//! Every table as an SVG chart (plotters), and `index.html`: the machine
//! facts, the verdict summary and every chart, one page that opens offline
//! (the charts are files beside it).
//!
//! * A table whose sections are a sweep (`N = 1`, `N = 64`, ... or
//!   `64 B`, `256 B`, ...: a number in each heading) with the same rows in
//!   several sections becomes a line chart: x = that number (log 2), y = ns
//!   per operation (log 10), one line per row (allocator).
//! * Any other table becomes horizontal bars: one per row, grouped by
//!   section, ns per operation on a log axis.
//!
//! Rows flagged noisy are drawn hollow (lines) or grey (bars) and named
//! `(noisy)`; floors are drawn dashed in black.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::measure::{fmt_num, summary_order, Machine, Report, Row};
use crate::summary::Run;

/// The first number of a section heading (`N = 64: ...` -> 64, `256 B` ->
/// 256), if any.
pub fn sweep_value(section: &str) -> Option<f64> {
    let start = section.find(|c: char| c.is_ascii_digit())?;
    let digits: String = section[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Whether `r` is drawn as a line chart (see the module docs).
fn is_sweep(r: &Report) -> bool {
    let mut xs: Vec<f64> = Vec::new();
    let mut sections: Vec<&str> = Vec::new();
    for row in &r.rows {
        if !sections.contains(&row.case.section.as_str()) {
            sections.push(&row.case.section);
        }
    }
    for s in &sections {
        match sweep_value(s) {
            Some(x) if x > 0.0 => xs.push(x),
            _ => return false,
        }
    }
    let mut d = xs.clone();
    d.sort_by(f64::total_cmp);
    d.dedup();
    // Distinct values, each section once, and a row name in two sections.
    d.len() >= 2
        && d.len() == xs.len()
        && r.rows.iter().any(|a| {
            r.rows
                .iter()
                .any(|b| a.case.name == b.case.name && a.case.section != b.case.section)
        })
}

fn y_range(rows: &[&Row]) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi: f64 = 0.0;
    for r in rows {
        let m = r.stats.ns.median;
        if m.is_finite() && m > 0.0 {
            lo = lo.min(m);
            hi = hi.max(m);
        }
    }
    if !lo.is_finite() {
        return (0.1, 10.0);
    }
    (lo / 1.5, hi * 1.5)
}

fn plot_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> io::Error {
    io::Error::other(e.to_string())
}

/// Draws `r` into `path` (an SVG file).
pub fn draw(r: &Report, path: &Path) -> io::Result<()> {
    if is_sweep(r) {
        draw_lines(r, path)
    } else {
        draw_bars(r, path)
    }
}

fn draw_lines(r: &Report, path: &Path) -> io::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for row in &r.rows {
        if !names.contains(&row.case.name.as_str()) {
            names.push(&row.case.name);
        }
    }
    let rows: Vec<&Row> = r.rows.iter().collect();
    let (ylo, yhi) = y_range(&rows);
    let xs: Vec<f64> = r
        .rows
        .iter()
        .filter_map(|x| sweep_value(&x.case.section))
        .collect();
    let xlo = xs.iter().copied().fold(f64::INFINITY, f64::min) / 1.3;
    let xhi = xs.iter().copied().fold(0.0, f64::max) * 1.3;
    let height = 520 + 18 * names.len() as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} ({})", r.title, r.table), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(sweep_axis(r))
        .y_desc("ns per operation (median; log)")
        .x_label_formatter(&|x| fmt_num(*x))
        .y_label_formatter(&|y| fmt_num(*y))
        .draw()
        .map_err(plot_err)?;
    for (k, name) in names.iter().enumerate() {
        let pts: Vec<(f64, f64, bool, bool)> = r
            .rows
            .iter()
            .filter(|x| x.case.name == *name)
            .filter_map(|x| {
                Some((
                    sweep_value(&x.case.section)?,
                    x.stats.ns.median,
                    x.stats.is_noisy(),
                    x.case.floor,
                ))
            })
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .collect();
        let floor = pts.iter().any(|p| p.3);
        let color: RGBColor = if floor {
            BLACK
        } else {
            let c = Palette99::pick(k).to_rgba();
            RGBColor(c.0, c.1, c.2)
        };
        let noisy = pts.iter().filter(|p| p.2).count();
        let label = if noisy > 0 {
            format!("{name} ({noisy} noisy)")
        } else {
            name.to_string()
        };
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                color.stroke_width(if floor { 1 } else { 2 }),
            ))
            .map_err(plot_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(pts.iter().map(|p| {
                if p.2 {
                    Circle::new((p.0, p.1), 5, color.stroke_width(1))
                } else {
                    Circle::new((p.0, p.1), 3, color.filled())
                }
            }))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

fn sweep_axis(r: &Report) -> String {
    let first = r.rows.first().map_or("", |x| x.case.section.as_str());
    let after_number = first
        .trim_start()
        .trim_start_matches(|c: char| c.is_ascii_digit());
    if first.trim_start().starts_with("N =") {
        "N (log)".into()
    } else if after_number.starts_with(" thread") {
        "threads (log)".into()
    } else if first.contains(" B") {
        "size, bytes (log)".into()
    } else {
        "parameter (log)".into()
    }
}

fn draw_bars(r: &Report, path: &Path) -> io::Result<()> {
    let rows: Vec<&Row> = r.rows.iter().collect();
    let n = rows.len().max(1);
    let (xlo, xhi) = y_range(&rows);
    let height = 110 + 17 * n as u32;
    let mut sections: Vec<&str> = Vec::new();
    for row in &rows {
        if !sections.contains(&row.case.section.as_str()) {
            sections.push(&row.case.section);
        }
    }
    // Row i from the top is segment n - 1 - i.
    let labels: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut label = row.case.name.clone();
            if !row.case.section.is_empty() {
                label = format!("{} | {label}", short(&row.case.section, 30));
            }
            if row.stats.is_noisy() {
                label.push_str(" (noisy)");
            }
            short(&label, 72)
        })
        .collect();
    let root = SVGBackend::new(path, (1150, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} ({})", short(&r.title, 100), r.table),
            ("sans-serif", 14),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(470)
        .build_cartesian_2d((xlo..xhi).log_scale(), (0..n as i32).into_segmented())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_style(("sans-serif", 11))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(k) | SegmentValue::Exact(k) => {
                let i = n as i32 - 1 - k;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| labels.get(i))
                    .cloned()
                    .unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .x_desc("ns per operation (median; log)")
        .x_label_formatter(&|x| fmt_num(*x))
        .draw()
        .map_err(plot_err)?;
    for (i, row) in rows.iter().enumerate() {
        let k = (n - 1 - i) as i32;
        let sec = sections
            .iter()
            .position(|s| *s == row.case.section)
            .unwrap_or(0);
        let c = Palette99::pick(sec).to_rgba();
        let color = if row.stats.is_noisy() {
            RGBColor(190, 190, 190)
        } else if row.case.floor {
            BLACK
        } else {
            RGBColor(c.0, c.1, c.2)
        };
        let m = row.stats.ns.median;
        if m.is_finite() && m > 0.0 {
            let mut bar = Rectangle::new(
                [
                    (xlo, SegmentValue::Exact(k)),
                    (m, SegmentValue::Exact(k + 1)),
                ],
                color.filled(),
            );
            bar.set_margin(2, 2, 0, 0);
            chart.draw_series(std::iter::once(bar)).map_err(plot_err)?;
        }
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// `s` escaped for HTML text and attributes.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes `<dir>/<table>.svg` for every report and `<dir>/index.html`;
/// returns the paths (the index last).
pub fn write_all(
    dir: &Path,
    machine: &Machine,
    reports: &[Report],
    run: &Run,
) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for r in reports {
        let p = dir.join(format!("{}.svg", r.table));
        draw(r, &p)?;
        out.push(p);
    }
    let index = dir.join("index.html");
    std::fs::write(&index, index_html(machine, reports, run))?;
    out.push(index);
    Ok(out)
}

/// The page: facts, verdicts (missed first), warnings, then every chart.
pub fn index_html(machine: &Machine, reports: &[Report], run: &Run) -> String {
    let mut h = String::new();
    h.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mm-bench</title>\n<style>\
         body{font-family:sans-serif;margin:1.5em;max-width:1200px}table{border-collapse:collapse;font-size:13px}\
         td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}td.n{text-align:right}\
         .MISSED{color:#b00;font-weight:bold}.met{color:#070}.noisy{color:#888}img{max-width:100%;border:1px solid #eee}\
         </style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        h,
        "<h1>mm-bench: {} ({} run, revision {}, {:.0} s)</h1>",
        html_escape(&run.headline()),
        run.mode,
        html_escape(&run.revision),
        run.secs
    );
    h.push_str("<h2>Verdicts (missed first; noisy rows give no verdict)</h2>\n<table>\n<tr><th>status</th><th>table</th><th>target</th><th>measured</th><th></th><th>target</th><th>unit</th><th>speed vs best peer</th><th>warnings</th></tr>\n");
    for v in summary_order(&run.verdicts) {
        let _ = writeln!(
            h,
            "<tr><td class=\"{}\">{}</td><td><a href=\"#{}\">{}</a></td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            v.status.label(),
            v.status.label(),
            html_escape(v.table),
            html_escape(v.table),
            html_escape(&v.what),
            fmt_num(v.measured),
            if v.higher_is_better { "&gt;=" } else { "&lt;=" },
            fmt_num(v.target),
            html_escape(v.unit),
            v.vs_best_peer.map_or(String::new(), |x| format!("{}x", fmt_num(x))),
            html_escape(&v.warnings.join("; "))
        );
    }
    h.push_str("</table>\n");
    if !run.warnings.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Warnings</h2>\n<p>load average at the start {}, at the end {}</p>\n<ul>",
            html_escape(&run.load_start),
            html_escape(&run.load_end)
        );
        for w in &run.warnings {
            let _ = writeln!(h, "<li>{}</li>", html_escape(w));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<h2>Machine</h2>\n<table>\n");
    for (k, v) in machine.facts() {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td>{}</td></tr>",
            html_escape(k),
            html_escape(&v)
        );
    }
    h.push_str("</table>\n<h2>Tables</h2>\n");
    for r in reports {
        let _ = writeln!(
            h,
            "<h3 id=\"{0}\">{1} ({0})</h3>\n<p><img src=\"{0}.svg\" alt=\"chart of the {0} table\"></p>\n<p>data: <a href=\"{0}.csv\">{0}.csv</a>, <a href=\"{0}.jsonl\">{0}.jsonl</a></p>",
            html_escape(r.table),
            html_escape(&r.title)
        );
    }
    h.push_str("</body>\n</html>\n");
    h
}

/// A well-formedness check for the XML the charts are (and the HTML
/// page's tags): every element closed in order, no stray `<`. Enough to
/// catch a truncated or garbled file without an XML dependency.
pub fn tags_balance(doc: &str) -> Result<usize, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut count = 0;
    let mut rest = doc;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').ok_or("unclosed '<'")?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        count += 1;
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            // HTML void elements.
            if !matches!(name.as_str(), "meta" | "img" | "br" | "link" | "hr") {
                stack.push(name);
            }
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> never closed"));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Case, Config, Report, Row, Spread, Stats, Verdict};

    fn row(section: &str, name: &str, ns: f64, noisy: bool) -> Row {
        let s = Spread {
            median: ns,
            min: ns * 0.9,
            max: if noisy { ns * 5.0 } else { ns * 1.1 },
        };
        Row {
            case: Case::raw(name, |_, _| {}).section(section),
            stats: Stats {
                ns: s,
                cycles: Some(s),
                iters: 1,
                rounds: 3,
                two_cpu: None,
                remeasured: noisy,
                flags: Vec::new(),
            },
        }
    }

    #[test]
    fn sweeps_are_recognised() {
        assert_eq!(sweep_value("N = 64: alloc 64"), Some(64.0));
        assert_eq!(sweep_value("256 B, batches of 64"), Some(256.0));
        assert_eq!(sweep_value("calls"), None);
    }

    /// A small synthetic run: a sweep table and a bar table, drawn and
    /// indexed; every file exists, parses, and the index names every
    /// table and links its chart.
    #[test]
    fn renders_every_table_and_the_index() {
        let cfg = Config {
            pin: false,
            ..Config::quick()
        };
        let machine = Machine::probe(&cfg);
        let mut sweep = Report {
            table: "sweep-t",
            title: "a sweep <over> N".into(),
            rows: vec![
                row("N = 1: x", "alpha", 10.0, false),
                row("N = 1: x", "beta", 20.0, false),
                row("N = 64: x", "alpha", 5.0, true),
                row("N = 64: x", "beta", 8.0, false),
            ],
            ..Report::default()
        };
        sweep.verdicts.push(
            Verdict::at_most("alpha <= beta at N = 64", 5.0, 8.0, "ns").on(&sweep.rows, &["alpha"]),
        );
        let mut bars = Report {
            table: "bars-t",
            title: "bars & more".into(),
            rows: vec![
                row("calls", "one", 1.0, false),
                row("locks", "two", 3.0, false),
            ],
            ..Report::default()
        };
        sweep.check(&cfg);
        bars.check(&cfg);
        assert_eq!(
            sweep.verdicts[0].status,
            crate::measure::Status::Noisy,
            "a noisy row gives no verdict"
        );
        // One small report per registered table too, so the index is
        // checked to show every table the runner has.
        let mut reports = vec![sweep, bars];
        for t in crate::tables::TABLES {
            reports.push(Report {
                table: t.name(),
                title: t.about().into(),
                rows: vec![row("8 B", "x", 2.0, false), row("64 B", "x", 3.0, false)],
                ..Report::default()
            });
        }
        let run = Run::new(&cfg, &machine, &reports, std::time::Duration::from_secs(1));
        let dir = std::env::temp_dir().join(format!("mm-bench-charts-{}", std::process::id()));
        let paths = write_all(&dir, &machine, &reports, &run).unwrap();
        assert_eq!(paths.len(), reports.len() + 1);
        for r in &reports {
            let svg = std::fs::read_to_string(dir.join(format!("{}.svg", r.table))).unwrap();
            assert!(svg.contains("<svg"), "{}", r.table);
            tags_balance(&svg).unwrap_or_else(|e| panic!("{}.svg: {e}", r.table));
        }
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        tags_balance(&html).unwrap();
        for r in &reports {
            assert!(html.contains(&format!("src=\"{}.svg\"", r.table)));
            assert!(html.contains(&format!("id=\"{}\"", r.table)));
        }
        assert!(html.contains("noisy"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(tags_balance("<a><b></a></b>").is_err());
        assert!(tags_balance("<a>").is_err());
    }
}
