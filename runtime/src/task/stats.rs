//! Durations a task reports about itself (commit cycles, bundles): count,
//! longest and an approximate median, in constant memory.

/// Buckets of 1.25× width from 1 ms: the median is known within 25%.
const BUCKETS: usize = 96;
const GROWTH: f64 = 1.25;

#[derive(Clone, Debug)]
pub struct DurationStats {
    buckets: [u64; BUCKETS],
    count: u64,
    max: u64,
}

impl Default for DurationStats {
    fn default() -> Self {
        DurationStats { buckets: [0; BUCKETS], count: 0, max: 0 }
    }
}

fn bucket(ms: u64) -> usize {
    if ms <= 1 {
        return 0;
    }
    (((ms as f64).ln() / GROWTH.ln()).ceil() as usize).min(BUCKETS - 1)
}

fn upper_bound(b: usize) -> u64 {
    GROWTH.powi(b as i32).round() as u64
}

impl DurationStats {
    pub fn record(&mut self, ms: u64) {
        self.buckets[bucket(ms)] += 1;
        self.count += 1;
        self.max = self.max.max(ms);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The upper bound of the bucket holding the median (0 when empty),
    /// never above the longest duration seen.
    pub fn median(&self) -> u64 {
        self.quantile(0.5)
    }

    /// Like `median`, for the `q` quantile (0 < q ≤ 1).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((self.count as f64 * q).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return upper_bound(b).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_within_a_bucket_and_max_exact() {
        let mut s = DurationStats::default();
        assert_eq!(s.median(), 0);
        for ms in [10, 12, 100, 11, 9, 5_000, 10] {
            s.record(ms);
        }
        assert_eq!(s.count(), 7);
        assert_eq!(s.max(), 5_000);
        let m = s.median();
        assert!((10..=13).contains(&m), "median 10 within 25%, got {m}");
        let p99 = s.quantile(0.99);
        assert_eq!(p99, 5_000, "the top of 7 is the longest");
        assert!(s.quantile(0.7) >= 12 && s.quantile(0.7) <= 15, "{}", s.quantile(0.7));
    }

    #[test]
    fn zero_and_huge_durations_fit() {
        let mut s = DurationStats::default();
        s.record(0);
        s.record(u64::MAX / 2);
        assert_eq!(s.count(), 2);
        assert_eq!(s.median(), 1.min(s.max()));
    }
}
