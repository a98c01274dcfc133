//! The fleet's story as a picture: one lane per host over time, with its firings (from start
//! to completion), its leader terms, and each chaos act where it happened. Drawn with
//! `plotters` into an SVG file beside the report.
use std::time::SystemTime;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// The "host" of a chaos act on the database itself.
pub const DATABASE: &str = "database";

/// What happened, on the database clock (chaos acts on the controller's, which is the same
/// machine's).
#[derive(Debug, Default)]
pub struct Timeline {
    /// When the picture starts.
    pub start: Option<SystemTime>,
    /// The hosts, one lane each, top to bottom.
    pub hosts: Vec<String>,
    /// A firing's run on a host: start, completion (none: cut off), and whether it ran
    /// before (a takeover or a retry).
    pub runs: Vec<(String, SystemTime, Option<SystemTime>, bool)>,
    /// A leader term's span as its actions show it: host, epoch, first and last action.
    pub terms: Vec<(String, i64, SystemTime, SystemTime)>,
    /// A chaos act: when, what, on which host (or [`DATABASE`]).
    pub chaos: Vec<(SystemTime, &'static str, String)>,
}

/// A TrueType font for the labels: SVG text still needs metrics to lay out.
fn font() -> Result<&'static [u8], String> {
    const CANDIDATES: &[&str] = &[
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ];
    for path in CANDIDATES {
        if let Ok(bytes) = std::fs::read(path) {
            return Ok(Box::leak(bytes.into_boxed_slice()));
        }
    }
    Err("no TrueType font found (scripts/setup.sh installs fonts-dejavu-core)".into())
}

fn secs(t: SystemTime, start: SystemTime) -> f64 {
    match t.duration_since(start) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Writes the picture to `path`.
pub fn write(path: &std::path::Path, t: &Timeline) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    register_font("sans-serif", FontStyle::Normal, font()?).map_err(|_| "cannot load the font".to_owned())?;
    let start = t.start.unwrap_or_else(SystemTime::now);
    let end = t
        .runs
        .iter()
        .filter_map(|r| r.2.or(Some(r.1)))
        .chain(t.terms.iter().map(|x| x.3))
        .chain(t.chaos.iter().map(|c| c.0))
        .map(|x| secs(x, start))
        .fold(1.0f64, f64::max)
        + 1.0;
    let lanes = t.hosts.len().max(1);
    let height = 90 + 60 * lanes as u32;
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let hosts = t.hosts.clone();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "rendezvous fleet: firings (green; orange: ran again; grey: failed or cut off), leader terms (purple), chaos (red)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..end, 0f64..lanes as f64)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(lanes * 2 + 1)
        .y_label_formatter(&|y| {
            let lane = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && lane < hosts.len() {
                hosts[hosts.len() - 1 - lane].clone()
            } else {
                String::new()
            }
        })
        .x_desc("seconds")
        .draw()
        .map_err(|x| e(&x))?;
    let lanes_of = Lanes { hosts: &t.hosts, start };
    draw_work(&mut chart, t, &lanes_of)?;
    draw_chaos(&mut chart, t, &lanes_of)?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The chart the timeline draws on: seconds across, host lanes up.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Where a host's lane is (the first host on top) and when the picture starts.
struct Lanes<'a> {
    hosts: &'a [String],
    start: SystemTime,
}

impl Lanes<'_> {
    fn lane_of(&self, host: &str) -> Option<f64> {
        self.hosts.iter().position(|h| h == host).map(|i| (self.hosts.len().max(1) - 1 - i) as f64)
    }
}

/// The firings' runs (green; orange: ran again; grey: cut off) and the leader terms (purple,
/// with their epochs) in their hosts' lanes.
fn draw_work(chart: &mut Chart, t: &Timeline, lanes: &Lanes) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (start, lane_of) = (lanes.start, |host: &str| lanes.lane_of(host));
    let green = RGBColor(46, 139, 87);
    let orange = RGBColor(230, 140, 30);
    let purple = RGBColor(120, 80, 170);
    let grey = RGBColor(120, 120, 120);
    chart
        .draw_series(t.runs.iter().filter_map(|(host, from, to, again)| {
            let lane = lane_of(host)?;
            let x0 = secs(*from, start);
            let x1 = to.map(|x| secs(x, start)).unwrap_or(x0 + 0.1).max(x0 + 0.05);
            let color = if to.is_none() {
                grey.mix(0.8)
            } else if *again {
                orange.mix(0.9)
            } else {
                green.mix(0.7)
            };
            Some(Rectangle::new([(x0, lane + 0.12), (x1, lane + 0.5)], color.filled()))
        }))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(t.terms.iter().filter_map(|(host, _, from, to)| {
            let lane = lane_of(host)?;
            Some(Rectangle::new(
                [
                    (secs(*from, start), lane + 0.62),
                    (secs(*to, start).max(secs(*from, start) + 0.05), lane + 0.78),
                ],
                purple.filled(),
            ))
        }))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(t.terms.iter().filter_map(|(host, epoch, from, _)| {
            let lane = lane_of(host)?;
            Some(Text::new(
                format!("epoch {epoch}"),
                (secs(*from, start), lane + 0.95),
                ("sans-serif", 11).into_font(),
            ))
        }))
        .map_err(|x| e(&x))?;
    Ok(())
}

/// Each chaos act, a red line in its host's lane (across every lane for the database).
fn draw_chaos(chart: &mut Chart, t: &Timeline, lanes: &Lanes) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (start, lane_of) = (lanes.start, |host: &str| lanes.lane_of(host));
    let lanes = lanes.hosts.len().max(1);
    for (at, what, host) in &t.chaos {
        // An act on the database (the primary killed) crosses every lane, labelled on the top one.
        let (from, to, lane) = match lane_of(host) {
            Some(lane) => (lane + 0.02, lane + 0.98, lane),
            None if host == DATABASE => (0.02, lanes as f64 - 0.02, lanes as f64 - 1.0),
            None => continue,
        };
        let x = secs(*at, start);
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(x, from), (x, to)], RED.stroke_width(2))))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(std::iter::once(Text::new(
                (*what).to_owned(),
                (x + 0.1, lane + 0.58),
                ("sans-serif", 11).into_font().color(&RED),
            )))
            .map_err(|x| e(&x))?;
    }
    Ok(())
}
