//! Scaling curves (`--scaling`, `make bench-scaling`): cycles per second of
//! scenario (b) (tasks on distinct keys, acquire then release) against the
//! number of tasks (1, 4, 16, 64, 256 on 5 masters) and against the number
//! of masters (1, 3, 5, 7 with 64 tasks), for this library, rslock and both
//! floors. Each point runs each contender for a few short phases,
//! interleaved and rotated as in (b), with CPU per cycle beside it.
//!
//! It writes `<server>-scaling.md` (two tables) and `<server>-scaling.svg`
//! (two panels) to the output folder. Not part of `make bench` or
//! `make test`: a run takes one to two minutes (8 points, 4 contenders,
//! 1.6 s each, plus starting the servers and warming up).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use redlock_tests::RedisCluster;

use crate::contenders::{Common, Contenders, Kind};
use crate::scenarios::{self, Throughput};

/// The tasks of the first curve (on [`NODES_FOR_TASKS`] masters).
pub(crate) const TASKS: [usize; 5] = [1, 4, 16, 64, 256];
/// The masters of the second curve (with [`TASKS_FOR_NODES`] tasks).
pub(crate) const NODES: [usize; 4] = [1, 3, 5, 7];
const NODES_FOR_TASKS: usize = 5;
const TASKS_FOR_NODES: usize = 64;

/// The contenders of the curves (the reference row is left out: it splits
/// the client's cost from the servers', which (b) already shows).
const KINDS: [Kind; 4] = [Kind::Ours, Kind::Rslock, Kind::SafeFloor, Kind::Floor];

pub(crate) struct ScalingArgs {
    pub(crate) quick: bool,
    pub(crate) kinds: Vec<Kind>,
    pub(crate) out: Option<PathBuf>,
    pub(crate) common: Common,
}

/// One point: `tasks` tasks on `nodes` masters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    nodes: usize,
    tasks: usize,
}

/// Runs every point; returns the summary line.
pub(crate) fn run(args: &ScalingArgs) -> Result<String, String> {
    let started = Instant::now();
    let load_at_start = crate::load_average();
    // Rounds are rounded up to whole rotations of the contenders, so with 4
    // contenders each runs 4 phases per point: 1.6 s (0.4 s with --quick).
    let (rounds, phase) = if args.quick {
        (1, Duration::from_millis(100))
    } else {
        (1, Duration::from_millis(400))
    };
    let kinds: Vec<Kind> = KINDS
        .into_iter()
        .filter(|kind| args.kinds.contains(kind))
        .collect();
    if kinds.is_empty() {
        return Err("--scaling: none of ours, rslock, safe-floor, floor chosen".to_owned());
    }
    let mut results: BTreeMap<Shape, BTreeMap<Kind, Throughput>> = BTreeMap::new();
    for nodes in NODES {
        let mut shapes: Vec<Shape> = Vec::new();
        if nodes == NODES_FOR_TASKS {
            shapes.extend(TASKS.iter().map(|&tasks| Shape { nodes, tasks }));
        } else {
            shapes.push(Shape {
                nodes,
                tasks: TASKS_FOR_NODES,
            });
        }
        crate::progress(&format!(
            "scaling: starting {nodes} masters: {}",
            redlock_tests::server()
        ));
        let cluster = RedisCluster::start(nodes);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("tokio runtime: {err}"))?;
        let contenders =
            Arc::new(runtime.block_on(Contenders::connect(&cluster.urls(), args.common))?);
        runtime.block_on(scenarios::warm_up(
            &contenders,
            if args.quick { 20 } else { 100 },
            Duration::from_secs(10),
        ));
        let servers: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
        for shape in shapes {
            crate::progress(&format!(
                "scaling: {} tasks on {} masters, {} x {:?} per contender",
                shape.tasks,
                shape.nodes,
                scenarios::fair_rounds(rounds, &kinds),
                phase
            ));
            let point = runtime.block_on(scenarios::throughput(
                &contenders,
                &kinds,
                &cluster,
                &servers,
                shape.tasks,
                rounds,
                phase,
            ));
            results.insert(shape, point);
        }
        drop(contenders);
        runtime.shutdown_timeout(Duration::from_secs(1));
        drop(cluster);
    }
    let elapsed = started.elapsed();
    let info = Info {
        date: crate::today(),
        machine: crate::machine(),
        server: crate::server_version(),
        command: crate::bench_command(),
        phases: format!(
            "{} x {} ms per contender and point",
            scenarios::fair_rounds(rounds, &kinds),
            phase.as_millis()
        ),
        elapsed_s: elapsed.as_secs_f64(),
        load: (load_at_start, crate::load_average()),
    };
    let out = crate::out_dir(args.out.as_deref(), args.quick)?;
    let stem = format!("{}-scaling", redlock_tests::server().name().to_lowercase());
    let chart_name = format!("{stem}.svg");
    let chart = svg(&results, &kinds, &info.server)?;
    let chart_path = out.join(&chart_name);
    std::fs::write(&chart_path, chart).map_err(|err| format!("{}: {err}", chart_path.display()))?;
    let document = document(&results, &kinds, &info, &chart_name);
    let summary = summary(&results);
    let name = format!("{stem}.md");
    // Before the file is overwritten, where the run writes to benches/results.
    let comparison = crate::compare::against_committed(&name, &summary, args.quick);
    let report_path = out.join(&name);
    std::fs::write(
        &report_path,
        format!("{document}\n{comparison}\n\n```\n{summary}\n```\n"),
    )
    .map_err(|err| format!("{}: {err}", report_path.display()))?;
    println!("{document}");
    println!(
        "wrote {} and {} in {:.0} s",
        report_path.display(),
        chart_path.display(),
        info.elapsed_s
    );
    println!("{comparison}");
    Ok(summary)
}

struct Info {
    date: String,
    machine: String,
    server: String,
    command: String,
    phases: String,
    elapsed_s: f64,
    load: (String, String),
}

/// `bench scaling summary: ours_vs_safe_floor_min=R ours_vs_safe_floor_max=R ours_vs_rslock_min=R`:
/// the worst and best ratio over every point.
fn summary(results: &BTreeMap<Shape, BTreeMap<Kind, Throughput>>) -> String {
    let ratios = |other: Kind| -> (f64, f64) {
        let all: Vec<f64> = results
            .values()
            .filter_map(|point| {
                Some(point.get(&Kind::Ours)?.per_second() / point.get(&other)?.per_second())
            })
            .filter(|ratio| ratio.is_finite())
            .collect();
        let min = all.iter().copied().fold(f64::NAN, f64::min);
        let max = all.iter().copied().fold(f64::NAN, f64::max);
        (min, max)
    };
    let (safe_min, safe_max) = ratios(Kind::SafeFloor);
    let (rslock_min, rslock_max) = ratios(Kind::Rslock);
    format!(
        "bench scaling summary: ours_vs_safe_floor_min={safe_min:.2} ours_vs_safe_floor_max={safe_max:.2} \
         ours_vs_rslock_min={rslock_min:.2} ours_vs_rslock_max={rslock_max:.2}"
    )
}

fn document(
    results: &BTreeMap<Shape, BTreeMap<Kind, Throughput>>,
    kinds: &[Kind],
    info: &Info,
    chart: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Scaling: cycles per second against tasks and masters\n"
    );
    let _ = writeln!(
        out,
        "{}, {}: `{}` ({}), {}; {:.0} s in all; load average {} at the start, {} at the end.\n",
        info.date,
        info.server,
        info.command,
        info.phases,
        info.machine,
        info.elapsed_s,
        info.load.0,
        info.load.1
    );
    let _ = writeln!(
        out,
        "Each cycle is an acquire then a release on a key of its own task (scenario (b) of \
         `make bench`); contenders take turns, rotated. Client and servers share the machine's \
         cores, so past a few tasks the curves show how much CPU a cycle costs as much as how \
         the library scales.\n"
    );
    let _ = writeln!(out, "![scaling chart]({chart})\n");
    let table = |out: &mut String,
                 title: &str,
                 shapes: Vec<Shape>,
                 first: &str,
                 pick: fn(Shape) -> usize| {
        let _ = writeln!(out, "## {title}\n");
        let mut head = format!("| {first} |");
        let mut rule = "|---:|".to_owned();
        for kind in kinds {
            let _ = write!(head, " {} |", kind.label());
            rule.push_str("---:|");
        }
        head.push_str(
            " ours / safe floor | ours / rslock | client CPU per cycle, ours / safe floor (µs) |",
        );
        rule.push_str("---:|---:|---|");
        let _ = writeln!(out, "{head}\n{rule}");
        for shape in shapes {
            let Some(point) = results.get(&shape) else {
                continue;
            };
            let mut row = format!("| {} |", pick(shape));
            for kind in kinds {
                match point.get(kind) {
                    Some(t) => {
                        let _ = write!(row, " {:.0} |", t.per_second());
                    }
                    None => row.push_str(" n/a |"),
                }
            }
            let ratio = |other: Kind| match (point.get(&Kind::Ours), point.get(&other)) {
                (Some(ours), Some(other)) => {
                    format!("{:.2}x", ours.per_second() / other.per_second())
                }
                _ => "n/a".to_owned(),
            };
            let cpu = match (point.get(&Kind::Ours), point.get(&Kind::SafeFloor)) {
                (Some(ours), Some(safe)) => format!(
                    "{:.1} / {:.1}",
                    ours.client_us_per_cycle(),
                    safe.client_us_per_cycle()
                ),
                _ => "n/a".to_owned(),
            };
            let _ = writeln!(
                row,
                " {} | {} | {cpu} |",
                ratio(Kind::SafeFloor),
                ratio(Kind::Rslock)
            );
            out.push_str(&row);
        }
        out.push('\n');
    };
    table(
        &mut out,
        &format!("Against tasks, {NODES_FOR_TASKS} masters (cycles/s)"),
        TASKS
            .iter()
            .map(|&tasks| Shape {
                nodes: NODES_FOR_TASKS,
                tasks,
            })
            .collect(),
        "tasks",
        |shape| shape.tasks,
    );
    table(
        &mut out,
        &format!("Against masters, {TASKS_FOR_NODES} tasks (cycles/s)"),
        NODES
            .iter()
            .map(|&nodes| Shape {
                nodes,
                tasks: TASKS_FOR_NODES,
            })
            .collect(),
        "masters",
        |shape| shape.nodes,
    );
    let failures: u64 = results
        .values()
        .flat_map(|point| point.values())
        .map(|t| t.failures)
        .sum();
    let left: u64 = results
        .values()
        .flat_map(|point| point.values())
        .map(|t| t.keys_left)
        .sum();
    let _ = writeln!(
        out,
        "Failed cycles over the run: {failures}; keys left on the servers after the phases: {left}."
    );
    out
}

fn color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Ours => RGBColor(0x1f, 0x77, 0xb4),
        Kind::Rslock => RGBColor(0xd6, 0x27, 0x28),
        Kind::Floor => RGBColor(0x33, 0x33, 0x33),
        Kind::SafeFloor => RGBColor(0x2c, 0xa0, 0x2c),
        Kind::ScriptFloor => RGBColor(0x9a, 0x9a, 0x9a),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Two panels, cycles/s against tasks (log scale) and against masters.
fn svg(
    results: &BTreeMap<Shape, BTreeMap<Kind, Throughput>>,
    kinds: &[Kind],
    server: &str,
) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1200, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((1, 2));
        let top = results
            .values()
            .flat_map(|point| point.values())
            .map(Throughput::per_second)
            .filter(|y| y.is_finite())
            .fold(1.0f64, f64::max)
            * 1.15;
        let curve =
            |kind: Kind, shapes: &mut dyn Iterator<Item = (f64, Shape)>| -> Vec<(f64, f64)> {
                shapes
                    .filter_map(|(x, shape)| {
                        let y = results.get(&shape)?.get(&kind)?.per_second();
                        y.is_finite().then_some((x, y))
                    })
                    .collect()
            };
        // Tasks, on a log2 axis: 1, 4, 16, 64, 256 evenly spaced.
        let mut chart = ChartBuilder::on(&panels[0])
            .caption(
                format!("{server}: cycles/s against tasks, {NODES_FOR_TASKS} masters"),
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(62)
            .build_cartesian_2d(-0.3f64..8.3f64, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(9)
            .x_label_formatter(&|x| {
                let rounded = x.round();
                if (x - rounded).abs() < 1e-6
                    && rounded >= 0.0
                    && (rounded as u32).is_multiple_of(2)
                {
                    format!("{}", 1u32 << rounded as u32)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("tasks (log scale)")
            .y_desc("cycles/s")
            .draw()
            .map_err(err)?;
        for &kind in kinds {
            let points = curve(
                kind,
                &mut TASKS.iter().map(|&tasks| {
                    (
                        (tasks as f64).log2(),
                        Shape {
                            nodes: NODES_FOR_TASKS,
                            tasks,
                        },
                    )
                }),
            );
            draw(&mut chart, kind, points)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        let mut chart = ChartBuilder::on(&panels[1])
            .caption(
                format!("{server}: cycles/s against masters, {TASKS_FOR_NODES} tasks"),
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(62)
            .build_cartesian_2d(0.5f64..7.5f64, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&|x| {
                let rounded = x.round();
                if (x - rounded).abs() < 1e-6 && NODES.contains(&(rounded as usize)) {
                    format!("{rounded:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("masters")
            .y_desc("cycles/s")
            .draw()
            .map_err(err)?;
        for &kind in kinds {
            let points = curve(
                kind,
                &mut NODES.iter().map(|&nodes| {
                    (
                        nodes as f64,
                        Shape {
                            nodes,
                            tasks: TASKS_FOR_NODES,
                        },
                    )
                }),
            );
            draw(&mut chart, kind, points)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn draw<'a, DB>(
    chart: &mut ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    kind: Kind,
    points: Vec<(f64, f64)>,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
{
    let color = color(kind);
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))
        .map_err(err)?
        .label(kind.short())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )
        .map_err(err)?;
    Ok(())
}
