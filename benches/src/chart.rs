//! The latency distributions as one SVG (four panels), drawn with plotters'
//! SVG backend: text is left to the SVG viewer, so no font files are needed.

use plotters::prelude::*;

use crate::contenders::Kind;
use crate::report::Results;
use crate::stats::Latencies;

/// Percentile curves go up to 99.9%: the x axis is in "nines", 0 to 3.
const MAX_QUANTILE: f64 = 0.999;
const NINES: f64 = 3.0;

fn color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Ours => RGBColor(0x1f, 0x77, 0xb4),
        Kind::Rslock => RGBColor(0xd6, 0x27, 0x28),
        Kind::Floor => RGBColor(0x33, 0x33, 0x33),
        Kind::ScriptFloor => RGBColor(0x9a, 0x9a, 0x9a),
        Kind::SafeFloor => RGBColor(0x5a, 0x5a, 0x5a),
    }
}

/// A lighter shade of `color`, for a second series of the same contender.
fn light(color: RGBColor) -> RGBColor {
    let mix = |c: u8| ((u16::from(c) + 2 * 255) / 3) as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}

/// A quantile on the "nines" axis: 0.9 -> 1, 0.99 -> 2, 0.999 -> 3.
fn nines(quantile: f64) -> f64 {
    (-(1.0 - quantile).max(1e-9).log10()).clamp(0.0, NINES)
}

fn nines_label(x: &f64) -> String {
    match x.round() as i64 {
        0 => "p0".to_owned(),
        1 => "p90".to_owned(),
        2 => "p99".to_owned(),
        3 => "p99.9".to_owned(),
        _ => String::new(),
    }
}

pub(crate) struct Series {
    label: String,
    color: RGBColor,
    thin: bool,
    points: Vec<(f64, f64)>,
}

/// A percentile curve of `latencies`, on the "nines" axis.
pub(crate) fn series(label: impl Into<String>, color: RGBColor, latencies: &Latencies) -> Series {
    Series {
        label: label.into(),
        color,
        thin: false,
        points: latencies
            .curve(MAX_QUANTILE)
            .into_iter()
            .map(|(q, us)| (nines(q), us))
            .collect(),
    }
}

type Error = String;

fn err(e: impl std::fmt::Display) -> Error {
    e.to_string()
}

/// One panel of percentile curves (µs, log scale); nothing when all are
/// empty.
pub(crate) fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    all: &[Series],
    legend: SeriesLabelPosition,
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    if all.iter().all(|s| s.points.is_empty()) {
        // A scenario left out of this run (`--only`).
        return Ok(());
    }
    let top = all
        .iter()
        .flat_map(|s| s.points.iter().map(|&(_, y)| y))
        .fold(1.0f64, f64::max);
    let bottom = all
        .iter()
        .flat_map(|s| s.points.iter().map(|&(_, y)| y))
        .fold(top, f64::min)
        .max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(62)
        .build_cartesian_2d(0f64..NINES, (bottom * 0.8..top * 1.5).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        // The log scale's many minor lines would grey whole decades out.
        .light_line_style(WHITE)
        .x_labels(4)
        .x_label_formatter(&nines_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("percentile")
        .y_desc("µs (log scale)")
        .draw()
        .map_err(err)?;
    for s in all {
        plot(&mut chart, s)?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn plot<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    s: &Series,
) -> Result<(), Error>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = s.color;
    let style = color.stroke_width(if s.thin { 1 } else { 2 });
    chart
        .draw_series(LineSeries::new(s.points.iter().copied(), style))
        .map_err(err)?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    Ok(())
}

/// The four panels, as an SVG document.
pub(crate) fn svg(results: &Results, nodes: usize) -> Result<String, Error> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1200, 860)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((2, 2));
        let by_kind =
            |map: &std::collections::BTreeMap<Kind, crate::scenarios::Sequential>,
             pick: fn(&crate::scenarios::Sequential) -> &Latencies| {
                Kind::ALL
                    .iter()
                    .filter_map(|&kind| {
                        map.get(&kind)
                            .map(|s| series(kind.short(), color(kind), pick(s)))
                    })
                    .collect::<Vec<_>>()
            };
        draw_panel(
            &panels[0],
            &format!("(a) acquire, one client, {nodes} nodes"),
            &by_kind(&results.single, |s| &s.acquire),
            SeriesLabelPosition::UpperLeft,
        )?;
        draw_panel(
            &panels[1],
            &format!("(a) release, one client, {nodes} nodes"),
            &by_kind(&results.single, |s| &s.release),
            SeriesLabelPosition::UpperLeft,
        )?;
        let throughput: Vec<Series> = Kind::ALL
            .iter()
            .filter_map(|&kind| {
                results
                    .throughput
                    .get(&kind)
                    .map(|t| series(kind.short(), color(kind), &t.acquire))
            })
            .collect();
        draw_panel(
            &panels[2],
            "(b) acquire, 64 concurrent tasks",
            &throughput,
            SeriesLabelPosition::UpperLeft,
        )?;
        let mut paused = Vec::new();
        for level in &results.paused {
            for kind in [Kind::Ours, Kind::Rslock] {
                let Some(s) = level.results.get(&kind) else {
                    continue;
                };
                let mut s = match level.paused {
                    0 => series(
                        format!("{}, healthy", kind.short()),
                        color(kind),
                        &s.acquire,
                    ),
                    1 => series(
                        format!("{}, 1 paused", kind.short()),
                        color(kind),
                        &s.acquire,
                    ),
                    n => series(
                        format!("{}, {n} paused", kind.short()),
                        light(color(kind)),
                        &s.acquire,
                    ),
                };
                s.thin = level.paused == 0;
                paused.push(s);
            }
        }
        if !paused.is_empty() {
            draw_panel(
                &panels[3],
                "(d) acquire with nodes paused (SIGSTOP)",
                &paused,
                // rslock's paused curves run along the top.
                SeriesLabelPosition::MiddleRight,
            )?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}
