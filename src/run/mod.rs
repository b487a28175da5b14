//! `argus run`: from nothing to a finished job, recorded so it can be replayed, and
//! resumed when it stopped on the way.
//!
//! A run is what it runs: its key (`resume::RunKey`) is derived from the cluster and the
//! JobSpec as loaded. `argus run` takes the key's lock (`<shared>/.argus/locks/run-<key>`,
//! so two at once never both submit), then finds the newest run of that key under
//! `runs/`: one that has not ended is resumed (same run id, same submission id), one that
//! has ended is not run again (unless `--new`).
//!
//! Stages, each observing before it acts, so a run stopped anywhere is finished by
//! running it again: up (`up.rs`) -> prepare, snapshot (`crate::inputs`, shared with
//! `argus slurm submit`; a replay's drift check in `replay.rs`) -> submit or attach to the
//! job this run already submitted -> wait -> collect (`job.rs`) -> down (when asked). The record is `runs/<run_id>/` (`record.rs`): `report.json`, rewritten as
//! each stage starts and ends, and `run.lock.yaml` (`lock.rs`), written just before the
//! job is submitted: it pins exactly what the job gets.

mod job;
pub mod lock;
mod observe;
mod record;
mod replay;
pub mod resume;
mod supervise;
mod up;

use std::path::PathBuf;

use crate::cluster::image;
use crate::config::jobspec::LoadedJobSpec;
use crate::config::yaml::Source;
use crate::config::{ContainerLayout, Layout, LoadedProfile};
use crate::exit::{Classify, Exit};
use crate::ids::SubmissionId;
use crate::inputs::{self, CodePin, DatasetPin, ModelPin, recorded};
use crate::records::Records;
use crate::submit::watch::WaitOptions;
use crate::submit::{self, Target};
use crate::ui::Reporter;
use job::Seen;
use lock::{ImagePin, RunLock};
use record::Recorder;
pub use record::{RunReport, StageTiming};
use resume::{RunKey, Start};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the run's inputs drifted from {lock}:\n  {}", drift.join("\n  "))]
    Drift { lock: String, drift: Vec<String> },
    #[error("invalid run lock: {0}")]
    BadLock(String),
    #[error("--new makes a new job, but the JobSpec fixes submission_id {id}, which exists")]
    SubmissionTaken { id: String },
    #[error(
        "job {id} of this run is gone: argus has no record of its end and the cluster no longer knows it"
    )]
    JobLost { id: String },
    #[error("cannot write the run record at {}", crate::text::shown(path))]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    // The stages' own errors, as they stopped the run.
    #[error(transparent)]
    Inputs(#[from] crate::inputs::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    NoHostPath(#[from] crate::config::profile::NoHostPath),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::Error),
    #[error(transparent)]
    Image(#[from] crate::cluster::image::BuildError),
    #[error(transparent)]
    Submit(#[from] crate::submit::Error),
    #[error(transparent)]
    Lock(#[from] crate::lock::Error),
    #[error(transparent)]
    Id(#[from] crate::ids::IdError),
    #[error(transparent)]
    Live(#[from] crate::submit::live::Error),
    #[error(transparent)]
    Training(#[from] crate::training::Error),
    #[error(transparent)]
    Restart(#[from] crate::restart::Error),
    #[error("the run's report cannot be used: {0}")]
    BadReport(String),
    #[error("job {id} still says {status} {seconds}s after argus told it to stop")]
    CannotStop {
        id: String,
        status: String,
        seconds: u64,
    },
    #[error("the `argus run` supervising run {run_id} stopped before the run ended")]
    SupervisorGone { run_id: String },
    #[error("run {run_id} interrupted (its last job: {job})")]
    Interrupted {
        run_id: String,
        job: String,
        jobspec: String,
    },
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Drift { .. } | Error::JobLost { .. } | Error::SupervisorGone { .. } => {
                Exit::Failed
            }
            Error::Record { source, .. } => crate::fsx::io_exit(source),
            Error::BadLock(_) | Error::SubmissionTaken { .. } | Error::BadReport(_) => Exit::Usage,
            Error::CannotStop { .. } => Exit::Unreachable,
            Error::Inputs(e) => e.exit(),
            Error::Config(_) | Error::NoHostPath(_) | Error::Id(_) => Exit::Usage,
            Error::Cluster(e) => e.exit(),
            Error::Image(e) => e.exit(),
            Error::Submit(e) => e.exit(),
            Error::Lock(e) => e.exit(),
            Error::Live(e) => e.exit(),
            Error::Training(e) => e.exit(),
            Error::Restart(e) => e.exit(),
            Error::Interrupted { .. } => Exit::Stopped,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            Error::Drift { .. } => Some("restore the pinned inputs, or pass --allow-drift to run anyway (the drift is recorded)".into()),
            Error::BadLock(_) => None,
            Error::Record { source, .. } => crate::fsx::io_hint(source),
            Error::Inputs(e) => e.hint(),
            Error::SubmissionTaken { .. } => Some("remove submission_id from the JobSpec (each run then gets its own), or change it".into()),
            Error::JobLost { .. } => Some("the cluster was taken down or recreated while the job ran: `argus run --new` runs it again".into()),
            Error::Config(_) | Error::Id(_) => None,
            Error::NoHostPath(_) => Some("argus run writes the shared storage from this host: use shared.host_path".into()),
            Error::Cluster(e) => e.hint(),
            Error::Image(e) => e.hint(),
            Error::Submit(e) => e.hint(),
            Error::Lock(e) => e.hint(),
            Error::Live(e) => e.hint(),
            Error::Training(e) => e.hint(),
            Error::Restart(e) => e.hint(),
            Error::SupervisorGone { .. } => Some(
                "the `argus run` that supervised it stopped: run the same command again to take over"
                    .into(),
            ),
            Error::BadReport(_) => Some(
                "the report under runs/ was changed by something other than argus: `argus run --new` starts a new run"
                    .into(),
            ),
            Error::CannotStop { id, .. } => Some(format!(
                "a second attempt is not started while the first may still train: stop it (`argus job stop {id}`, or `argus down` and up again) and run the same command again"
            )),
            Error::Interrupted { jobspec, .. } => Some(format!(
                "`argus run {jobspec}` resumes the run from its newest complete checkpoint (the same run, its next attempt)"
            )),
        }
    }
}

/// The JobSpec and profile a replay uses: the lock's own, secrets back from the environment.
pub fn from_lock(
    lock: &RunLock,
    profile: Option<&LoadedProfile>,
) -> Result<(LoadedJobSpec, LoadedProfile), Error> {
    let spec = recorded::from_value(lock.jobspec.clone(), "<run lock: jobspec>")?;
    let profile = match profile {
        Some(p) => p.clone(),
        None => LoadedProfile::from_source(Source::new(
            "<run lock: profile>",
            crate::config::yaml::to_string(&lock.profile),
        ))?,
    };
    Ok((spec, profile))
}

pub struct RunOptions {
    pub down_after: bool,
    /// Replay: the lock to check against, and whether drift is tolerated.
    pub lock: Option<(PathBuf, RunLock)>,
    pub allow_drift: bool,
    /// Stream the driver's log while waiting.
    pub follow: bool,
    /// A new run even when a run of the same key exists.
    pub new: bool,
    /// The job this run's job continues from its checkpoints (`run --resume`).
    pub resumes: Option<String>,
    /// Supervise the run (restart it on failure): this invocation's policy. None: the
    /// policy the run was started with, if any.
    pub restart: Option<crate::config::jobspec::Restart>,
}

/// How an `argus run` ended.
#[derive(Debug)]
pub enum Outcome {
    /// The run went to its end now (started now, or resumed: `report.resumed`).
    Ran(RunReport),
    /// The run had already ended before; nothing was done.
    AlreadyFinished(RunReport),
}

/// `run-<yyyymmdd-hhmmss>-<hex>`.
pub fn new_run_id() -> String {
    crate::ids::RunId::generate().into_string()
}

/// What every stage reads.
pub(crate) struct Ctx<'a> {
    loaded: &'a LoadedProfile,
    /// The shared storage on this host, and inside the containers.
    host: Layout,
    mount: ContainerLayout,
    options: &'a RunOptions,
    reporter: &'a dyn Reporter,
}

impl<'a> Ctx<'a> {
    /// The inputs stage's view of the run.
    fn inputs(&self) -> inputs::Ctx<'a> {
        inputs::Ctx {
            loaded: self.loaded,
            host: self.host.clone(),
            mount: self.mount.clone(),
            reporter: self.reporter,
        }
    }
}

/// Takes the run's lock, saying who holds it while waiting; with no reporter, only when
/// it is free now (`Timeout` with its holder otherwise).
fn hold(
    host: &Layout,
    key: &RunKey,
    job: &LoadedJobSpec,
    reporter: Option<&dyn Reporter>,
) -> Result<crate::lock::Lock, Error> {
    let timeout = reporter.is_none().then_some(std::time::Duration::ZERO);
    let rel = std::path::PathBuf::from(format!(".argus/locks/run-{key}"));
    let what = format!(
        "the run of {} (key {})",
        job.source.origin.display(),
        key.short()
    );
    let acquire = || {
        crate::lock::acquire_under(
            host.root(),
            &rel,
            &crate::lock::Acquire {
                what: &what,
                timeout,
            },
            |holder| {
                if let Some(r) = reporter {
                    r.note(&crate::lock::waiting_message(&what, holder));
                }
            },
        )
    };
    // The wait blocks a thread: tell a multi-threaded runtime so it moves its other work.
    let held = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(acquire),
        _ => acquire(),
    };
    Ok(held?)
}

pub(crate) use crate::records::now_rfc3339;

/// Runs the pipeline, or resumes the run of the same key, or says it has ended.
pub async fn run(
    loaded: &LoadedProfile,
    mut job: LoadedJobSpec,
    options: &RunOptions,
    reporter: &dyn Reporter,
    mut on_log: impl FnMut(&str) + Send,
) -> Result<Outcome, Error> {
    // Nothing is written before everything that can be checked was.
    let host = loaded.host_layout()?;
    inputs::load(&host, &mut job, options.new, reporter).await?;
    let key = RunKey::of(
        &loaded.profile.name,
        &job.spec,
        options.lock.as_ref().map(|(_, l)| l),
    );
    let runs = host.runs();
    // A run another `argus run` supervises is followed, not run a second time.
    let _held = match hold(&host, &key, &job, None) {
        Ok(lock) => lock,
        Err(Error::Lock(crate::lock::Error::Timeout { holder, .. })) => {
            let newest = resume::newest(&runs, &key).map_err(Error::BadReport)?;
            match newest.filter(|r| r.restart.is_some() && !r.is_done()) {
                Some(report) => {
                    reporter.note(&format!(
                        "run {} is supervised by {holder}: following it (Ctrl-C stops following; the run goes on)",
                        report.run_id
                    ));
                    let target = Target::from_profile(
                        loaded,
                        crate::cluster::access::ray_client(loaded).await?,
                    );
                    let supervised = || hold(&host, &key, &job, None).is_err();
                    let run = observe::Followed {
                        runs: &runs,
                        run_id: &report.run_id,
                        supervised: &supervised,
                    };
                    return observe::follow(&target, &run, options.follow, reporter, &mut on_log)
                        .await;
                }
                None => hold(&host, &key, &job, Some(reporter))?,
            }
        }
        Err(e) => return Err(e),
    };

    let newest = match options.new {
        true => None,
        false => resume::newest(&runs, &key).map_err(Error::BadReport)?,
    };
    let rec = match resume::decide(newest, options.new) {
        Start::Finished(report) => return Ok(Outcome::AlreadyFinished(report)),
        Start::Resume(mut report) => {
            reporter.note(&format!(
                "resuming run {} (it stopped in its {} stage)",
                report.run_id, report.stage
            ));
            report.resumed += 1;
            report.stages.clear();
            if options.restart.is_some() {
                report.restart = options.restart.clone();
            }
            Recorder::resume(&runs, report)
        }
        Start::New => Recorder::create(
            &runs,
            RunReport {
                restart: options.restart.clone(),
                run_id: new_run_id(),
                key: Some(key.to_string()),
                started_at: now_rfc3339(),
                stage: "up".into(),
                replay_of: options.lock.as_ref().map(|(p, _)| p.display().to_string()),
                ..Default::default()
            },
        )?,
    };
    let ctx = Ctx {
        loaded,
        mount: loaded.profile.container_layout(),
        host,
        options,
        reporter,
    };
    stages(&ctx, rec, job, &mut on_log).await
}

/// The stages, in order; each observes what is there before it acts.
async fn stages(
    ctx: &Ctx<'_>,
    mut rec: Recorder,
    mut job: LoadedJobSpec,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, Error> {
    let options = ctx.options;
    // The JobSpec as loaded (the lock records it); the job's id: the JobSpec's, or the run's.
    let spec = job.spec.clone();
    let id = match &job.spec.submission_id {
        Some(id) => id.clone(),
        None => rec.report.run_id.parse::<SubmissionId>()?,
    };
    job.spec.submission_id = Some(id.clone());
    let id = id.into_string();
    let records = Records::new(ctx.host.jobs());
    let pinned = RunLock::read(&rec.lock_path())
        .ok()
        .filter(|l| l.submission_id == id);
    let cluster = stage_up(ctx, &mut rec, pinned.as_ref(), &records, &id).await?;
    // After `up`: with `ray.auth: token` it is `up` that makes the token on a first run.
    let target = Target::of_profile(
        ctx.loaded,
        crate::cluster::access::ray_client(ctx.loaded)
            .await?
            .with_connect_retries(2),
    )
    .await;
    let seen = job::observe(&target, &records, &id).await?;
    if options.new && seen.exists() {
        return Err(Error::SubmissionTaken { id });
    }
    // A job already submitted keeps the inputs pinned when it was.
    let pinned = pinned.filter(|_| seen.exists());
    let before = match (&options.lock, &pinned) {
        (Some((_, lock)), None) => Some(replay::observe_before(ctx, &spec, lock)?),
        _ => None,
    };
    let (datasets, model) = stage_prepare(ctx, &mut rec, pinned.as_ref(), &spec).await?;
    rec.begin("snapshot")?;
    let code = match &pinned {
        Some(lock) => lock.code.clone(),
        None => inputs::snapshot(&ctx.inputs(), &mut job.spec)?,
    };
    rec.end(format!("{} {}", code.name, code.code_id))?;

    // Replay: everything is known now; refuse on drift before anything is submitted.
    if let (Some((path, lock)), Some(mut observed)) = (&options.lock, before) {
        observed.image_id = Some(cluster.image_id.clone());
        let drift = replay::drift(ctx, lock, observed, &code, model.as_ref());
        rec.report.drift = drift.clone();
        rec.save()?;
        if !drift.is_empty() && !options.allow_drift {
            return Err(Error::Drift {
                lock: path.display().to_string(),
                drift,
            });
        }
    }

    let lock = match pinned {
        Some(lock) => lock,
        None => {
            let mut recorded = spec.clone();
            recorded.submission_id = None;
            new_lock(ctx, &rec, &cluster, &recorded, code, datasets, model, &id).await?
        }
    };
    let submitted = Submitted {
        target: &target,
        records: &records,
        id: &id,
    };
    let policy = options
        .restart
        .clone()
        .or_else(|| rec.report.restart.clone());
    if policy.is_some() {
        supervise::label(&mut job, &rec.report.run_id, 1);
    }
    stage_submit(ctx, &mut rec, &submitted, &seen, &job, &lock).await?;
    match policy {
        Some(policy) => {
            supervise::stage(ctx, &mut rec, &submitted, &job, &policy, on_log).await?;
        }
        None => stage_wait(ctx, &mut rec, &submitted, &spec, on_log).await?,
    }
    if options.down_after {
        rec.begin("down")?;
        let note = up::down(ctx).await?;
        rec.end(note)?;
    }
    Ok(Outcome::Ran(rec.finish()?))
}

/// The run's one job on its cluster.
struct Submitted<'a> {
    target: &'a Target,
    records: &'a Records,
    id: &'a str,
}

/// up: not needed when the job's end is recorded and its inputs pinned.
async fn stage_up(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    pinned: Option<&RunLock>,
    records: &Records,
    id: &str,
) -> Result<up::Cluster, Error> {
    rec.begin("up")?;
    let cluster = match pinned {
        Some(lock) if records.read(id).is_some_and(|r| r.is_final()) => up::Cluster {
            image_id: lock.image.id.clone(),
            ray_version: lock.ray_version.clone(),
            note: "skipped: the job has ended".into(),
            parts: Vec::new(),
        },
        _ => up::up(ctx).await?,
    };
    rec.end_with_parts(cluster.note.clone(), cluster.parts.clone())?;
    Ok(cluster)
}

/// prepare: the datasets and the model, unless the job's lock pinned them.
async fn stage_prepare(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    pinned: Option<&RunLock>,
    spec: &crate::config::jobspec::JobSpec,
) -> Result<(Vec<DatasetPin>, Option<ModelPin>), Error> {
    rec.begin("prepare")?;
    if let Some(lock) = pinned {
        rec.end("pinned when the job was submitted")?;
        return Ok((lock.datasets.clone(), lock.model.clone()));
    }
    let replayed = ctx
        .options
        .lock
        .as_ref()
        .and_then(|(_, l)| l.model.as_ref());
    let (datasets, model) = inputs::prepare(&ctx.inputs(), spec, replayed).await?;
    let models = if model.is_some() {
        "1 model"
    } else {
        "no model"
    };
    rec.end(format!("{} datasets, {models}", datasets.len()))?;
    Ok((datasets, model))
}

/// The lock of a new run: everything it used, pinned (the JobSpec without its id).
#[allow(clippy::too_many_arguments)]
async fn new_lock(
    ctx: &Ctx<'_>,
    rec: &Recorder,
    cluster: &up::Cluster,
    spec: &crate::config::jobspec::JobSpec,
    code: CodePin,
    datasets: Vec<DatasetPin>,
    model: Option<ModelPin>,
    id: &str,
) -> Result<RunLock, Error> {
    let profile = &ctx.loaded.profile;
    Ok(RunLock {
        format: lock::FORMAT,
        run_id: rec.report.run_id.clone(),
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        argus_version: env!("CARGO_PKG_VERSION").into(),
        image: ImagePin {
            reference: profile.image.clone(),
            id: cluster.image_id.clone(),
            digest: image::digest(profile.docker.host.as_deref(), &profile.image).await?,
        },
        ray_version: cluster.ray_version.clone(),
        profile: recorded::redacted_value(profile),
        jobspec: recorded::to_value(spec),
        code,
        datasets,
        model,
        submission_id: id.to_string(),
    })
}

/// submit: the run's one job, unless it exists (then this run attaches to it).
async fn stage_submit(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    job_of: &Submitted<'_>,
    seen: &Seen,
    job: &LoadedJobSpec,
    lock: &RunLock,
) -> Result<(), Error> {
    let id = job_of.id;
    rec.begin("submit")?;
    rec.report.submission_id = Some(id.to_string());
    let lock_path = rec.lock_path();
    let note = match seen {
        Seen::Nowhere => {
            let mut prepared = submit::prepare(job_of.target, job, true)?;
            prepared.resumes = ctx.options.resumes.clone();
            lock.write(&lock_path)?;
            job::submit(job_of.target, &prepared).await?
        }
        Seen::Recorded(record) => {
            ctx.reporter.note(&format!(
                "job {id} was already submitted ({} when last seen): attaching to it",
                record.status
            ));
            format!("{id} (already submitted: attached)")
        }
        Seen::OnlyOnCluster(info) => {
            ctx.reporter.note(&format!(
                "job {id} is on the cluster but argus never recorded it: recording it and attaching"
            ));
            job::adopt(job_of.target, job_of.records, info, id)?;
            format!("{id} (on the cluster without a record: adopted, attached)")
        }
    };
    if !lock_path.exists() {
        lock.write(&lock_path)?;
    }
    rec.report.lock = Some(lock_path.display().to_string());
    rec.end(note)?;
    Ok(())
}

/// wait: follow the job to its end (time_limit enforced); collect: where its outputs are.
async fn stage_wait(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    job_of: &Submitted<'_>,
    spec: &crate::config::jobspec::JobSpec,
    on_log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), Error> {
    let id = job_of.id;
    rec.begin("wait")?;
    let wait = WaitOptions {
        timeout: None,
        time_limit: spec.time_limit.map(|t| t.0),
        follow: ctx.options.follow,
    };
    let info = job::wait(job_of.target, job_of.records, id, &wait, on_log).await?;
    if info.status == crate::ray::jobs::JobStatus::Failed {
        rec.report.diagnosis = diagnose_failed(ctx, job_of).await;
    }
    rec.end(info.status.to_string())?;
    collect(ctx, rec, id, info.status, info.message)
}

/// The failure bundle of the run's failed job, and its triage shown (bounded; one that
/// cannot be made is a warning, never the run's outcome).
async fn diagnose_failed(ctx: &Ctx<'_>, job_of: &Submitted<'_>) -> Option<String> {
    let job = crate::diagnose::Job {
        loaded: ctx.loaded,
        target: job_of.target,
        id: job_of.id,
        attempt: 1,
        nodes: None,
    };
    let line = crate::diagnose::after_failure(&job, &Default::default()).await?;
    ctx.reporter.note(&format!("diagnosis: {line}"));
    Some(line)
}

/// collect: where the outputs of the run's (last) job are.
fn collect(
    ctx: &Ctx<'_>,
    rec: &mut Recorder,
    id: &str,
    status: crate::ray::jobs::JobStatus,
    message: Option<String>,
) -> Result<(), Error> {
    rec.begin("collect")?;
    let records = Records::new(ctx.host.jobs());
    rec.report.job_status = Some(status);
    rec.report.job_message = message;
    rec.report.driver_log = Some(
        records
            .dir(id)
            .join(crate::records::DRIVER_LOG)
            .display()
            .to_string(),
    );
    // The attempts of a supervised run share the first one's checkpoint directory.
    let first = rec
        .report
        .attempts
        .first()
        .map(|a| a.submission_id.as_str());
    let checkpoints = records
        .dir(first.unwrap_or(id))
        .join(crate::records::CHECKPOINTS);
    rec.report.checkpoints = Some(checkpoints.display().to_string());
    rec.end(rec.lock_path().display().to_string())?;
    Ok(())
}
