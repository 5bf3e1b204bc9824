//! Event time: windowing strategies (`windowing`), windows the SDK computes
//! (`window_fns`), triggers (`trigger`) and a task's input watermark
//! (`watermark`).
pub mod trigger;
pub mod watermark;
pub mod window_fns;
pub mod windowing;
