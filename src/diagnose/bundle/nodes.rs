//! The nodes' part of a bundle: what every node is asked for, as plain values
//! ([`NodeParams`]), and how it is gathered: from this machine's view of the profile's
//! engines ([`gather_on`]), or elsewhere ([`Nodes`]: a Slurm run's, each node through its
//! own step, which calls [`gather_on`] for its own host).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{choose, pick_one};
use crate::cluster::collect::{self as gather, LogFile};
use crate::config::LoadedProfile;

/// What every node is asked for, whoever reads it: plain values, so that a node step on
/// another machine can be given them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeParams {
    /// The job's window of engine events and of Ray's files (seconds since the epoch).
    pub since_s: u64,
    pub until_s: u64,
    /// Ray's id of the job (its workers' files are named after it).
    pub job_hex: Option<String>,
    /// The submission id whose `job-driver-<id>.log` is wanted (none: the driver's log is
    /// had already).
    pub driver_of: Option<String>,
    pub file_cap: u64,
    pub node_cap: u64,
    /// How long the containers' part may take from when it is asked for.
    pub seconds: f64,
}

/// Gathers the nodes' part elsewhere than from this machine's view of the profile's
/// engines.
pub trait Nodes: Sync {
    fn gather<'a>(
        &'a self,
        params: &'a NodeParams,
    ) -> futures_util::future::BoxFuture<'a, gather::Collected>;
}

/// The nodes' part as `params` ask, from this machine's view of the profile's engines:
/// every host's, or (`only`) one host's (a Slurm node step's own).
pub async fn gather_on(
    loaded: &LoadedProfile,
    only: Option<&str>,
    params: &NodeParams,
) -> Result<gather::Collected, crate::cluster::Error> {
    let since = params.since_s as f64;
    let driver = params.driver_of.as_deref();
    let job_hex = params.job_hex.as_deref();
    let choose = |_head: bool, listing: &[LogFile]| {
        choose(
            listing,
            job_hex,
            since,
            driver,
            params.file_cap,
            params.node_cap,
        )
    };
    let pick = |_head: bool, f: &LogFile| pick_one(f, job_hex, since, driver, params.file_cap);
    let request = gather::Request {
        since_s: params.since_s,
        until_s: params.until_s,
        choose: &choose,
        pick: &pick,
        node_cap: params.node_cap,
        deadline: Instant::now() + Duration::from_secs_f64(params.seconds.clamp(0.0, 600.0)),
    };
    match only {
        Some(host) => gather::collect_host(loaded, host, &request).await,
        None => gather::collect(loaded, &request).await,
    }
}
