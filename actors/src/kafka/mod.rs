//! Kafka clients: configuration, topic administration, and the producer used
//! for bootstrap records.
pub mod admin;
pub mod config;
