//! Metrics against the step, drawn to PNG or SVG: one panel per metric, one line per job
//! (several jobs on one plot compare runs), axis labels, the job ids in the title.
//!
//! Every axis is well-conditioned before plotters sees it, whatever the values: the
//! y-axis of values beyond ±1e300 (or within ±1e-300) is drawn divided by a power of ten
//! named on the axis, so its span is finite, and never narrower than a billionth of its
//! values, so ticks can be placed apart; plotters' search for a tick step ends within a
//! few rounds on such a range (and forever on an infinite or degenerate one).
//!
//! Pure: a [`Figure`] in, the file's bytes out. Text is drawn with a font compiled into
//! the binary (a subset of DejaVu Sans, `assets/fonts/`), registered with plotters'
//! `ab_glyph` backend, so no font is looked up on the machine; the PNG is encoded by the
//! `png` crate from plotters' RGB buffer.

use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use serde::Serialize;

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";

/// Tableau 10: distinguishable, and readable without colour vision of every kind.
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

const PANEL_HEIGHT: u32 = 320;
const TITLE_HEIGHT: u32 = 56;
/// Points are marked when a line has at most this many (a single step stays visible).
const MARK_POINTS_UP_TO: usize = 60;
/// Panels of one figure (12 rows of two: a picture of 1400 × 3900 pixels, 16 MB of RGB).
pub const MAX_PANELS: usize = 24;
/// Values of larger magnitude are drawn divided by a power of ten: the span of an axis
/// stays finite (1e300 - -1e300 is; f64::MAX - -f64::MAX is not).
const LARGEST: f64 = 1e300;
/// Values all of smaller magnitude are drawn multiplied by a power of ten: ticks apart by
/// less would be subnormal numbers, with too few digits to tell them apart.
const SMALLEST: f64 = 1e-300;
/// The narrowest span of an axis, relative to its values' magnitude (an f64 has about
/// 16 digits: ticks closer than this could not be told apart).
const MIN_RELATIVE_SPAN: f64 = 1e-9;

/// One line: a job's values of one metric.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Series {
    pub job: String,
    /// The legend's text (the job id, and the jobs it continues).
    pub label: String,
    /// `(step, value)`; non-finite values are kept here and left out of the drawing.
    pub points: Vec<(u64, f64)>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Panel {
    pub key: String,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Panel>,
    pub width: u32,
    pub height: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

impl Format {
    /// From the output file's extension.
    pub fn from_path(path: &std::path::Path) -> Option<Self> {
        match path
            .extension()?
            .to_string_lossy()
            .to_ascii_lowercase()
            .as_str()
        {
            "png" => Some(Format::Png),
            "svg" => Some(Format::Svg),
            _ => None,
        }
    }
}

impl Figure {
    /// Lays the panels out: one column up to two panels, two columns beyond.
    pub fn new(title: impl Into<String>, panels: Vec<Panel>) -> Self {
        let columns = if panels.len() > 2 { 2 } else { 1 };
        let rows = panels.len().div_ceil(columns).max(1) as u32;
        Figure {
            title: title.into(),
            width: if columns == 1 { 1000 } else { 1400 },
            height: TITLE_HEIGHT + rows * PANEL_HEIGHT,
            panels,
        }
    }

    fn grid(&self) -> (usize, usize) {
        let columns = if self.panels.len() > 2 { 2 } else { 1 };
        (self.panels.len().div_ceil(columns).max(1), columns)
    }
}

fn register() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| "the embedded font cannot be read".to_string())
    })
    .clone()
}

/// The file's bytes in the chosen format.
pub fn render(figure: &Figure, format: Format) -> Result<Vec<u8>, String> {
    register()?;
    match format {
        Format::Png => {
            let (w, h) = (figure.width, figure.height);
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
                draw(&root, figure)?;
                root.present().map_err(|e| e.to_string())?;
            }
            let mut out = Vec::new();
            let mut encoder = png::Encoder::new(&mut out, w, h);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
            writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
            writer.finish().map_err(|e| e.to_string())?;
            Ok(out)
        }
        Format::Svg => {
            let mut text = String::new();
            {
                let root = SVGBackend::with_string(&mut text, (figure.width, figure.height))
                    .into_drawing_area();
                draw(&root, figure)?;
                root.present().map_err(|e| e.to_string())?;
            }
            Ok(text.into_bytes())
        }
    }
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, figure: &Figure) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let body = root
        .titled(&figure.title, (FAMILY, 24).into_font().color(&BLACK))
        .map_err(e)?;
    let (rows, columns) = figure.grid();
    let areas = body.split_evenly((rows, columns));
    // One step axis for every panel, so panels line up.
    let x = x_range(&figure.panels);
    let legend = figure.panels.iter().any(|p| p.series.len() > 1);
    for (area, panel) in areas.iter().zip(&figure.panels) {
        draw_panel(area, panel, x.clone(), legend)?;
    }
    Ok(())
}

fn finite_points<'a>(panels: &'a [Panel]) -> impl Iterator<Item = (u64, f64)> + 'a {
    panels
        .iter()
        .flat_map(|p| p.series.iter())
        .flat_map(|s| s.points.iter().copied())
        .filter(|(_, v)| v.is_finite())
}

/// The steps of every finite point of the panels (never empty).
pub fn x_range(panels: &[Panel]) -> std::ops::Range<u64> {
    let (x0, x1) = finite_points(panels).fold((u64::MAX, 0), |(a, b), (x, _)| (a.min(x), b.max(x)));
    match (x0, x1) {
        (a, b) if a > b => 0..1,
        (a, b) if a == b => a.saturating_sub(1)..b.saturating_add(1).max(1),
        (a, b) => a..b,
    }
}

/// The y-axis of a panel: the values are drawn as `value × 10^-exponent`, in `range`.
#[derive(Debug, Clone, PartialEq)]
pub struct YAxis {
    /// Finite, `start < end`, a span of at least [`MIN_RELATIVE_SPAN`] of its magnitude.
    pub range: std::ops::Range<f64>,
    /// 0 unless the values are beyond [`LARGEST`] or all within [`SMALLEST`].
    pub exponent: i32,
}

impl YAxis {
    /// A value as drawn on this axis (finite for a finite value).
    pub fn scale(&self, v: f64) -> f64 {
        times_ten_to(v, -self.exponent)
    }
}

/// `v × 10^k` without an intermediate overflow (10^±324 is not an f64; its halves are).
fn times_ten_to(v: f64, k: i32) -> f64 {
    if k == 0 {
        return v;
    }
    let half = k / 2;
    v * 10f64.powi(half) * 10f64.powi(k - half)
}

/// The values of a panel's finite points, widened a little (never empty, never infinite,
/// never too narrow to tick: see [`YAxis`]).
pub fn y_axis(panel: &Panel) -> YAxis {
    let (y0, y1) = finite_points(std::slice::from_ref(panel))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, y)| {
            (a.min(y), b.max(y))
        });
    if y0 > y1 {
        return YAxis {
            range: 0.0..1.0,
            exponent: 0,
        };
    }
    let magnitude = y0.abs().max(y1.abs());
    let exponent = if magnitude > LARGEST || (magnitude > 0.0 && magnitude < SMALLEST) {
        magnitude.log10().floor() as i32
    } else {
        0
    };
    let (y0, y1) = (times_ten_to(y0, -exponent), times_ten_to(y1, -exponent));
    // Both within ±1e300 now, so the span is finite.
    let (span, magnitude) = (y1 - y0, y0.abs().max(y1.abs()));
    let range = if span > magnitude * MIN_RELATIVE_SPAN {
        let pad = span * 0.08;
        (y0 - pad)..(y1 + pad)
    } else {
        // One value (or values an f64 barely tells apart): centred, with room around.
        let mid = y0 / 2.0 + y1 / 2.0;
        let pad = (mid.abs() * 0.1).max(0.5);
        (mid - pad)..(mid + pad)
    };
    YAxis { range, exponent }
}

/// Tick labels: short, and without float noise.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.2e}")
    } else {
        let text = format!("{v:.4}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x: std::ops::Range<u64>,
    legend: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let axis = y_axis(panel);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.key, (FAMILY, 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(78)
        .build_cartesian_2d(x, axis.range.clone())
        .map_err(e)?;
    // The key's last two parts (`score/mean`): the caption above has the whole key.
    let parts: Vec<&str> = panel.key.rsplitn(3, '/').collect();
    let mut y_desc = match parts.as_slice() {
        [last, before, _] | [last, before] => format!("{before}/{last}"),
        _ => panel.key.clone(),
    };
    if axis.exponent != 0 {
        y_desc.push_str(&format!(" (\u{d7}1e{})", axis.exponent));
    }
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .x_labels(8)
        .y_labels(6)
        .y_label_formatter(&tick)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(e)?;
    for (i, series) in panel.series.iter().enumerate() {
        let c = color(i);
        // A non-finite value breaks the line.
        let mut segments: Vec<Vec<(u64, f64)>> = vec![Vec::new()];
        for &(s, v) in &series.points {
            if v.is_finite() {
                if let Some(last) = segments.last_mut() {
                    last.push((s, axis.scale(v)));
                }
            } else if segments.last().is_some_and(|l| !l.is_empty()) {
                segments.push(Vec::new());
            }
        }
        let mut first = true;
        for segment in segments.iter().filter(|s| !s.is_empty()) {
            let drawn = chart
                .draw_series(LineSeries::new(segment.iter().copied(), c.stroke_width(2)))
                .map_err(e)?;
            if first && legend {
                drawn.label(series.label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            }
            first = false;
        }
        let count: usize = segments.iter().map(Vec::len).sum();
        if count <= MARK_POINTS_UP_TO {
            chart
                .draw_series(
                    segments
                        .iter()
                        .flatten()
                        .map(|&p| Circle::new(p, 3, c.filled())),
                )
                .map_err(e)?;
        }
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(jobs: &[&str]) -> Figure {
        let panels = vec![
            Panel {
                key: "critic/score/mean".into(),
                series: jobs
                    .iter()
                    .enumerate()
                    .map(|(i, j)| Series {
                        job: j.to_string(),
                        label: j.to_string(),
                        points: (1..=6)
                            .map(|s| {
                                (
                                    s,
                                    if s == 3 {
                                        f64::NAN
                                    } else {
                                        s as f64 * 0.1 + i as f64
                                    },
                                )
                            })
                            .collect(),
                    })
                    .collect(),
            },
            Panel {
                key: "val-core/openai/gsm8k/reward/mean@1".into(),
                series: vec![Series {
                    job: jobs[0].into(),
                    label: jobs[0].into(),
                    points: vec![(3, 0.5)],
                }],
            },
        ];
        Figure::new(format!("job {}", jobs.join(" vs ")), panels)
    }

    #[test]
    fn png_has_the_figure_size_and_ink() {
        let f = figure(&["a", "b"]);
        let bytes = render(&f, Format::Png).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(
            (info.width, info.height),
            (1000, TITLE_HEIGHT + 2 * PANEL_HEIGHT)
        );
        let (r, g, b) = PALETTE[0];
        let first_series = buf[..info.buffer_size()]
            .chunks(3)
            .filter(|p| p == &[r, g, b])
            .count();
        assert!(
            first_series > 100,
            "{first_series} pixels of the first series"
        );
        let dark = buf.chunks(3).filter(|p| p.iter().all(|c| *c < 60)).count();
        assert!(dark > 500, "text and axes drawn: {dark}");
    }

    #[test]
    fn svg_names_the_jobs_and_axes() {
        let text =
            String::from_utf8(render(&figure(&["run-a", "run-b"]), Format::Svg).unwrap()).unwrap();
        for needle in [
            "job run-a vs run-b",
            "critic/score/mean",
            "step",
            "run-b",
            "<polyline",
        ] {
            assert!(text.contains(needle), "{needle}");
        }
    }

    #[test]
    fn ranges_ignore_non_finite_values_and_are_never_empty() {
        let f = figure(&["a"]);
        assert_eq!(x_range(&f.panels), 1..6);
        let y = y_axis(&f.panels[0]).range;
        assert!(y.start < 0.1 && y.end > 0.6);
        assert_eq!(x_range(&f.panels[1..]), 2..4);
        let y = y_axis(&f.panels[1]).range;
        assert!(y.start < 0.5 && y.end > 0.5);
        assert_eq!(x_range(&[]), 0..1);
        assert_eq!(
            Format::from_path(std::path::Path::new("x.SVG")),
            Some(Format::Svg)
        );
        assert_eq!(Format::from_path(std::path::Path::new("x.jpg")), None);
    }

    /// Runs `f` in a thread and waits at most a minute: a guard (an infinite loop fails
    /// the test instead of hanging it), not a measure of speed.
    fn terminates<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{what}: did not end ({e})"))
    }

    fn panel(values: &[f64]) -> Panel {
        Panel {
            key: "a/b".into(),
            series: vec![Series {
                job: "j".into(),
                label: "j".into(),
                points: values
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as u64, v))
                    .collect(),
            }],
        }
    }

    #[test]
    fn every_finite_axis_has_a_finite_span_and_a_bounded_number_of_ticks() {
        let (max, min) = (f64::MAX, f64::MIN_POSITIVE);
        let cases: Vec<Vec<f64>> = vec![
            vec![max, -max],
            vec![max, max],
            vec![-max],
            vec![max, 0.0, f64::NAN, f64::INFINITY],
            vec![1e300, -1e300],
            vec![1e301, 1.0],
            vec![5e-324, 1e-323],
            vec![5e-324],
            vec![min, -min],
            vec![1.0, 1.0 + f64::EPSILON],
            vec![1e17, 1e17 + 16.0],
            vec![-3.0; 4],
            vec![0.0],
            vec![f64::NAN, f64::NEG_INFINITY],
            vec![],
        ];
        for values in cases {
            let axis = y_axis(&panel(&values));
            let r = axis.range.clone();
            assert!(
                r.start.is_finite() && r.end.is_finite() && (r.end - r.start).is_finite(),
                "{values:?} -> {axis:?}"
            );
            assert!(r.start < r.end, "{values:?} -> {axis:?}");
            for &v in values.iter().filter(|v| v.is_finite()) {
                let drawn = axis.scale(v);
                assert!(
                    drawn.is_finite() && r.start <= drawn && drawn <= r.end,
                    "{values:?}: {v} drawn at {drawn}, outside {r:?}"
                );
            }
            // Plotters' own tick search, for the labels and the light grid lines.
            for wanted in [6usize, 60] {
                let range = r.clone();
                let ticks = terminates(&format!("ticks of {values:?}"), move || {
                    plotters::coord::types::RangedCoordf64::from(range).key_points(wanted)
                });
                assert!(
                    !ticks.is_empty() && ticks.len() <= wanted,
                    "{values:?}: {} ticks",
                    ticks.len()
                );
            }
        }
        assert_eq!(y_axis(&panel(&[max, -max])).exponent, 308);
        assert_eq!(y_axis(&panel(&[0.25, 0.5])).exponent, 0);
    }

    #[test]
    fn values_near_the_largest_f64_are_drawn_and_steps_near_the_largest_u64_too() {
        let mut p = panel(&[f64::MAX, -f64::MAX, 1.0, f64::NAN]);
        p.series[0].points.push((u64::MAX, 2.0));
        let f = Figure::new("job j", vec![p]);
        assert_eq!(x_range(&f.panels), 0..u64::MAX);
        let text = terminates("rendering", move || render(&f, Format::Svg)).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("\u{d7}1e308"),
            "the scale is named on the axis"
        );
        let one = Panel {
            key: "k".into(),
            series: vec![Series {
                job: "j".into(),
                label: "j".into(),
                points: vec![(u64::MAX, 1.0)],
            }],
        };
        assert_eq!(x_range(std::slice::from_ref(&one)), u64::MAX - 1..u64::MAX);
        terminates("rendering one point", move || {
            render(&Figure::new("t", vec![one]), Format::Png)
        })
        .unwrap();
    }
}
