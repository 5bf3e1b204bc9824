//! How long each attempt to initialise a transactional id may last.
//!
//! A task taking over from a killed copy initialises the id the killed
//! producer carried. If that producer left a transaction open, the
//! coordinator refuses the first request with CONCURRENT_TRANSACTIONS while
//! it aborts the transaction (milliseconds of work), and librdkafka waits a
//! fixed 500 ms before asking again: every fail-over would pay them. So the
//! first attempts get a short deadline, after which a fresh producer asks
//! again at once. The deadline follows how long an initialisation takes on
//! this cluster (a few milliseconds locally, far more over TLS to a distant
//! one), so a start that would have succeeded is not cut short. Before any
//! initialisation was timed, the client's first contact with the cluster
//! (connect, handshake, metadata) stands in for one; on a cluster where an
//! initialisation takes longer than the quick deadlines allow, there are
//! none (librdkafka's 500 ms is then a small part of a start).
use std::time::Duration;

/// Attempts with a short deadline before one without.
const QUICK_ATTEMPTS: usize = 3;
/// A quick attempt's deadline, in multiples of a typical initialisation.
const TYPICAL_MULTIPLE: u32 = 3;
const SHORTEST: Duration = Duration::from_millis(20);
const LONGEST_QUICK: Duration = Duration::from_millis(400);
/// The first deadline before anything on this cluster was timed:
/// short, as a distant cluster pays the quick attempts once (the next
/// initialisation is paced by the last one), and a standby's first
/// take-over pays no more.
const UNTIMED: Duration = Duration::from_millis(50);

#[derive(Debug, Default, Clone)]
pub struct InitPacing {
    /// A moving average of successful attempts' durations.
    typical: Option<Duration>,
    /// Whether `typical` is an estimate from the first contact.
    estimated: bool,
}

impl InitPacing {
    /// The deadlines of the quick attempts, shortest first; the caller's
    /// last attempt waits as long as the transactional API allows.
    pub fn deadlines(&self) -> Vec<Duration> {
        let first = match self.typical {
            Some(t) => (t * TYPICAL_MULTIPLE).max(SHORTEST),
            None => UNTIMED,
        };
        if first > LONGEST_QUICK {
            return Vec::new();
        }
        (0..QUICK_ATTEMPTS as u32).map(|i| (first * 2u32.pow(i)).min(LONGEST_QUICK)).collect()
    }

    /// A client's first contact with the cluster took `took`: an estimate
    /// until an initialisation is timed.
    pub fn first_contact(&mut self, took: Duration) {
        if self.typical.is_none() {
            // A fresh producer's initialisation is the same connection and
            // handshake, then two short requests (a client's first metadata
            // request asks for every topic's: about as long).
            self.typical = Some(took);
            self.estimated = true;
        }
    }

    /// An attempt succeeded after `took`.
    pub fn succeeded(&mut self, took: Duration) {
        self.typical = Some(match self.typical {
            Some(t) if !self.estimated => (t * 3 + took) / 4,
            _ => took,
        });
        self.estimated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn before_any_timing_short_deadlines_that_double() {
        assert_eq!(InitPacing::default().deadlines(), vec![ms(50), ms(100), ms(200)]);
    }

    #[test]
    fn a_fast_cluster_gets_short_deadlines_that_double() {
        let mut p = InitPacing::default();
        p.succeeded(ms(8));
        assert_eq!(p.deadlines(), vec![ms(24), ms(48), ms(96)]);
        p.succeeded(ms(2));
        // 6.5 ms typical: three times that is below the shortest deadline.
        assert_eq!(p.deadlines(), vec![SHORTEST, ms(40), ms(80)]);
    }

    #[test]
    fn a_slow_cluster_gets_long_deadlines_capped_or_none() {
        let mut p = InitPacing::default();
        p.succeeded(ms(90));
        assert_eq!(p.deadlines(), vec![ms(270), LONGEST_QUICK, LONGEST_QUICK]);
        p.succeeded(ms(500));
        // 192.5 ms typical: no quick deadline could let one succeed.
        assert_eq!(p.deadlines(), Vec::<Duration>::new());
    }

    #[test]
    fn the_first_contact_stands_in_until_an_initialisation_is_timed() {
        let mut p = InitPacing::default();
        p.first_contact(ms(9));
        assert_eq!(p.deadlines(), vec![ms(27), ms(54), ms(108)], "9 ms estimated");
        p.first_contact(ms(50));
        assert_eq!(p.deadlines()[0], ms(27), "only the first contact counts");
        p.succeeded(ms(30));
        assert_eq!(p.deadlines(), vec![ms(90), ms(180), ms(360)], "the timing replaces the estimate");
        p.first_contact(ms(1));
        assert_eq!(p.deadlines()[0], ms(90));
    }

    #[test]
    fn a_distant_clusters_first_contact_leaves_no_quick_attempt() {
        let mut p = InitPacing::default();
        p.first_contact(ms(150));
        assert!(p.deadlines().is_empty());
    }

    #[test]
    fn one_slow_attempt_moves_the_average_a_quarter_of_the_way() {
        let mut p = InitPacing::default();
        p.succeeded(ms(10));
        p.succeeded(ms(50));
        assert_eq!(p.deadlines()[0], ms(60), "typical 20 ms");
    }
}
