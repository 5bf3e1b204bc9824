//! Bytes on the wire and in stores: Beam's coders as far as the runner reads
//! them (`coder`, `coders`, `windowed`, `row`, `pickle`, `timestamp`), and the
//! records of runner-owned topics (`envelope`, `packed`).
pub mod coder;
pub mod coders;
pub mod envelope;
pub mod packed;
pub mod pickle;
pub mod row;
pub mod timestamp;
pub mod windowed;
