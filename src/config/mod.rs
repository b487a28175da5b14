//! What the user writes (profiles, later job specs) and where things live on the shared
//! storage: parsed strictly, defaulted, validated before any side effect.

pub mod jobspec;
pub mod layout;
pub mod profile;
pub mod ray_config;
pub mod secrets;
pub mod size;
pub mod yaml;

pub use layout::Layout;
pub use profile::{LoadedProfile, Profile};
pub use yaml::ConfigError;
