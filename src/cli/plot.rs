//! SVG line charts of training curves (loss, learning rate, loss scale
//! against step) and stacked bar charts (the planner's step by Pod), drawn with `plotters`' SVG backend and no font files:
//! text is left to the SVG viewer.

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use tessera_sim::checkpoint::write_atomic;

/// The chart's size in pixels.
const SIZE: (u32, u32) = (960, 600);

/// Distinct colours, one per series in order (Tableau 10, readable on white
/// and by most colour-blind readers); they repeat after ten series.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One named curve of a chart.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The legend's label.
    pub(crate) name: String,
    /// The `(x, y)` points, drawn joined in this order.
    pub(crate) points: Vec<(f64, f64)>,
}

/// Each quantised operand's scale exponent over the steps (`steps` as
/// `(step, records)`), one curve per operand, into `path`; nothing if no
/// step has a quantised operand.
///
/// # Errors
///
/// A message naming the file when the chart cannot be drawn or written.
pub(crate) fn scales_chart(
    path: &Path,
    steps: &[(u64, &[tessera_sim::model::quant::TensorQuant])],
) -> Result<(), String> {
    let mut series: Vec<Series> = Vec::new();
    for (step, records) in steps {
        for r in *records {
            let point = (*step as f64, f64::from(r.exponent));
            match series.iter_mut().find(|s| s.name == r.tensor) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    name: r.tensor.clone(),
                    points: vec![point],
                }),
            }
        }
    }
    if series.is_empty() {
        return Ok(());
    }
    line_chart(
        path,
        "Scales: values multiplied by 2^k before rounding",
        "step",
        "k",
        &series,
        false,
    )
}

/// Draws `series` as lines on one pair of axes into an SVG file at `path`,
/// replacing it atomically.
///
/// The axes span the data (with a little room above and below); `log_y`
/// puts the y axis on a log scale. Points that cannot be drawn are skipped:
/// non-finite ones, those beyond ±1e15 (see [`LIMIT`]), and with `log_y`
/// those with `y` below 1e-15. A series with no
/// drawable point still has its legend entry; a chart with none has unit
/// axes.
///
/// # Errors
///
/// A message naming the file when the chart cannot be drawn or written.
pub(crate) fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<(), String> {
    let drawable: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| drawable(x, y, log_y))
                .collect()
        })
        .collect();
    let all = || drawable.iter().flatten();
    let x_range = padded(span(all().map(|p| p.0)), 0.0, false);
    let y_range = padded(span(all().map(|p| p.1)), 0.05, log_y);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot draw chart {}: {e}", path.display());
        root.fill(&WHITE).map_err(|e| failed(&e))?;
        let labels = Labels {
            title,
            x_label,
            y_label,
        };
        if log_y {
            draw(
                &root,
                &labels,
                x_range,
                y_range.log_scale(),
                series,
                &drawable,
            )
        } else {
            draw(&root, &labels, x_range, y_range, series, &drawable)
        }
        .map_err(|e| failed(&e))?;
        root.present().map_err(|e| failed(&e))?;
    }
    write_atomic(path, svg.as_bytes()).map_err(|e| super::output::write_failed(path, &e))
}

/// Draws one bar per category, stacked from `parts` (each part's value
/// per category, in the categories' order, bottom first), into an SVG file
/// at `path`, replacing it atomically. Non-finite or negative values draw
/// as 0.
///
/// # Errors
///
/// A message naming the file when the chart cannot be drawn or written.
pub(crate) fn stacked_bars(
    path: &Path,
    labels: (&str, &str),
    categories: &[String],
    parts: &[Series],
) -> Result<(), String> {
    let value = |v: f64| {
        if v.is_finite() && v > 0.0 {
            v.min(LIMIT)
        } else {
            0.0
        }
    };
    let total = |c: usize| {
        parts
            .iter()
            .map(|p| p.points.get(c).map_or(0.0, |&(_, y)| value(y)))
            .sum::<f64>()
    };
    let top = (0..categories.len()).map(total).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.05 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot draw chart {}: {e}", path.display());
        root.fill(&WHITE).map_err(|e| failed(&e))?;
        draw_bars(&root, labels, categories, parts, top, &value).map_err(|e| failed(&e))?;
        root.present().map_err(|e| failed(&e))?;
    }
    write_atomic(path, svg.as_bytes()).map_err(|e| super::output::write_failed(path, &e))
}

/// The mesh, bars and legend of [`stacked_bars`].
fn draw_bars<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    (title, y_label): (&str, &str),
    categories: &[String],
    parts: &[Series],
    top: f64,
    value: &dyn Fn(f64) -> f64,
) -> Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>> {
    let n = categories.len().max(1);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_label_formatter(&|v| match *v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                categories.get(i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_label_formatter(&|&y| tick(y))
        .draw()?;
    let mut bottom = vec![0.0; n];
    for (k, part) in parts.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let bars = (0..categories.len()).map(|c| {
            let y = value(part.points.get(c).map_or(0.0, |&(_, y)| y));
            let (lo, hi) = (bottom[c], bottom[c] + y);
            bottom[c] = hi;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(c), lo),
                    (SegmentValue::Exact(c + 1), hi),
                ],
                colour.filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        });
        chart
            .draw_series(bars.collect::<Vec<_>>())?
            .label(part.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], colour.filled()));
    }
    if !parts.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// The texts around a chart.
struct Labels<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
}

/// Draws the mesh, the curves and the legend on `root`, with any y axis
/// (linear or log).
fn draw<'a, Y>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    labels: &Labels<'_>,
    x_range: Range<f64>,
    y_range: Y,
    series: &[Series],
    drawable: &[Vec<(f64, f64)>],
) -> Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(labels.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_range)?;
    chart
        .configure_mesh()
        .x_desc(labels.x_label)
        .y_desc(labels.y_label)
        .x_label_formatter(&|&x| tick(x))
        .y_label_formatter(&|&y| tick(y))
        .draw()?;
    for (i, (s, points)) in series.iter().zip(drawable).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// The largest magnitude drawn. plotters 0.3.7 overflows mapping points far
/// outside an axis and, on axes near 1e300 wide, never finishes laying out
/// ticks; 1e15 is far beyond any training curve and safe.
const LIMIT: f64 = 1e15;

/// Whether a point can be drawn: finite, within ±[`LIMIT`], and on a log
/// axis, `y` at least 1/[`LIMIT`].
fn drawable(x: f64, y: f64, log_y: bool) -> bool {
    x.abs() <= LIMIT && y.abs() <= LIMIT && (!log_y || y >= 1.0 / LIMIT)
}

/// A tick label: plain decimals for everyday magnitudes, scientific
/// notation for the very small and very large (loss scales, learning rates).
fn tick(v: f64) -> String {
    if v == 0.0 || (1e-3..1e5).contains(&v.abs()) {
        let fixed = format!("{v:.4}");
        let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
        if trimmed == "-0" {
            "0".into()
        } else {
            trimmed.into()
        }
    } else {
        format!("{v:.2e}")
    }
}

/// The smallest and largest of `values`, if any.
fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// An axis range covering `span` with `margin` of its width on either side
/// (a factor on a log axis). A single value gets a range around it; no
/// values a unit range. Every width is finite for [`drawable`] data.
fn padded(span: Option<(f64, f64)>, margin: f64, log: bool) -> Range<f64> {
    match (span, log) {
        (None, false) => 0.0..1.0,
        (None, true) => 1.0..10.0,
        (Some((lo, hi)), true) => {
            // Positive by the filter; a single value gets a decade.
            let (lo, hi) = if lo == hi {
                (lo / 3.0, hi * 3.0)
            } else {
                (lo, hi)
            };
            let factor = (hi / lo).powf(margin);
            lo / factor..hi * factor
        }
        (Some((lo, hi)), false) => {
            let width = hi - lo;
            if width == 0.0 {
                let half = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
                lo - half..hi + half
            } else {
                lo - width * margin..hi + width * margin
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-plot-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn curves() -> Vec<Series> {
        vec![
            Series {
                name: "fp32 loss".into(),
                points: (0..50)
                    .map(|i| (f64::from(i), 4.0 / f64::from(i + 1)))
                    .collect(),
            },
            Series {
                name: "fp16+SR loss".into(),
                points: (0..50)
                    .map(|i| {
                        (
                            f64::from(i),
                            if i == 7 {
                                f64::NAN
                            } else {
                                4.5 / f64::from(i + 1)
                            },
                        )
                    })
                    .chain([(f64::INFINITY, 1.0), (60.0, f64::NEG_INFINITY), (61.0, 0.0)])
                    .collect(),
            },
            Series {
                name: "empty".into(),
                points: Vec::new(),
            },
        ]
    }

    #[test]
    fn plot_writes_an_svg_with_every_series_and_no_temporary() {
        let dir = scratch("chart");
        for log_y in [false, true] {
            let path = dir.join(format!("loss-{log_y}.svg"));
            line_chart(&path, "Training loss", "step", "loss", &curves(), log_y).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
            for text in [
                "Training loss",
                "step",
                "fp32 loss",
                "fp16+SR loss",
                "empty",
            ] {
                assert!(svg.contains(text), "log_y {log_y}: no {text:?}");
            }
            assert!(
                svg.contains("<polyline") || svg.contains("<path"),
                "no curve"
            );
            // Two distinct series colours in the curves.
            for colour in [PALETTE[0], PALETTE[1]] {
                let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
                assert!(
                    svg.to_uppercase().contains(&hex),
                    "log_y {log_y}: no colour {hex}"
                );
            }
            assert!(
                !svg.contains("NaN") && !svg.contains("inf"),
                "a non-finite point was drawn"
            );
        }
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["loss-false.svg", "loss-true.svg"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plot_handles_no_data_and_single_points() {
        let dir = scratch("degenerate");
        let cases = [
            Vec::new(),
            vec![Series {
                name: "nothing drawable".into(),
                points: vec![(f64::NAN, 1.0), (0.0, f64::INFINITY)],
            }],
            vec![Series {
                name: "one point".into(),
                points: vec![(3.0, 0.0)],
            }],
            vec![Series {
                name: "extremes".into(),
                points: vec![(-1e15, -1e15), (1e-15, 1e-15), (1e15, 1e15), (1e16, 1.0)],
            }],
        ];
        for (i, series) in cases.iter().enumerate() {
            for log_y in [false, true] {
                let path = dir.join(format!("{i}-{log_y}.svg"));
                line_chart(&path, "t", "x", "y", series, log_y).unwrap();
                assert!(std::fs::read_to_string(&path).unwrap().contains("</svg>"));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plot_into_a_missing_directory_fails_with_the_path() {
        let dir = scratch("missing");
        let path = dir.join("absent").join("chart.svg");
        let err = line_chart(&path, "t", "x", "y", &curves(), false).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot write {}: ", path.display()))
                && err.contains("No such file")
                && !err.contains("checkpoint"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
