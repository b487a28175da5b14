//! Before Ray starts on several hosts: proof that every host sees the same shared storage.
//!
//! A random token is written through the head host's mount (a short-lived container of
//! the cluster's image with the cluster's mount) and read back through every other host's
//! mount. A host that reads something else (an empty local directory where the NFS export
//! should be mounted, another export) is named. Values reach the containers as arguments,
//! never inside a shell string. `up` stops at the first host that differs
//! ([`check_shared_storage`]); `doctor` takes every host's answer ([`compare`]).
//!
//! The probes get no network, `sh` as their explicit entrypoint, no capability but
//! `CAP_DAC_OVERRIDE` (root writes past a directory's mode, as the nodes do),
//! no-new-privileges and a read-only root file system ([`docker::confined`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use futures_util::future::join_all;

use super::Error;
use super::docker;
use super::hosts::Engine;
use super::plan::{ClusterPlan, LABEL_CLUSTER, LABEL_ROLE};
use crate::ui::Reporter;

/// Where probes are written, under the mount.
const PROBE_DIR: &str = ".argus/probe";

/// What `compare` saw on each host other than the head's: `Ok(None)` the same storage,
/// `Ok(Some(detail))` another one (or read-only), `Err` could not look.
pub type Seen = Vec<(String, Result<Option<String>, Error>)>;

/// Proves every host sees the same shared storage before Ray starts (`up`): the first
/// host that does not is an error.
pub async fn check_shared_storage(
    engines: &[Engine],
    plan: &ClusterPlan,
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    let Some(head) = plan.head() else {
        return Ok(());
    };
    let task = reporter.task("shared storage");
    task.update(&format!(
        "checking that {} hosts see the same storage",
        plan.hosts.len()
    ));
    let images: BTreeMap<String, String> = engines
        .iter()
        .map(|e| (e.name.clone(), head.image_id.clone()))
        .collect();
    let seen = match compare(engines, plan, &images, Duration::MAX).await {
        Ok(seen) => seen,
        Err(e) => {
            task.fail("cannot write");
            return Err(e);
        }
    };
    for (host, outcome) in seen {
        if let Some(detail) = outcome? {
            task.fail(&format!("host {host} differs"));
            return Err(Error::SharedStorageDiffers { host, detail });
        }
    }
    task.done(&format!("{} hosts see the same storage", plan.hosts.len()));
    Ok(())
}

/// Writes a random token through the head host's mount and reads it back through every
/// other host's, each probe a container of the image that host has (`images`: host ->
/// image id), each within `limit`. The probe files are removed whatever the outcome.
/// An error: the head's host could not write.
pub async fn compare(
    engines: &[Engine],
    plan: &ClusterPlan,
    images: &BTreeMap<String, String>,
    limit: Duration,
) -> Result<Seen, Error> {
    let Some(head) = plan.head() else {
        return Ok(Vec::new());
    };
    let token = crate::digest::random_hex(16).map_err(|source| Error::SharedStorage {
        path: "/dev/urandom".into(),
        source,
    })?;
    let mount = head.mount.target();
    let dir = format!("{mount}/{PROBE_DIR}");
    let file = format!("{dir}/{}-{token}", plan.cluster);
    let engine = |host: &str| engines.iter().find(|e| e.name == host);
    let Some(head_engine) = engine(&head.host) else {
        return Ok(Vec::new());
    };
    let probe = |host: &str, script: &str, args: &[&str]| {
        let mut cmd = vec!["-c".to_string(), script.to_string(), "probe".to_string()];
        cmd.extend(args.iter().map(|a| a.to_string()));
        let body = ContainerCreateBody {
            image: Some(
                images
                    .get(host)
                    .cloned()
                    .unwrap_or_else(|| head.image_id.clone()),
            ),
            cmd: Some(cmd),
            labels: Some(HashMap::from([
                (LABEL_CLUSTER.to_string(), plan.cluster.clone()),
                (LABEL_ROLE.to_string(), "probe".to_string()),
            ])),
            host_config: Some(HostConfig {
                mounts: Some(vec![docker::mount_of(&head.mount)]),
                network_mode: Some("none".to_string()),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Root writes into the storage as the nodes do (they keep Docker's default
        // capabilities): past a directory's mode with `CAP_DAC_OVERRIDE`, nothing else.
        docker::confined(body, &["sh"], &["DAC_OVERRIDE"])
    };
    let run = |docker, body| async move {
        match docker::run_to_end_within(docker, body, limit).await? {
            Some(outcome) => Ok(outcome),
            None => Err(Error::SharedStorage {
                path: mount.to_string(),
                source: std::io::Error::other(format!(
                    "the probe took more than {}s",
                    limit.as_secs()
                )),
            }),
        }
    };

    let body = probe(
        &head.host,
        r#"mkdir -p "$1" && printf %s "$3" > "$2""#,
        &[&dir, &file, &token],
    );
    let (code, output) = run(&head_engine.docker, body).await?;
    if code != 0 {
        return Err(Error::SharedStorage {
            path: format!("{mount} on host {}", head.host),
            source: std::io::Error::other(format!(
                "writing a probe file failed (exit {code}): {}",
                output.trim()
            )),
        });
    }
    let others: Vec<&Engine> = engines.iter().filter(|e| e.name != head.host).collect();
    // Each other host reads the token back, then proves it can write there too (a read-only
    // mount would fail every job that writes its records or checkpoints).
    let reads = join_all(others.iter().map(|e| {
        let body = probe(
            &e.name,
            r#"cat "$1" 2>&1 || exit 0; printf %s "$2" > "$1.$2" 2>/dev/null || echo "
WRITE-FAILED""#,
            &[&file, &e.name],
        );
        async move { (e.name.clone(), run(&e.docker, body).await) }
    }))
    .await;
    // The probes go whatever the outcome.
    let body = probe(&head.host, r#"rm -f "$1" "$1".*"#, &[&file]);
    let _ = run(&head_engine.docker, body).await;
    Ok(reads
        .into_iter()
        .map(|(host, read)| {
            let seen = read.map(|(_, output)| differs(&output, &token, mount, &head.host, &host));
            (host, seen)
        })
        .collect())
}

/// What one host's read says: None when it read the token and could write.
fn differs(output: &str, token: &str, mount: &str, head_host: &str, host: &str) -> Option<String> {
    if let Some(read) = output.strip_suffix("\nWRITE-FAILED\n")
        && read == token
    {
        return Some(format!("it sees the storage at {mount}, but read-only"));
    }
    if output == token {
        return None;
    }
    let seen = output.trim();
    Some(if seen.contains("No such file") {
        format!("a file written at {mount} on host {head_host} is not there on host {host}")
    } else {
        format!(
            "a file written at {mount} on host {head_host} reads differently on host {host}: {seen:?}"
        )
    })
}
