//! The runner's pipeline options: every option's name, type, default and
//! description (advertised through `DescribePipelineOptions`), and parsing with
//! validation into [`RunnerOptions`]. Pure: no I/O, no dependencies.
pub mod defaults;
mod name_mapping;
mod options;
mod parse;
pub mod secrets;
pub mod spelling;
mod text_list;
mod value;

pub use options::{OptionKind, OptionSpec, OPTIONS};
pub use parse::{GroupProtocol, OptionError, ProcessingGuarantee, RunnerOptions};
pub use value::OptionValue;
