//! The integration tests: one binary, real Docker Engine, real Ray.
//!
//! Docker tests run by default; `ARGUS_TEST_SKIP_DOCKER=1` skips them (and says so).

mod auth;
mod bad_input;
mod cluster;
mod code_snapshot;
mod diagnose;
mod doctor;
mod doctor_net;
mod export;
mod export_job;
mod foreign_image;
mod harness;
mod health;
mod hostile_cli;
mod hostile_files;
mod hostile_hub;
mod hostile_logs;
mod hostile_storage;
mod hostile_verl;
mod hosts;
mod house;
mod hub;
mod hydra;
mod image_distribution;
mod job_failure;
mod multihost;
mod podman;
mod prepare;
mod profiles;
mod records_race;
mod run;
mod shared_root;
mod skewed_clock;
mod slurm;
mod slurm_hosts;
mod snapshots;
mod submit;
mod supervise;
mod training;
mod tunnel;
mod verl;
