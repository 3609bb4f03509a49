//! Summary statistics of latency samples: nearest-rank percentiles, so a
//! reported p99 is always a value that was actually observed.

use std::time::{Duration, Instant};

/// Microseconds per call of `f` in a micro-benchmark: the best of five
/// rounds of `n` calls (the best round is the one least disturbed by the
/// rest of the machine).
pub fn per_call_us(n: u32, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}

/// A latency distribution, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// The `p`-th percentile (0 < p <= 100) of `sorted` by the nearest-rank
/// method: the smallest sample such that at least `p`% of the samples are at
/// or below it. `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // Rank in 1..=n; the float is at most n, so the cast cannot overflow.
    let rank = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64) as usize;
    Some(sorted[rank - 1])
}

impl Summary {
    /// Summarises `samples` (any order; NaNs are dropped). `None` if empty.
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Option<Summary> {
        let mut v: Vec<f64> = samples.into_iter().filter(|x| !x.is_nan()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n.max(1) as f64;
        Some(Summary {
            n,
            min: *v.first()?,
            p50: percentile(&v, 50.0)?,
            p90: percentile(&v, 90.0)?,
            p99: percentile(&v, 99.0)?,
            max: *v.last()?,
            mean,
        })
    }

    /// Summarises durations, in milliseconds.
    pub fn of_durations(samples: impl IntoIterator<Item = Duration>) -> Option<Summary> {
        Summary::of(samples.into_iter().map(ms))
    }
}

/// A duration in (fractional) milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A number of milliseconds for a table: three significant figures or so.
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// A ratio to a floor figure: `12.3x`.
pub fn fmt_x(v: f64, floor: f64) -> String {
    if floor > 0.0 && v.is_finite() {
        format!("{:.1}x", v / floor)
    } else {
        "-".to_owned()
    }
}

/// A rate for a table: `1234/s`.
pub fn fmt_rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.1}/s")
    }
}

/// A byte count for a table.
pub fn fmt_bytes(v: f64) -> String {
    if v >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", v / (1024.0 * 1024.0))
    } else if v >= 1024.0 {
        format!("{:.1} KiB", v / 1024.0)
    } else {
        format!("{v:.0} B")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests report failure by panicking

    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.1), Some(1.0));
        let small = [3.0, 1.0, 2.0];
        let s = Summary::of(small).unwrap();
        assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 2.0, 3.0, 3.0));
        assert_eq!(s.mean, 2.0);
        assert_eq!(percentile(&[], 50.0), None);
        assert!(Summary::of([]).is_none());
    }

    #[test]
    fn p99_of_ten_is_the_largest() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), Some(10.0));
        assert_eq!(percentile(&v, 90.0), Some(9.0));
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_ms(1.234), "1.23 ms");
        assert_eq!(fmt_ms(123.4), "123 ms");
        assert_eq!(fmt_x(10.0, 2.0), "5.0x");
        assert_eq!(fmt_x(10.0, 0.0), "-");
        assert_eq!(fmt_bytes(2048.0), "2.0 KiB");
    }
}
