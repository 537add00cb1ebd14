//! The dashboard's charts: SVG rendered on the server by `plotters` (its SVG backend only,
//! no fonts: the browser draws the text). Values are micro-USDC integers end to end; the
//! axis labels use the page language's exact number format.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::i18n::Lang;
use super::render::escape;

/// One bar: its label and its value in micro-USDC.
pub struct Bar {
    pub label: String,
    pub micro_usdc: i64,
}

/// Bars drawn at most; a longer list shows its largest ones (the table beside the chart
/// has them all).
pub const BARS_MAX: usize = 40;

const BAR_COLOR: RGBColor = RGBColor(0x1f, 0x5f, 0xbf);
const WIDTH: u32 = 720;
/// The bar charts by key sit two abreast: a narrower canvas keeps their text readable.
const ROWS_WIDTH: u32 = 420;

/// The segments of `n` bars: a segmented range `0..=last` has a segment per value.
fn segments(n: usize) -> std::ops::Range<i32> {
    0..(n.max(1) as i32 - 1).max(0)
}

/// The value range of the axis: from 0 (or the lowest negative value) to a tenth above the
/// highest value; one USDC when everything is zero.
fn bounds(bars: &[Bar]) -> (i64, i64) {
    let lo = bars.iter().map(|b| b.micro_usdc).min().unwrap_or(0).min(0);
    let hi = bars.iter().map(|b| b.micro_usdc).max().unwrap_or(0).max(0);
    if lo == 0 && hi == 0 {
        return (0, 1_000_000);
    }
    (lo.saturating_sub(lo.abs() / 10), hi.saturating_add(hi / 10))
}

/// Bars over time (periods in order), labelled below.
pub fn columns(bars: &[Bar], lang: Lang, label: &str) -> String {
    let bars = &bars[bars.len().saturating_sub(BARS_MAX)..];
    render(WIDTH, 280, label, |root| {
        let (lo, hi) = bounds(bars);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(110)
            .build_cartesian_2d(segments(bars.len()).into_segmented(), lo..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .y_labels(5)
            .y_label_formatter(&|v| lang.decimal(*v, 6))
            .x_labels(bars.len().clamp(1, 10))
            .x_label_formatter(&|v| segment_label(bars, v))
            .label_style(("sans-serif", 13))
            .draw()?;
        chart.draw_series(
            Histogram::vertical(&chart)
                .style(BAR_COLOR.filled())
                .margin(2)
                .data(
                    bars.iter()
                        .enumerate()
                        .map(|(i, b)| (i as i32, b.micro_usdc)),
                ),
        )?;
        Ok(())
    })
}

/// Bars by key (GPUs, models), largest first, labelled on the left.
pub fn rows(bars: &[Bar], lang: Lang, label: &str) -> String {
    let mut sorted: Vec<&Bar> = bars.iter().collect();
    sorted.sort_by(|a, b| b.micro_usdc.cmp(&a.micro_usdc).then(a.label.cmp(&b.label)));
    sorted.truncate(BARS_MAX);
    // Top to bottom: the first bar at the top of the axis.
    sorted.reverse();
    let height = 50 + 24 * sorted.len().max(1) as u32;
    render(ROWS_WIDTH, height, label, |root| {
        let owned: Vec<Bar> = sorted
            .iter()
            .map(|b| Bar {
                label: b.label.clone(),
                micro_usdc: b.micro_usdc,
            })
            .collect();
        let (lo, hi) = bounds(&owned);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(110)
            .build_cartesian_2d(lo..hi, segments(owned.len()).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(3)
            .x_label_formatter(&|v| lang.decimal(*v, 6))
            .y_labels(owned.len().max(1))
            .y_label_formatter(&|v| segment_label(&owned, v))
            .label_style(("sans-serif", 13))
            .draw()?;
        chart.draw_series(
            Histogram::horizontal(&chart)
                .style(BAR_COLOR.filled())
                .margin(3)
                .data(
                    owned
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (i as i32, b.micro_usdc)),
                ),
        )?;
        Ok(())
    })
}

/// One point of a score over time: its label (a date) and the score in basis points.
pub struct Point {
    pub label: String,
    pub bps: u16,
}

/// The score axis: two points below the lowest and above the highest score, in whole
/// percent, within 0–100 %.
fn score_bounds(points: &[Point]) -> (i32, i32) {
    let lo = points
        .iter()
        .map(|p| i32::from(p.bps))
        .min()
        .unwrap_or(9_000);
    let hi = points
        .iter()
        .map(|p| i32::from(p.bps))
        .max()
        .unwrap_or(9_000);
    let lo = ((lo - 200).max(0) / 100) * 100;
    let hi = (((hi + 200).min(10_000) + 99) / 100) * 100;
    (lo, hi.max(lo + 100))
}

/// A score over time (the reliability trend, oldest first): a line with a dot per point,
/// the score axis in the page language's percent.
pub fn line(points: &[Point], lang: Lang, label: &str) -> String {
    render(WIDTH, 240, label, |root| {
        let (lo, hi) = score_bounds(points);
        let last = (points.len().max(2) - 1) as i32;
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(80)
            .build_cartesian_2d(0..last, lo..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .y_labels(5)
            .y_label_formatter(&|v| lang.percent(u16::try_from(*v).unwrap_or(0)))
            // Up to ten: plotters picks every fifth day of thirty.
            .x_labels(10)
            .x_label_formatter(&|i| {
                usize::try_from(*i)
                    .ok()
                    .and_then(|i| points.get(i))
                    .map(|p| p.label.clone())
                    .unwrap_or_default()
            })
            .label_style(("sans-serif", 13))
            .draw()?;
        let at = |(i, p): (usize, &Point)| (i as i32, i32::from(p.bps));
        chart.draw_series(LineSeries::new(
            points.iter().enumerate().map(at),
            BAR_COLOR.stroke_width(2),
        ))?;
        chart.draw_series(
            points
                .iter()
                .enumerate()
                .map(|p| Circle::new(at(p), 3, BAR_COLOR.filled())),
        )?;
        Ok(())
    })
}

fn segment_label(bars: &[Bar], v: &SegmentValue<i32>) -> String {
    match v {
        SegmentValue::CenterOf(i) => usize::try_from(*i)
            .ok()
            .and_then(|i| bars.get(i))
            .map(|b| b.label.clone())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult<'a> =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

/// Draws into an SVG document labelled `label` for screen readers; scales to its container.
fn render(
    width: u32,
    height: u32,
    label: &str,
    draw: impl for<'a> FnOnce(&Area<'a>) -> DrawResult<'a>,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|_| draw(&root).map_err(|e| e.to_string()));
        let presented = root.present().map_err(|e| e.to_string());
        if let Err(e) = drawn.and(presented) {
            // Drawing into a string cannot fail for I/O; a failure is a chart without bars.
            tracing::warn!(error = %e, "a dashboard chart could not be drawn");
        }
    }
    svg.replacen(
        "<svg ",
        &format!(
            "<svg role=\"img\" aria-label=\"{}\" focusable=\"false\" preserveAspectRatio=\"xMinYMin meet\" ",
            escape(label)
        ),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars(values: &[(&str, i64)]) -> Vec<Bar> {
        values
            .iter()
            .map(|(l, v)| Bar {
                label: (*l).to_owned(),
                micro_usdc: *v,
            })
            .collect()
    }

    #[test]
    fn charts_are_labelled_svg_with_one_bar_per_value_and_local_numbers() {
        let svg = columns(
            &bars(&[("30.11.", 12_500_000), ("01.12.", 3_000_000), ("02.12.", 0)]),
            Lang::De,
            "Nettoeinnahmen je Zeitraum",
        );
        assert!(svg.starts_with("<svg role=\"img\" aria-label=\"Nettoeinnahmen je Zeitraum\""));
        assert!(svg.contains("30.11."), "{svg}");
        assert!(
            svg.contains(",00") || svg.contains(",5"),
            "German axis numbers: {svg}"
        );
        // One bar per value (the zero one flat), beside the white background.
        let filled = svg.matches("fill=\"#1F5FBF\"").count();
        assert_eq!(filled, 3, "{svg}");
        assert!(svg.contains("height=\"0\" opacity=\"1\" fill=\"#1F5FBF\""));
        assert!(svg.len() < 40_000, "{} bytes", svg.len());

        let svg = rows(&bars(&[("gpu-a", 5), ("gpu-b", 7)]), Lang::En, "by GPU");
        let (a, b) = (svg.find("gpu-a").unwrap(), svg.find("gpu-b").unwrap());
        assert!(svg.contains("gpu-a") && svg.contains("gpu-b"));
        assert_ne!(a, b);
    }

    #[test]
    fn a_trend_is_a_line_with_a_dot_per_day_and_local_percentages() {
        let points: Vec<Point> = (0..30)
            .map(|i| Point {
                label: format!("d{i}"),
                bps: 9_000 + i * 10,
            })
            .collect();
        let svg = line(&points, Lang::De, "Verlauf");
        assert!(svg.starts_with("<svg role=\"img\" aria-label=\"Verlauf\""));
        assert!(svg.contains("<polyline"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 30, "{svg}");
        assert!(svg.contains(",00 %"), "German percentages: {svg}");
        for day in ["d0", "d5", "d25"] {
            assert!(svg.contains(&format!("\n{day}\n")), "{day}: {svg}");
        }
        // Empty and flat trends still draw.
        assert!(line(&[], Lang::En, "x").starts_with("<svg"));
        assert_eq!(score_bounds(&points[..1]), (8_800, 9_200));
        let full = [Point {
            label: String::new(),
            bps: 10_000,
        }];
        assert_eq!(score_bounds(&full), (9_800, 10_000));
    }

    #[test]
    fn an_empty_or_negative_chart_still_draws() {
        assert!(columns(&[], Lang::En, "x").starts_with("<svg"));
        let svg = columns(&bars(&[("a", -2_000_000), ("b", 1_000_000)]), Lang::En, "x");
        assert!(
            svg.contains("-2.000000") || svg.contains("-1.000000"),
            "{svg}"
        );
        // One bar: one segment, drawn.
        let svg = rows(&bars(&[("gpu-a", 5_000_000)]), Lang::En, "x");
        assert_eq!(svg.matches("fill=\"#1F5FBF\"").count(), 1, "{svg}");
        let svg = columns(&bars(&[("a", 5_000_000)]), Lang::En, "x");
        assert_eq!(svg.matches("fill=\"#1F5FBF\"").count(), 1, "{svg}");
    }
}
