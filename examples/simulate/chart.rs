//! One SVG chart per pattern: cumulative requests served over time, one line per algorithm.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use crate::sim::{Outcome, Pattern, SECOND};

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
