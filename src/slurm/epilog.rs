//! `argus slurm epilog`: removes every argus container on this node whose Slurm job is
//! no longer running (a node step killed outright leaves its containers). Meant as
//! Slurm's `Epilog=` (it runs as root on each node when a job ends; the job that is
//! ending is COMPLETING, so its containers go too) and safe to run at any time.

use bollard::Docker;

use super::Error;

/// What the epilog removed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EpilogReport {
    pub removed: Vec<String>,
}

pub async fn run(docker: &Docker) -> Result<EpilogReport, Error> {
    Ok(EpilogReport {
        removed: super::node::remove_dead(docker, None).await?,
    })
}
