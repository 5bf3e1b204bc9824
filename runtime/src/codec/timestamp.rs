//! Beam timestamps in milliseconds, with the model's bounds.

/// Milliseconds since the epoch.
pub type Millis = i64;

/// Beam's smallest timestamp (Java `BoundedWindow.TIMESTAMP_MIN_VALUE`).
pub const MIN_TIMESTAMP: Millis = i64::MIN / 1000;
/// Beam's largest timestamp (Java `BoundedWindow.TIMESTAMP_MAX_VALUE`).
pub const MAX_TIMESTAMP: Millis = i64::MAX / 1000;
/// The end of the global window: one day before the largest timestamp.
pub const GLOBAL_WINDOW_MAX: Millis = MAX_TIMESTAMP - 24 * 60 * 60 * 1000;

/// A watermark value: below every timestamp, a timestamp, or past every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Watermark {
    NegInf,
    At(Millis),
    PosInf,
}

impl Watermark {
    /// The wire form used in watermark reports.
    pub fn to_millis(self) -> Millis {
        match self {
            Watermark::NegInf => i64::MIN,
            Watermark::At(m) => m,
            Watermark::PosInf => i64::MAX,
        }
    }

    pub fn from_millis(m: Millis) -> Watermark {
        match m {
            i64::MIN => Watermark::NegInf,
            i64::MAX => Watermark::PosInf,
            m if m > MAX_TIMESTAMP => Watermark::PosInf,
            m => Watermark::At(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_order_and_round_trip() {
        assert!(Watermark::NegInf < Watermark::At(MIN_TIMESTAMP));
        assert!(Watermark::At(MAX_TIMESTAMP) < Watermark::PosInf);
        for w in [Watermark::NegInf, Watermark::At(-5), Watermark::At(0), Watermark::PosInf] {
            assert_eq!(Watermark::from_millis(w.to_millis()), w);
        }
        assert_eq!(Watermark::from_millis(MAX_TIMESTAMP + 1), Watermark::PosInf);
    }
}
