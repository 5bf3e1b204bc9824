//! The decisions of one task, without I/O: its lifecycle and its way out
//! when its partitions move (`leaving`), its commit cycle, what follows
//! a commit, in order (`cycle_steps`), and when the next cycle opens
//! (`cycle_requests`),
//! how much work it may have in flight, what waits while a cycle closes
//! (`gate`), what it hands its stage next (`pump`), what it knows of its GroupByKey
//! actors, when its stage has a bundle to run, when it splits one and which
//! bundles' writes Kafka acknowledged (`acks`), the
//! durations it reports, which tasks run in this copy (`roster`), what the
//! job does as the group, its tasks and its timers tell it (`membership`),
//! which of them stalled (`stall`), when each input partition last changed
//! hands (`epochs`), which transactional ids a copy
//! initialises before tasks start (`txn_ids`) and how long each attempt
//! to initialise one may last (`txn_init`). The
//! task supervisor actor (`actors::task`) feeds these events and carries out
//! what they decide.
pub mod acks;
pub mod bundle;
pub mod cycle;
pub mod cycle_requests;
pub mod cycle_steps;
pub mod epochs;
pub mod flow;
pub mod gate;
pub mod gbk_view;
pub mod handover;
pub mod leaving;
pub mod lifecycle;
pub mod membership;
pub mod pump;
pub mod readiness;
pub mod roster;
pub mod shared_txn;
pub mod split;
pub mod stall;
pub mod stats;
pub mod status;
pub mod txn_ids;
pub mod txn_init;
