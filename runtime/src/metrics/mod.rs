//! Metrics the runner computes itself: bounded-trie metrics and the
//! Prometheus text format of its scrape endpoint.
pub mod bounded_trie;
pub mod prometheus;
