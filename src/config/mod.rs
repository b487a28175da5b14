//! What the user writes (profiles, JobSpecs, the old RayConfig) and where things live on
//! the shared storage: parsed strictly into types, defaulted, validated before any side
//! effect. Secrets found here are remembered for redaction (`secrets`).

pub mod docker;
pub mod env;
pub mod jobspec;
pub mod layout;
#[cfg(test)]
mod mutation_tests;
pub mod profile;
pub mod ray_config;
pub mod size;
pub mod yaml;

pub use layout::{ContainerLayout, Layout};
pub use profile::{LoadedProfile, Profile};
pub use yaml::ConfigError;
