//! Submitting a resolved job: the id checked free on both sides, the records staged,
//! the POST, the records published (a job Ray refuses leaves no directory behind).

use std::path::PathBuf;

use serde::Serialize;

use super::Error;
use super::resolve::Prepared;
use super::target::Target;
use crate::ray::jobs::{JobStatus, JobsApi, JobsError};
use crate::records::{self, JobRecord, Published, Records, Staged};
use crate::secrets::{redact_json, redact_text};

#[derive(Debug, Clone, Serialize)]
pub struct SubmitReport {
    pub submission_id: String,
    pub record_dir: Option<PathBuf>,
    pub dashboard: String,
    pub entrypoint: String,
}

/// A verl job whose pools the live workers cannot hold (`trainer.nnodes` x
/// `trainer.n_gpus_per_node`, plus a separate rollout's or reward model's) would wait
/// forever for its placement groups: refused before it is submitted.
fn check_demand(
    demand: &super::resolve::GpuDemand,
    nodes: &[crate::ray::RayNode],
) -> Result<(), Error> {
    let workers: Vec<&crate::ray::RayNode> = nodes
        .iter()
        .filter(|n| n.alive() && !n.is_head_node)
        .collect();
    // Ray's GPUs are whole numbers for a placement group's bundles.
    let gpus: Vec<u32> = workers.iter().map(|n| n.gpus().floor() as u32).collect();
    if demand.fits(&gpus) {
        return Ok(());
    }
    let have = workers
        .iter()
        .map(|n| format!("{} GPU(s)", n.gpus()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::Infeasible {
        demand: demand.describe(),
        cluster: if have.is_empty() {
            "no live worker".to_string()
        } else {
            format!("{} live worker(s) with {have}", workers.len())
        },
    })
}

/// Submits a prepared job: checks the id is free, stages the records, POSTs, publishes.
pub async fn submit(target: &Target, prepared: &Prepared) -> Result<SubmitReport, Error> {
    let api = JobsApi { ray: &target.ray };
    let id = &prepared.submission_id;
    // The record names the job this one continues by its id, never by a path.
    let resumes = prepared
        .resumes
        .as_deref()
        .map(|old| {
            old.parse::<crate::ids::SubmissionId>()
                .map_err(|_| Error::BadId(old.to_string()))
        })
        .transpose()?;
    let records = target.records();
    check_free(target, &api, records.as_ref(), prepared).await?;
    let staged = match &records {
        Some(records) => Some(stage_records(target, records, prepared).await?),
        None => None,
    };
    if let Err(e) = api.submit(&prepared.payload).await {
        if let (Some(records), Some(staged)) = (&records, staged) {
            records.discard(staged);
        }
        return Err(e.into());
    }
    // Ray has the job, argus's record of it is not published yet.
    crate::testpoint::reach("submit:posted");
    let mut record_dir = None;
    if let (Some(records), Some(staged)) = (&records, staged) {
        let published = records.publish(staged).map_err(|source| Error::Records {
            path: records.dir(id),
            source,
        })?;
        write_record(target, &api, &published, prepared, resumes).await?;
        record_dir = Some(published.path().to_path_buf());
    }
    Ok(SubmitReport {
        submission_id: id.clone(),
        record_dir,
        dashboard: target.ray.endpoint().to_string(),
        entrypoint: redact_text(&prepared.shown_entrypoint),
    })
}

/// The id is free on both sides (no record, no Ray job), and what the live nodes can
/// hold fits the GPU demand of the workload and the driver's own resources (else Ray
/// keeps the job PENDING forever).
async fn check_free(
    target: &Target,
    api: &JobsApi<'_>,
    records: Option<&Records>,
    prepared: &Prepared,
) -> Result<(), Error> {
    let id = &prepared.submission_id;
    if let Some(records) = records
        && records.exists(id)
    {
        return Err(Error::DuplicateRecord {
            id: id.clone(),
            path: records.dir(id),
        });
    }
    if api.exists(id).await? {
        return Err(JobsError::Duplicate(id.clone()).into());
    }
    if let Ok(nodes) = target.ray.nodes().await {
        if let Some(demand) = &prepared.demand {
            check_demand(demand, &nodes)?;
        }
        super::resolve::check_driver_fits(&prepared.payload, &nodes)?;
    }
    Ok(())
}

/// The job's record directory, staged (not yet published): its config, JobSpec, shown
/// payload and the nodes before it. A failed write discards the stage.
async fn stage_records(
    target: &Target,
    records: &Records,
    prepared: &Prepared,
) -> Result<Staged, Error> {
    let id = &prepared.submission_id;
    let staged = records.stage(id).map_err(|source| Error::Records {
        path: records.dir(id),
        source,
    })?;
    let nodes = target
        .ray
        .get_text("/api/v0/nodes?limit=10000&detail=true")
        .await
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    // New files in the directory just made, through its handle: a name planted there
    // meanwhile (a link) makes the write fail, and a directory swapped for a link
    // (`jobs/`, or one below the staged one) is never written through.
    let write = |rel: &str, bytes: &[u8]| {
        staged
            .write_new(rel, bytes)
            .map_err(|source| Error::Records {
                path: staged.display(rel),
                source,
            })
    };
    let result = write(
        &format!("{}/{}", records::CONFIG, target.config_record.0),
        target.config_record.1.as_bytes(),
    )
    .and_then(|()| write(records::JOBSPEC, prepared.jobspec_record.as_bytes()))
    .and_then(|()| {
        write(
            records::SUBMIT_PAYLOAD,
            &serde_json::to_vec_pretty(&prepared.shown_payload()).unwrap_or_default(),
        )
    })
    .and_then(|()| write(records::NODES_BEFORE, nodes.as_bytes()));
    if let Err(e) = result {
        records.discard(staged);
        return Err(e);
    }
    Ok(staged)
}

/// The published job's record, its submit log and (best effort) Ray's job list after it,
/// written into the directory just published (through its handle: wherever its name
/// leads by now, the files land in the job's own directory).
async fn write_record(
    target: &Target,
    api: &JobsApi<'_>,
    published: &Published,
    prepared: &Prepared,
    resumes: Option<crate::ids::SubmissionId>,
) -> Result<(), Error> {
    let id = &prepared.submission_id;
    let record = JobRecord {
        submission_id: id.clone(),
        workload: prepared.workload.as_str().into(),
        code_id: prepared.code_id.clone(),
        code_path: prepared.code_path.clone(),
        // A secret may be an override value on the command line: records carry it
        // redacted by value (the payload file is redacted the same way).
        entrypoint: redact_text(&prepared.shown_entrypoint),
        cluster: target.cluster.clone(),
        dashboard: target.ray.endpoint().to_string(),
        submitted_at: crate::records::now_rfc3339(),
        status: JobStatus::Pending,
        time_limit_s: prepared.time_limit_s,
        resumes,
        ..Default::default()
    };
    published
        .write_atomic(
            records::JOB_JSON,
            &serde_json::to_vec_pretty(&record).unwrap_or_default(),
        )
        .map_err(|source| Error::Records {
            path: published.path().join(records::JOB_JSON),
            source,
        })?;
    let out = format!(
        "submitted {id} at {}\ncluster: {} ({})\nentrypoint: {}\n",
        record.submitted_at,
        target.cluster,
        target.ray.endpoint(),
        redact_text(&prepared.shown_entrypoint)
    );
    let _ = published.write_atomic(records::SUBMIT_OUT, out.as_bytes());
    if let Ok(jobs) = api.list_raw().await {
        // Ray echoes every job's runtime_env (secrets included): redact before writing.
        let _ = published.write_atomic(
            records::JOBS_AFTER,
            &serde_json::to_vec_pretty(&redact_json(jobs)).unwrap_or_default(),
        );
    }
    Ok(())
}
