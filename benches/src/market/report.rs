//! The market's table (with the classic's figures beside it), its chart,
//! its report file and its one-line summary.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::cell::{Cell, Figures};
use super::strategies::Strategy;
use crate::chart::{Series, draw_panel, series};
use crate::stats::ms;

/// How the run was made, for the report's header.
pub(crate) struct Info {
    pub(crate) date: String,
    pub(crate) machine: String,
    pub(crate) server: String,
    pub(crate) command: String,
    /// Each cell's length.
    pub(crate) seconds: f64,
    pub(crate) planted_race: bool,
    pub(crate) elapsed_s: f64,
    pub(crate) load: (String, String),
}

/// What "Redis in Action" (chapter 6, 60 s per shape) found, as far as the
/// issue that set this benchmark quotes it.
fn classic(strategy: Strategy, shape: (usize, usize)) -> &'static str {
    match (strategy, shape) {
        (Strategy::Watch, (1, 1)) => "about 3 retries, under 10 ms wait",
        (Strategy::Watch, (5, 1)) => "retries and wait rising",
        (Strategy::Watch, (5, 5)) => "about 250 retries, about 500 ms wait",
        (Strategy::SingleCoarse, (1, 1) | (5, 1) | (5, 5)) => "no retries, everything serialised",
        (Strategy::SingleFine, (1, 1) | (5, 1) | (5, 5)) => {
            "220k-230k ops, 0 retries, buy under 3 ms"
        }
        _ => "",
    }
}

fn count(n: f64) -> String {
    if !n.is_finite() {
        return "n/a".to_owned();
    }
    let digits = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn checks(cell: &Cell) -> String {
    if cell.passed() {
        return "ok".to_owned();
    }
    let audit = &cell.audit;
    let mut broken = Vec::new();
    if !audit.conserved() {
        broken.push(format!(
            "money off by {}",
            audit.money - audit.money_expected
        ));
    }
    if audit.double_sales > 0 {
        broken.push(format!("{} double sales", audit.double_sales));
    }
    if audit.misplaced > 0 {
        broken.push(format!("{} items out of place", audit.misplaced));
    }
    if audit.bought_misplaced > 0 {
        broken.push(format!(
            "{} bought not in one inventory",
            audit.bought_misplaced
        ));
    }
    if cell.keys_left > 0 {
        broken.push(format!("{} lock keys left", cell.keys_left));
    }
    let broken = broken.join(", ");
    if cell.strategy.is_safe() {
        format!("**FAILED**: {broken}")
    } else {
        format!("unsafe, as expected: {broken}")
    }
}

/// The tables, in markdown (they read as text too).
pub(crate) fn tables(cells: &[Cell], info: &Info) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Marketplace: {} data server + up to 5 lock masters, {}; {:.1} s per cell, figures per 60 s; {}{}\n",
        info.server,
        info.machine,
        info.seconds,
        info.date,
        if info.planted_race {
            "; PLANTED RACE: purchases skip their lock"
        } else {
            ""
        }
    );
    out.push_str("| sellers/buyers | strategy | listed | bought | ops per 60 s | retries per buy | buy p50 / p99 ms | gone | CPU µs per op, client + servers | checks | Redis in Action |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for cell in cells {
        let scale = 60.0 / cell.elapsed.as_secs_f64();
        let (client, servers) = cell.cpu_per_op_us();
        let _ = writeln!(
            out,
            "| {}/{} | {} | {} | {} | {} | {} | {} / {} | {} | {:.0} + {:.0} | {} | {} |",
            cell.shape.0,
            cell.shape.1,
            cell.strategy.describe(),
            count(cell.audit.listed as f64 * scale),
            count(cell.audit.bought as f64 * scale),
            count(cell.ops_per_60s()),
            match cell.retries_per_buy() {
                r if r.is_finite() => format!("{r:.2}"),
                _ => "n/a".to_owned(),
            },
            ms(cell.buy_latency.p50()),
            ms(cell.buy_latency.p99()),
            count((cell.gone + cell.stale) as f64 * scale),
            client,
            servers,
            checks(cell),
            classic(cell.strategy, cell.shape),
        );
    }
    let _ = write!(
        out,
        "\nlisted and bought: the audit's count of listings and purchases that took effect, per 60 s; \
         retries: aborted EXECs (WATCH) or lock waits that ran out (2 s each); \
         buy p50 / p99: from the buyer's pick to its write done (the lock's release goes out behind it); \
         gone: purchases that found the item sold under their guard; \
         the classic column quotes \"Redis in Action\" (60 s per shape, its own machine); \
         listings retried: {}; \
         {:.0} s in all, load average {} at the start, {} at the end.",
        cells.iter().map(|cell| cell.list_retries).sum::<u64>(),
        info.elapsed_s,
        info.load.0,
        info.load.1
    );
    out
}

/// What fault tolerance costs, and what of it is this library's: item
/// locks over 3 masters against the hand-written lock on the data server,
/// the same against the hand-written Redlock over 3 masters (the
/// raw-command floor), and that floor against the single server; shape
/// by shape, in operations, in purchases alone (listings take no item
/// lock) and in CPU per operation, each the median of the rounds' paired
/// ratios ([`Cell::versus`]). One line per pair that ran.
pub(crate) fn fault_tolerance(cells: &[Cell]) -> String {
    [
        (
            Strategy::Fine(3),
            Strategy::SingleFine,
            "item locks over 3 masters / the hand-written lock on the data server",
        ),
        (
            Strategy::Fine(3),
            Strategy::RawFine(3),
            "item locks over 3 masters / the hand-written Redlock over 3 (the raw-command floor)",
        ),
        (
            Strategy::RawFine(3),
            Strategy::SingleFine,
            "the hand-written Redlock over 3 / the hand-written lock on the data server",
        ),
    ]
    .into_iter()
    .filter_map(|(ours, theirs, label)| versus(cells, ours, theirs, label))
    .collect::<Vec<_>>()
    .join("\n")
}

/// `label, by shape (ops, purchases, CPU per op): 1/1: R, R, R; ...`, or
/// `None` when no shape ran both.
fn versus(cells: &[Cell], ours: Strategy, theirs: Strategy, label: &str) -> Option<String> {
    let mut out = format!("{label}, by shape (ops, purchases, CPU per op):");
    let header = out.len();
    for cell in cells.iter().filter(|cell| cell.strategy == ours) {
        let Some(other) = cells
            .iter()
            .find(|c| c.strategy == theirs && c.shape == cell.shape)
        else {
            continue;
        };
        let ratio = |figure: fn(&Figures) -> f64| {
            cell.versus(other, figure)
                .map_or("n/a".to_owned(), |r| format!("{r:.2}x"))
        };
        let _ = write!(
            out,
            " {}/{}: {}, {}, {};",
            cell.shape.0,
            cell.shape.1,
            ratio(|f| f.ops),
            ratio(|f| f.bought),
            ratio(|f| f.cpu),
        );
    }
    if out.len() == header {
        return None;
    }
    out.pop();
    Some(out)
}

/// The checks of every safe cell, added up, then the unsafe ceiling's.
pub(crate) fn checks_line(cells: &[Cell]) -> String {
    let (safe, unsafe_cells): (Vec<&Cell>, Vec<&Cell>) =
        cells.iter().partition(|cell| cell.strategy.is_safe());
    let sum =
        |cells: &[&Cell], figure: fn(&Cell) -> u64| cells.iter().map(|c| figure(c)).sum::<u64>();
    let mut line = format!(
        "checks, {} cells with a guard: money conserved in {} of them; items sold twice: {}; items out of place: {}; bought items not in exactly one inventory: {}; lock keys left: {}",
        safe.len(),
        safe.iter().filter(|cell| cell.conserved).count(),
        sum(&safe, |c| c.audit.double_sales),
        sum(&safe, |c| c.audit.misplaced),
        sum(&safe, |c| c.audit.bought_misplaced),
        sum(&safe, |c| c.keys_left),
    );
    if !unsafe_cells.is_empty() {
        let _ = write!(
            line,
            " (no lock at all, unsafe: {} items sold twice in {} cells)",
            sum(&unsafe_cells, |c| c.audit.double_sales),
            unsafe_cells.len()
        );
    }
    line
}

/// The report file: how it was made, the tables, the chart, the comparison
/// with the last committed result ([`crate::compare`]) and the summary line.
pub(crate) fn document(
    tables: &str,
    info: &Info,
    chart: &str,
    comparison: &str,
    summary: &str,
) -> String {
    format!(
        "# Marketplace: optimistic transactions against locks\n\n\
         {}, `{}`, {}.\n\n{tables}\n\n![operations and buy latency by shape]({chart})\n\n\
         {comparison}\n\n```\n{summary}\n```\n",
        info.date, info.command, info.server
    )
}

/// The summary line's figures.
pub(crate) struct Summary {
    fine_ops: Option<f64>,
    fine_p99_ms: Option<f64>,
    watch_retries: Option<f64>,
    coarse_ops: Option<f64>,
    fine_vs_single: Option<f64>,
    conserved: bool,
    double_sales: u64,
    keys_left: u64,
}

/// The shape the summary quotes: the classic's heaviest.
const SUMMARY_SHAPE: (usize, usize) = (5, 5);

impl Summary {
    pub(crate) fn of(cells: &[Cell]) -> Self {
        let at = |strategy: Strategy| {
            cells
                .iter()
                .find(|cell| cell.strategy == strategy && cell.shape == SUMMARY_SHAPE)
        };
        let fine_vs_single = cells
            .iter()
            .filter(|cell| cell.strategy == Strategy::Fine(3))
            .map(|fine| {
                cells
                    .iter()
                    .find(|c| c.strategy == Strategy::SingleFine && c.shape == fine.shape)
                    .and_then(|single| fine.versus(single, |f| f.ops))
            })
            .collect::<Option<Vec<f64>>>()
            .and_then(|ratios| ratios.into_iter().reduce(f64::min));
        let safe = cells.iter().filter(|cell| cell.strategy.is_safe());
        Self {
            fine_ops: at(Strategy::Fine(3)).map(Cell::ops_per_60s),
            fine_p99_ms: at(Strategy::Fine(3)).map(|cell| cell.buy_latency.p99() / 1_000.0),
            watch_retries: at(Strategy::Watch).map(Cell::retries_per_buy),
            coarse_ops: at(Strategy::Coarse(3)).map(Cell::ops_per_60s),
            fine_vs_single,
            conserved: safe.clone().all(|cell| cell.conserved),
            double_sales: safe.clone().map(|cell| cell.audit.double_sales).sum(),
            keys_left: cells.iter().map(|cell| cell.keys_left).sum(),
        }
    }

    pub(crate) fn line(&self) -> String {
        let figure = |value: Option<f64>, decimals: usize| match value {
            Some(v) if v.is_finite() => format!("{v:.decimals$}"),
            _ => "n/a".to_owned(),
        };
        format!(
            "market summary: fine_ops_per_60s={} fine_buy_p99_ms={} watch_retries_per_buy={} coarse_ops_per_60s={} fine_vs_single_server={} conserved={} double_sales={} keys_left={}",
            figure(self.fine_ops, 0),
            figure(self.fine_p99_ms, 2),
            figure(self.watch_retries, 2),
            figure(self.coarse_ops, 0),
            figure(self.fine_vs_single, 2),
            if self.conserved { "yes" } else { "no" },
            self.double_sales,
            self.keys_left
        )
    }
}

fn color(strategy: Strategy) -> RGBColor {
    match strategy {
        Strategy::Watch => RGBColor(0xd6, 0x27, 0x28),
        Strategy::NoLock => RGBColor(0x99, 0x99, 0x99),
        Strategy::SingleCoarse => RGBColor(0x8c, 0x56, 0x4b),
        Strategy::SingleFine => RGBColor(0x33, 0x33, 0x33),
        Strategy::Coarse(1) => RGBColor(0xff, 0xbb, 0x78),
        Strategy::Coarse(3) => RGBColor(0xff, 0x7f, 0x0e),
        Strategy::Coarse(_) => RGBColor(0xbd, 0x5e, 0x0a),
        Strategy::Fine(1) => RGBColor(0x9e, 0xc9, 0xe9),
        Strategy::Fine(3) => RGBColor(0x1f, 0x77, 0xb4),
        Strategy::Fine(_) => RGBColor(0x10, 0x3f, 0x60),
        Strategy::Fenced(_) => RGBColor(0x2c, 0xa0, 0x2c),
        Strategy::RawFine(_) => RGBColor(0x94, 0x67, 0xbd),
    }
}

fn err(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// One panel: a figure of every strategy against the shapes.
fn by_shape<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    cells: &[Cell],
    figure: fn(&Cell) -> f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    let mut strategies: Vec<Strategy> = Vec::new();
    for cell in cells {
        if !shapes.contains(&cell.shape) {
            shapes.push(cell.shape);
        }
        if !strategies.contains(&cell.strategy) {
            strategies.push(cell.strategy);
        }
    }
    let values = cells
        .iter()
        .map(figure)
        .filter(|v| v.is_finite() && *v > 0.0);
    let top = values.clone().fold(1.0f64, f64::max);
    let bottom = values.fold(top, f64::min).max(1e-3);
    let labels = shapes.clone();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.3f64..(shapes.len() as f64 - 0.7),
            (bottom * 0.7..top * 1.6).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(shapes.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() > 0.01 || i < 0.0 {
                return String::new();
            }
            labels
                .get(i as usize)
                .map_or(String::new(), |(s, b)| format!("{s}/{b}"))
        })
        .y_label_formatter(&|y| count(*y))
        .x_desc("sellers/buyers")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for strategy in strategies {
        let points: Vec<(f64, f64)> = shapes
            .iter()
            .enumerate()
            .filter_map(|(i, shape)| {
                cells
                    .iter()
                    .find(|c| c.strategy == strategy && c.shape == *shape)
                    .map(|c| (i as f64, figure(c)))
            })
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect();
        let line = color(strategy);
        chart
            .draw_series(LineSeries::new(points, line.stroke_width(2)))
            .map_err(err)?
            .label(strategy.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], line.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Four panels: operations and buy p99 by shape, and the buy latency's
/// distribution at 5/5 and at 16/16 (the panels of [`crate::chart`]).
pub(crate) fn chart(cells: &[Cell]) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1300, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((2, 2));
        by_shape(
            &panels[0],
            "listings + purchases per 60 s",
            "operations (log scale)",
            cells,
            Cell::ops_per_60s,
        )?;
        by_shape(
            &panels[1],
            "buy latency p99",
            "ms (log scale)",
            cells,
            |cell| cell.buy_latency.p99() / 1_000.0,
        )?;
        for (panel, shape) in [(&panels[2], (5, 5)), (&panels[3], (16, 16))] {
            let curves: Vec<Series> = cells
                .iter()
                .filter(|cell| cell.shape == shape)
                .map(|cell| {
                    series(
                        cell.strategy.name(),
                        color(cell.strategy),
                        &cell.buy_latency,
                    )
                })
                .collect();
            draw_panel(
                panel,
                &format!("buy latency, {}/{}", shape.0, shape.1),
                &curves,
                SeriesLabelPosition::UpperLeft,
            )?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}
