//! One SVG chart per pattern: cumulative requests served over time, one line per algorithm;
//! and the chart of a key's token budget: tokens admitted and requests denied per minute, one
//! line per way of counting costs.

use std::error::Error;
use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sim::{Outcome, Pattern, SECOND};
use crate::tokens::{thousands, TokenOutcome};

/// Colours of the lines, in the order of the algorithms.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws the outcomes of `pattern` into an SVG file at `path`.
pub fn draw(path: &Path, pattern: &Pattern, outcomes: &[Outcome]) -> Result<(), Box<dyn Error>> {
    // Requests still queued at the end of the pattern are served after it: show them too.
    let end = outcomes
        .iter()
        .filter_map(|o| o.served.last().copied())
        .fold(pattern.span, u64::max);
    let span = end as f64 / SECOND as f64;
    let most = outcomes.iter().map(|o| o.admitted).max().unwrap_or(0);
    let top = (most as f64 * 1.05).max(1.0);

    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&pattern.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..span, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests served (cumulative, all clients)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;

    for (i, outcome) in outcomes.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        // An algorithm that served exactly the same requests at the same times as one drawn
        // before it hides under that line: the legend says so.
        let label = match outcomes[..i].iter().find(|o| o.served == outcome.served) {
            Some(same) => format!("{} (same as {})", outcome.algorithm, same.algorithm),
            None => outcome.algorithm.to_owned(),
        };
        chart
            .draw_series(LineSeries::new(
                steps(&outcome.served, end),
                colour.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The staircase of cumulative counts through the served times, in seconds. A step whose
/// flat part is shorter than a thousandth of the span is drawn as a slope: on a 900-pixel
/// chart the difference is invisible and the file stays small.
fn steps(served: &[u64], span: u64) -> Vec<(f64, f64)> {
    let s = |ns: u64| ns as f64 / SECOND as f64;
    let mut points = vec![(0.0, 0.0)];
    let mut last = 0;
    let mut count = 0;
    let mut i = 0;
    while i < served.len() {
        let t = served[i];
        if t - last > span / 1000 {
            points.push((s(t), count as f64));
        }
        while i < served.len() && served[i] == t {
            count += 1;
            i += 1;
        }
        points.push((s(t), count as f64));
        last = t;
    }
    points.push((s(span.max(last)), count as f64));
    points
}

/// Draws the token budget's outcomes into an SVG file at `path`: on top the true tokens
/// admitted each minute against the quota (and the tokens asked for, `demand`), below the
/// requests denied each minute.
pub fn draw_tokens(
    path: &Path,
    title: &str,
    limit: u64,
    demand: &[u64],
    outcomes: &[TokenOutcome],
) -> Result<(), Box<dyn Error>> {
    let minutes = demand.len() as f64;
    let most = demand.iter().copied().chain([limit]).max().unwrap_or(1);
    let root = SVGBackend::new(path, (900, 680)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically(440);

    let mut tokens = minute_panel(
        &top,
        minutes,
        most as f64 * 1.6,
        "true tokens admitted per minute",
        &|y| thousands(*y as u64),
    )?;
    // Wide and pale, so that a strategy that admits all of it shows on top.
    let grey = RGBColor(200, 200, 200);
    tokens
        .draw_series(LineSeries::new(per_minute(demand), grey.stroke_width(8)))?
        .label("asked for")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(8)));
    let quota = [(0.0, limit as f64), (minutes, limit as f64)];
    tokens
        .draw_series(DashedLineSeries::new(quota, 8, 5, BLACK.stroke_width(2)))?
        .label(format!("the quota, {} a minute", thousands(limit)))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, outcome) in outcomes.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        tokens
            .draw_series(LineSeries::new(
                per_minute(&outcome.tokens_per_minute),
                colour.stroke_width(2),
            ))?
            .label(outcome.strategy.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(3)));
    }
    tokens
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let most_denied = outcomes
        .iter()
        .flat_map(|o| o.denied_per_minute.iter().copied())
        .max()
        .unwrap_or(0);
    let mut denied = minute_panel(
        &bottom,
        minutes,
        (most_denied as f64 * 1.1).max(1.0),
        "requests denied per minute",
        &|y| format!("{y:.0}"),
    )?;
    for (i, outcome) in outcomes.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        denied.draw_series(LineSeries::new(
            per_minute(&outcome.denied_per_minute),
            colour.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// A chart over `minutes` on `area`, from 0 to `top` upwards, its mesh drawn.
fn minute_panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    minutes: f64,
    top: f64,
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
) -> Result<MinutePanel<'a, 'b>, Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..minutes, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("minute")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(y_label)
        .draw()?;
    Ok(chart)
}

/// A panel of [`draw_tokens`]: minutes across, counts upwards.
type MinutePanel<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The steps of counts per minute: each count drawn flat across its minute.
fn per_minute(counts: &[u64]) -> Vec<(f64, f64)> {
    counts
        .iter()
        .enumerate()
        .flat_map(|(m, &c)| [(m as f64, c as f64), (m as f64 + 1.0, c as f64)])
        .collect()
}
