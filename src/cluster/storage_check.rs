//! Before Ray starts on several hosts: proof that every host sees the same shared storage.
//!
//! A random token is written through the head host's mount (a short-lived container of
//! the cluster's image with the cluster's mount) and read back through every other host's
//! mount. A host that reads something else (an empty local directory where the NFS export
//! should be mounted, another export) is named. Values reach the containers as arguments,
//! never inside a shell string.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use futures_util::future::try_join_all;

use super::Error;
use super::docker;
use super::hosts::Engine;
use super::plan::{ClusterPlan, LABEL_CLUSTER, LABEL_ROLE};
use crate::ui::Reporter;

/// Where probes are written, under the mount.
const PROBE_DIR: &str = ".argus/probe";

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
    let token = crate::digest::random_hex(16).map_err(|source| Error::SharedStorage {
        path: "/dev/urandom".into(),
        source,
    })?;
    let mount = head.mount.target();
    let dir = format!("{mount}/{PROBE_DIR}");
    let file = format!("{dir}/{}-{token}", plan.cluster);
    let engine = |host: &str| engines.iter().find(|e| e.name == host);
    let Some(head_engine) = engine(&head.host) else {
        return Ok(());
    };
    let probe = |script: &str, args: &[&str]| {
        let mut cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            script.to_string(),
            "probe".to_string(),
        ];
        cmd.extend(args.iter().map(|a| a.to_string()));
        ContainerCreateBody {
            image: Some(head.image_id.clone()),
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
        }
    };

    let body = probe(
        r#"mkdir -p "$1" && printf %s "$3" > "$2""#,
        &[&dir, &file, &token],
    );
    let (code, output) = docker::run_to_end(&head_engine.docker, body).await?;
    if code != 0 {
        task.fail("cannot write");
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
    let reads = try_join_all(others.iter().map(|e| {
        let body = probe(
            r#"cat "$1" 2>&1 || exit 0; printf %s "$2" > "$1.$2" 2>/dev/null || echo "
WRITE-FAILED""#,
            &[&file, &e.name],
        );
        async move {
            let (_, output) = docker::run_to_end(&e.docker, body).await?;
            Ok::<_, Error>((e.name.clone(), output))
        }
    }))
    .await;
    // The probes go whatever the outcome.
    let body = probe(r#"rm -f "$1" "$1".*"#, &[&file]);
    let _ = docker::run_to_end(&head_engine.docker, body).await;
    for (host, output) in reads? {
        if let Some(read) = output.strip_suffix("\nWRITE-FAILED\n")
            && read == token
        {
            task.fail(&format!("host {host} cannot write"));
            return Err(Error::SharedStorageDiffers {
                host,
                detail: format!("it sees the storage at {mount}, but read-only"),
            });
        }
        if output != token {
            task.fail(&format!("host {host} differs"));
            let seen = output.trim();
            let detail = if seen.contains("No such file") {
                format!(
                    "a file written at {mount} on host {} is not there on host {host}",
                    head.host
                )
            } else {
                format!(
                    "a file written at {mount} on host {} reads differently on host {host}: {seen:?}",
                    head.host
                )
            };
            return Err(Error::SharedStorageDiffers { host, detail });
        }
    }
    task.done(&format!("{} hosts see the same storage", plan.hosts.len()));
    Ok(())
}
