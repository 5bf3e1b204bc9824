//! An application across runs, versions and copies: what a run leaves for
//! the next (`identity`), whether a new version may take over (`update`), the
//! copies' shared view (`copies`), standbys and warm-up (`standby`,
//! `warm_up`), and the SDK harnesses a copy starts (`harnesses`,
//! `sdk_images`).
pub mod copies;
pub mod harnesses;
pub mod identity;
pub mod sdk_images;
pub mod standby;
pub mod update;
pub mod warm_up;
