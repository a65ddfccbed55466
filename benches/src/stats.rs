//! Latency histograms (HdrHistogram, nanoseconds) and how they are printed.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Lowest latency told apart from zero: 1 µs. Values below still count.
const LOWEST_NS: u64 = 1_000;
/// Highest latency recorded: 120 s; longer ones are clamped.
const HIGHEST_NS: u64 = 120_000_000_000;
/// Three significant digits: 0.1% relative error.
const SIGFIGS: u8 = 3;

/// A latency distribution, recorded in nanoseconds.
#[derive(Clone)]
pub(crate) struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    pub(crate) fn new() -> Self {
        Self {
            // The bounds are constants that hdrhistogram accepts.
            histogram: Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIGS)
                .expect("valid histogram bounds"),
        }
    }

    pub(crate) fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(ns.min(HIGHEST_NS));
    }

    pub(crate) fn merge(&mut self, other: &Self) {
        // Same bounds on both sides, so adding cannot fail.
        self.histogram
            .add(&other.histogram)
            .expect("histograms with the same bounds");
    }

    pub(crate) fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// The latency at `quantile` (0..=1), in microseconds; NaN when empty.
    pub(crate) fn quantile_us(&self, quantile: f64) -> f64 {
        if self.histogram.is_empty() {
            return f64::NAN;
        }
        self.histogram.value_at_quantile(quantile) as f64 / 1_000.0
    }

    pub(crate) fn p50(&self) -> f64 {
        self.quantile_us(0.50)
    }

    pub(crate) fn p90(&self) -> f64 {
        self.quantile_us(0.90)
    }

    pub(crate) fn p99(&self) -> f64 {
        self.quantile_us(0.99)
    }

    pub(crate) fn max(&self) -> f64 {
        if self.histogram.is_empty() {
            return f64::NAN;
        }
        self.histogram.max() as f64 / 1_000.0
    }

    /// `(quantile, µs)` points for a percentile plot, up to `max_quantile`.
    pub(crate) fn curve(&self, max_quantile: f64) -> Vec<(f64, f64)> {
        if self.histogram.is_empty() {
            return Vec::new();
        }
        // Ten points per halving of the distance to 100%: even spacing on a
        // "nines" axis.
        self.histogram
            .iter_quantiles(10)
            .map(|step| {
                (
                    step.quantile_iterated_to(),
                    step.value_iterated_to() as f64 / 1_000.0,
                )
            })
            .filter(|&(quantile, _)| quantile <= max_quantile)
            .collect()
    }
}

/// Microseconds with no decimals, or "n/a".
pub(crate) fn us(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.0}")
    } else {
        "n/a".to_owned()
    }
}

/// Milliseconds from microseconds: two decimals below 10 ms, one above;
/// or "n/a".
pub(crate) fn ms(value_us: f64) -> String {
    match value_us / 1_000.0 {
        ms if !ms.is_finite() => "n/a".to_owned(),
        ms if ms < 10.0 => format!("{ms:.2}"),
        ms => format!("{ms:.1}"),
    }
}

/// `ours / theirs` with two decimals followed by "x", or "n/a".
pub(crate) fn ratio(ours: f64, theirs: f64) -> String {
    match ratio_value(ours, theirs) {
        Some(r) => format!("{r:.2}x"),
        None => "n/a".to_owned(),
    }
}

/// `ours / theirs` when both are finite and `theirs` is positive.
pub(crate) fn ratio_value(ours: f64, theirs: f64) -> Option<f64> {
    (ours.is_finite() && theirs.is_finite() && theirs > 0.0).then(|| ours / theirs)
}

/// The median of the ratios of paired figures (ours, theirs), each pair
/// measured at the same time (one round of a benchmark); pairs without a
/// ratio are left out. `None` when no pair has one.
pub(crate) fn paired_median(pairs: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    median(
        pairs
            .into_iter()
            .filter_map(|(ours, theirs)| ratio_value(ours, theirs))
            .collect(),
    )
}

/// The median of `values`; `None` when there are none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[mid]),
        _ => Some((values[mid - 1] + values[mid]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![0.9, 0.7, 1.2]), Some(0.9));
        assert_eq!(median(vec![1.0, 0.5, 0.8, 0.6]), Some(0.7));
        // A pair without a ratio (nothing measured on their side) is left out.
        assert_eq!(
            paired_median([(2.0, 1.0), (1.0, 0.0), (3.0, 2.0), (1.0, 2.0)]),
            Some(1.5)
        );
    }

    #[test]
    fn quantiles_are_in_microseconds() {
        let mut latencies = Latencies::new();
        for us in 1..=100u64 {
            latencies.record(Duration::from_micros(us * 10));
        }
        assert!((latencies.p50() - 500.0).abs() < 1.0);
        assert!((latencies.max() - 1000.0).abs() < 1.0);
        assert_eq!(us(latencies.p99()), "990");
        assert_eq!(ratio(1.0, 2.0), "0.50x");
        assert_eq!(ratio(1.0, f64::NAN), "n/a");
        assert_eq!(ms(432.0), "0.43");
        assert_eq!(ms(501_234.0), "501.2");
    }
}
