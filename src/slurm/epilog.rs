//! `argus slurm epilog`: removes every argus container on this node whose Slurm job is
//! no longer running (a node step killed outright leaves its containers). Meant as
//! Slurm's `Epilog=` (it runs as root on each node when a job ends; the job that is
//! ending is COMPLETING, so its containers go too) and safe to run at any time.

use super::Error;
use crate::cluster::NodeEngine;

/// What the epilog removed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EpilogReport {
    pub removed: Vec<String>,
}

pub async fn run(engine: &NodeEngine) -> Result<EpilogReport, Error> {
    Ok(EpilogReport {
        removed: super::node::remove_dead(engine, None).await?,
    })
}
