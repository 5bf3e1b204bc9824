//! A task's durable state besides its GroupByKeys, its keys in the
//! changelog (`task_state`) and the contract every store keeps with the
//! commit cycle (`changelog`): user state (`user_state`, `multimap_state`,
//! `state_api`, `chunks`), timers (`timers`, which fire in a cycle: `timer_firing`, `expiry`), elements held for side
//! inputs (`held`, `side_input`) and work to do again (`deferred`).
pub mod changelog;
pub mod chunks;
pub mod deferred;
pub mod expiry;
pub mod held;
pub mod multimap_state;
pub mod side_input;
pub mod state_api;
pub mod task_state;
pub mod timer_firing;
pub mod timers;
pub mod user_state;
