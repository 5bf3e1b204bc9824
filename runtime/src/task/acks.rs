//! Which of a stage's bundles are complete. A bundle's outputs are queued on
//! the producer when it is processed, and the next bundle starts while Kafka
//! acknowledges them (the producer keeps their order). An at_least_once
//! flush waits for the acknowledgements; an exactly_once one does not, and
//! its commit asks first (`settled`), so a refused write, not an aborted
//! transaction, says why a cycle failed.
use std::collections::BTreeSet;

use crate::kafka::failure::Failure;

/// Most bundles whose outputs may wait for Kafka at once: the next bundle
/// waits, so a harness faster than the broker does not fill the producer's
/// queue (and memory).
pub const UNACKNOWLEDGED_BUNDLES: usize = 4;

#[derive(Debug, Default)]
pub struct Acknowledgements {
    /// Bundles up to this one were processed and their outputs queued.
    processed_through: u64,
    /// Processed bundles whose outputs Kafka has not acknowledged.
    waiting: BTreeSet<u64>,
    /// The first write Kafka refused.
    refused: Option<Failure>,
}

impl Acknowledgements {
    /// Bundle `seq` was processed (with the bundles up to `through`, which
    /// a split handed back), having queued outputs or not.
    pub fn processed(&mut self, seq: u64, through: u64, queued: bool) {
        self.processed_through = self.processed_through.max(through);
        if queued {
            self.waiting.insert(seq);
        }
    }

    /// Kafka answered for bundle `seq`; whether this is the first refusal.
    pub fn answered(&mut self, seq: u64, result: Result<(), Failure>) -> bool {
        self.waiting.remove(&seq);
        match result {
            Err(e) if self.refused.is_none() => {
                self.refused = Some(e);
                true
            }
            _ => false,
        }
    }

    /// Whether the next bundle must wait for acknowledgements first.
    pub fn full(&self) -> bool {
        self.waiting.len() >= UNACKNOWLEDGED_BUNDLES
    }

    /// Bundles up to this one are processed and acknowledged.
    pub fn acknowledged_through(&self) -> u64 {
        self.waiting.first().map_or(self.processed_through, |oldest| oldest - 1)
    }

    /// Bundles up to this one are complete for a flush that waits for
    /// acknowledgements or not.
    pub fn complete_through(&self, awaits_acks: bool) -> u64 {
        if awaits_acks {
            self.acknowledged_through()
        } else {
            self.processed_through
        }
    }

    /// What every bundle processed so far needs before a commit: answered
    /// with the first refusal (`None`: all acknowledged), or `Err(target)`,
    /// the bundle to wait for.
    pub fn settled(&self) -> Result<Option<Failure>, u64> {
        self.answer_for(self.processed_through)
    }

    /// The answer to a wait for the bundles up to `target`, if it has come.
    pub fn answer_for(&self, target: u64) -> Result<Option<Failure>, u64> {
        if self.refused.is_some() || self.acknowledged_through() >= target {
            Ok(self.refused.clone())
        } else {
            Err(target)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_without_acknowledgements_completes_on_processing_and_one_with_them_in_order() {
        let mut a = Acknowledgements::default();
        a.processed(1, 1, true);
        a.processed(2, 2, false);
        a.processed(3, 3, true);
        assert_eq!(a.complete_through(false), 3);
        assert_eq!(a.complete_through(true), 0);
        // Bundle 3's answer first: bundle 1 still holds everything after it.
        assert!(!a.answered(3, Ok(())));
        assert_eq!(a.acknowledged_through(), 0);
        assert!(!a.answered(1, Ok(())));
        assert_eq!(a.complete_through(true), 3);
    }

    #[test]
    fn a_split_hands_back_queued_bundles_which_count_as_processed() {
        let mut a = Acknowledgements::default();
        a.processed(4, 6, false);
        assert_eq!((a.acknowledged_through(), a.complete_through(false)), (6, 6));
    }

    #[test]
    fn the_next_bundle_waits_while_too_many_await_kafka() {
        let mut a = Acknowledgements::default();
        for seq in 1..=UNACKNOWLEDGED_BUNDLES as u64 {
            assert!(!a.full());
            a.processed(seq, seq, true);
        }
        assert!(a.full());
        a.answered(2, Ok(()));
        assert!(!a.full());
    }

    #[test]
    fn a_commit_waits_for_what_was_processed_and_hears_the_first_refusal() {
        let mut a = Acknowledgements::default();
        assert_eq!(a.settled(), Ok(None), "nothing processed: nothing to wait for");
        a.processed(1, 1, true);
        a.processed(2, 2, true);
        assert_eq!(a.settled(), Err(2));
        assert!(a.answered(2, Err(Failure::kafka("MessageSizeTooLarge", "too large"))));
        assert!(!a.answered(1, Err(Failure::kafka("PurgeQueue", "purged"))), "only the first refusal counts");
        let too_large = Some(Failure::kafka("MessageSizeTooLarge", "too large"));
        assert_eq!(a.settled(), Ok(too_large.clone()));
        assert_eq!(a.answer_for(9), Ok(too_large), "a refusal answers every wait");
    }
}
