//! `argus slurm submit` on the login node, and what reads a submitted run back
//! (`follow`, `status`, `cancel`).
//!
//! Everything is checked before anything is started; then, as `argus run` does it, the
//! JobSpec's inputs are prepared and its code snapshotted on the shared storage; the image
//! is archived there once (the nodes load it by id); the run's files and the batch script
//! are written under `<shared>/runs/<run_id>/`, and `sbatch --parsable` submits it.

use crate::http::{Poll, poll_until};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::alloc;
use super::record::{BatchReport, SlurmRecord};
use super::script::{self, Allocation, AllocationFlags, ScriptInputs};
use super::{Error, RunFiles, slurm_command, slurm_command_with};
use crate::config::LoadedProfile;
use crate::config::jobspec::LoadedJobSpec;
use crate::exit::Exit;
use crate::ui::Reporter;

pub struct SubmitOptions {
    pub flags: AllocationFlags,
    pub dry_run: bool,
    /// argus's binary as the nodes see it (default: this process's own path).
    pub argus: Option<PathBuf>,
}

/// What `submit` did.
#[derive(Debug, Clone, Serialize)]
pub struct Submitted {
    pub run_id: String,
    pub slurm_job_id: Option<u64>,
    pub script_path: String,
    pub script: String,
    pub dry_run: bool,
    pub submission_id: String,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Runs a blocking Slurm call off the async runtime's workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Allocation(e.to_string()))?
}

/// One `srun` on one node: is argus's binary there, executable?
async fn check_binary(argus: &Path, allocation: &Allocation) -> Result<(), Error> {
    let path = argus.to_string_lossy().into_owned();
    let mut args: Vec<String> = vec!["--nodes=1".into(), "--ntasks=1".into()];
    for (flag, value) in [
        ("partition", &allocation.partition),
        ("account", &allocation.account),
        ("qos", &allocation.qos),
    ] {
        if let Some(v) = value {
            args.push(format!("--{flag}={v}"));
        }
    }
    args.extend(["test".into(), "-x".into(), path.clone()]);
    blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        match slurm_command("srun", &refs) {
            Ok(_) => Ok(()),
            Err(Error::Command { code, stderr, .. }) => Err(Error::BinaryNotVisible {
                path,
                detail: if stderr.is_empty() {
                    format!("`test -x` on a node exited {code}")
                } else {
                    stderr
                },
            }),
            Err(e) => Err(e),
        }
    })
    .await
}

/// A run staged on the shared storage, ready for its batch step.
pub struct Staged {
    pub files: RunFiles,
    pub record: SlurmRecord,
    pub submitted: Submitted,
    /// What the allocation's environment must carry: `ray.auth: token`'s variable.
    pub env: Vec<(String, String)>,
}

pub async fn submit(
    loaded: &LoadedProfile,
    job: LoadedJobSpec,
    options: &SubmitOptions,
    reporter: &dyn Reporter,
) -> Result<Submitted, Error> {
    let Staged {
        files,
        mut record,
        mut submitted,
        env,
    } = stage(loaded, job, options, None, reporter).await?;
    if options.dry_run {
        return Ok(submitted);
    }
    let script = files.script().display().to_string();
    let out =
        blocking(move || slurm_command_with("sbatch", &["--parsable", &script], &env)).await?;
    let job_id: u64 = out
        .trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| Error::Allocation(format!("sbatch answered {out:?}, not a job id")))?;
    record.slurm_job_id = Some(job_id);
    record.output = record.output.replace("%j", &job_id.to_string());
    super::write_json(&files.record(), &record)?;
    submitted.slurm_job_id = Some(job_id);
    Ok(submitted)
}

/// Everything `submit` does before `sbatch`: checks, the binary on the nodes, the inputs,
/// the image archive, the run's files. `inside`: the allocation the run will use when it
/// already exists (`argus run --slurm`). A dry run checks and returns the script only.
pub async fn stage(
    loaded: &LoadedProfile,
    mut job: LoadedJobSpec,
    options: &SubmitOptions,
    inside: Option<u64>,
    reporter: &dyn Reporter,
) -> Result<Staged, Error> {
    let layout = loaded.host_layout()?;
    let p = &loaded.profile;
    job.check_on_shared(p.submit.shared_root.as_deref().unwrap_or(&p.shared.mount))?;
    let allocation = Allocation::resolve(p.slurm.as_ref(), &options.flags);
    let run_id = crate::ids::RunId::generate().into_string();
    let files = RunFiles::new(&layout, &run_id);
    let argus = match &options.argus {
        Some(path) => path.clone(),
        None => std::env::current_exe().map_err(|source| Error::Spawn {
            program: "argus (its own path)".into(),
            source,
        })?,
    };
    let inputs = ScriptInputs {
        run_id: run_id.clone(),
        allocation: allocation.clone(),
        argus: argus.clone(),
        profile: files.profile(),
        output: files.output(),
    };
    let text = script::script(&inputs)?;
    let submission_id = match &job.spec.submission_id {
        Some(id) => id.to_string(),
        None => run_id.clone(),
    };
    let mut submitted = Submitted {
        run_id: run_id.clone(),
        slurm_job_id: None,
        script_path: files.script().display().to_string(),
        script: text.clone(),
        dry_run: options.dry_run,
        submission_id: submission_id.clone(),
    };
    if options.dry_run {
        return Ok(Staged {
            files,
            record: SlurmRecord::default(),
            submitted,
            env: Vec::new(),
        });
    }
    check_binary(&argus, &allocation).await?;
    // `ray.auth: token`: this machine's token of the profile (made when absent, 0600 under
    // ~/.config/argus/tokens/), sent to the allocation in sbatch's environment, never
    // written to the shared storage; `argus --slurm-run ... job` reads it back here.
    let env: Vec<(String, String)> = crate::cluster::auth::cluster_token(loaded, true)?
        .map(|token| (p.ray.token_env.clone(), token))
        .into_iter()
        .collect();

    // As `argus run` does it: inputs prepared, code snapshotted (the JobSpec then names it).
    crate::inputs::prepare_all(loaded, &mut job, reporter).await?;
    crate::cluster::image::ensure_built(p.docker.host.as_deref(), &p.image, reporter).await?;
    let docker = crate::cluster::docker::connect(p.docker.host.as_deref()).await?;
    let image_id = crate::cluster::node::image_id(&docker, &p.image)
        .await
        .ok_or_else(|| Error::Invalid(format!("image {} is not on this host's engine", p.image)))?;
    let archive = super::image_archive(&layout, &image_id);
    if crate::cluster::node::save_archive(&docker, &p.image, &archive).await? {
        reporter.note(&format!("image archived at {}", archive.display()));
    }

    let io = |path: PathBuf| move |source| Error::Io { path, source };
    let slurm_dir = files.dir.join("slurm");
    std::fs::create_dir_all(&slurm_dir).map_err(io(slurm_dir.clone()))?;
    crate::fsx::write_atomic(&files.profile(), loaded.source.text.as_bytes())
        .map_err(io(files.profile()))?;
    let mut spec = job.spec.clone();
    spec.submission_id = None;
    let jobspec = crate::inputs::recorded::to_text(&spec);
    crate::fsx::write_atomic(&files.jobspec(), jobspec.as_bytes()).map_err(io(files.jobspec()))?;
    let mut record = SlurmRecord {
        run_id: run_id.clone(),
        slurm_job_id: None,
        submitted_at: now_rfc3339(),
        allocation,
        script: files.script().display().to_string(),
        output: files.output().display().to_string(),
        submission_id,
        image_id,
        argus: Some(argus.display().to_string()),
        slurm_state: None,
    };
    super::write_json(&files.record(), &record)?;
    if inside.is_none() {
        crate::fsx::write_atomic(&files.script(), text.as_bytes()).map_err(io(files.script()))?;
    }

    if let Some(job_id) = inside {
        record.slurm_job_id = Some(job_id);
        record.output = String::new();
        record.script = String::new();
        super::write_json(&files.record(), &record)?;
        submitted.slurm_job_id = Some(job_id);
    }
    Ok(Staged {
        files,
        record,
        submitted,
        env,
    })
}

/// A Slurm job as `scontrol` shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SlurmState {
    /// None when Slurm no longer knows the job.
    pub state: Option<String>,
    pub reason: Option<String>,
    pub nodes: Option<String>,
}

pub async fn slurm_state(job_id: u64) -> Result<SlurmState, Error> {
    blocking(
        move || match slurm_command("scontrol", &["show", "job", "-o", &job_id.to_string()]) {
            Ok(text) => Ok(SlurmState {
                state: alloc::parse_job_state(&text),
                reason: alloc::field(&text, "Reason")
                    .filter(|r| *r != "None")
                    .map(str::to_string),
                nodes: alloc::field(&text, "NodeList")
                    .filter(|n| *n != "(null)")
                    .map(str::to_string),
            }),
            Err(Error::Command { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(SlurmState::default())
            }
            Err(e) => Err(e),
        },
    )
    .await
}

/// A Slurm state in which the job has ended for good.
pub fn is_final(state: &str) -> bool {
    !alloc::is_alive(state) && state != "COMPLETING"
}

/// Reads a run's records.
pub fn read_run(loaded: &LoadedProfile, run_id: &str) -> Result<(RunFiles, SlurmRecord), Error> {
    let layout = loaded.host_layout()?;
    run_id.parse::<crate::ids::RunId>()?;
    let files = RunFiles::new(&layout, run_id);
    if !files.record().exists() {
        return Err(Error::UnknownRun {
            run_id: run_id.into(),
            dir: layout.runs(),
        });
    }
    let record = super::read_json(&files.record())?;
    Ok((files, record))
}

/// The exit code of a run that ended: the job's, else from the Slurm state.
pub fn exit_of(batch: Option<&BatchReport>, slurm_state: Option<&str>) -> Exit {
    if let Some(code) = batch.and_then(|b| b.exit_code) {
        return match code {
            0 => Exit::Success,
            3 => Exit::Stopped,
            _ => Exit::Failed,
        };
    }
    match slurm_state {
        Some("CANCELLED" | "TIMEOUT" | "PREEMPTED" | "DEADLINE") => Exit::Stopped,
        Some("COMPLETED") => Exit::Success,
        _ => Exit::Failed,
    }
}

/// Follows a submitted run to its end: Slurm's state (PENDING with its reason, RUNNING),
/// the batch step's stages, the batch output (which carries the job's log); records how
/// the Slurm job ended; returns the exit code.
pub async fn follow(
    files: &RunFiles,
    mut record: SlurmRecord,
    mut on_line: impl FnMut(&str),
    mut on_log: impl FnMut(&str),
) -> Result<Exit, Error> {
    let Some(job_id) = record.slurm_job_id else {
        return Err(Error::Invalid(
            "the run was never submitted to Slurm".into(),
        ));
    };
    let output = PathBuf::from(&record.output);
    let mut offset = 0u64;
    let mut last_state = SlurmState::default();
    let mut last_stage = String::new();
    // Until Slurm forgets the job or it reaches a final state: each change said once.
    let followed = poll_until(None, Duration::from_millis(500), async || {
        let now = match slurm_state(job_id).await {
            Ok(now) => now,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if now != last_state {
            if let Some(state) = &now.state {
                let reason = now
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let nodes = now
                    .nodes
                    .as_deref()
                    .filter(|n| !n.trim().is_empty() && *n != "(null)")
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default();
                on_line(&format!("slurm job {job_id}: {state}{reason}{nodes}"));
            }
            last_state = now.clone();
        }
        if let Ok(batch) = super::read_json::<BatchReport>(&files.batch())
            && batch.stage != last_stage
        {
            on_line(&format!("batch step: {}", batch.stage));
            last_stage = batch.stage;
        }
        offset = tail(&output, offset, &mut on_log);
        match &now.state {
            None => Poll::Ready(Ok(None)),
            Some(state) if is_final(state) => Poll::Ready(Ok(Some(state.clone()))),
            _ => Poll::Pending(()),
        }
    })
    .await;
    let final_state = match followed {
        Ok(result) => result?,
        Err(()) => None,
    };
    tail(&output, offset, &mut on_log);
    record.slurm_state = final_state.clone().or(record.slurm_state);
    super::write_json(&files.record(), &record)?;
    let batch = super::read_json::<BatchReport>(&files.batch()).ok();
    Ok(exit_of(batch.as_ref(), record.slurm_state.as_deref()))
}

/// What was appended to `path` since `offset`, passed on; the new offset.
fn tail(path: &Path, offset: u64, on_log: &mut impl FnMut(&str)) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return offset;
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    if !bytes.is_empty() {
        on_log(&String::from_utf8_lossy(&bytes));
    }
    offset + bytes.len() as u64
}

/// `argus slurm cancel`: `scancel` of the run's Slurm job.
pub async fn cancel(record: &SlurmRecord) -> Result<(), Error> {
    let Some(job_id) = record.slurm_job_id else {
        return Err(Error::Invalid(
            "the run was never submitted to Slurm".into(),
        ));
    };
    blocking(move || slurm_command("scancel", &[&job_id.to_string()]).map(|_| ())).await
}

/// `argus run --slurm`: the run inside the allocation this process already holds
/// (`salloc`): staged as `submit` stages it, then its batch step on the allocation's first
/// node through `srun`; the exit code is the job's.
pub async fn run_inside(
    loaded: &LoadedProfile,
    job: LoadedJobSpec,
    reporter: &dyn Reporter,
) -> Result<(Submitted, Exit), Error> {
    let job_id = alloc::job_id_from_env()?;
    let options = SubmitOptions {
        flags: AllocationFlags::default(),
        dry_run: false,
        argus: None,
    };
    let staged = stage(loaded, job, &options, Some(job_id), reporter).await?;
    let argus = std::env::current_exe().map_err(|source| Error::Spawn {
        program: "argus (its own path)".into(),
        source,
    })?;
    let status = super::srun()
        .envs(staged.env.iter().map(|(k, v)| (k, v)))
        .args([
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            "--relative=0",
            "--job-name=argus-batch",
        ])
        .arg(argus)
        .arg("--no-progress")
        .arg("-p")
        .arg(staged.files.profile())
        .args(["slurm", "run", &staged.submitted.run_id])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| Error::Spawn {
            program: "srun".into(),
            source,
        })?;
    let batch = super::read_json::<BatchReport>(&staged.files.batch()).ok();
    let exit = match (status.code(), batch.as_ref().and_then(|b| b.exit_code)) {
        (_, Some(_)) => exit_of(batch.as_ref(), None),
        (Some(0), None) => Exit::Success,
        _ => Exit::Failed,
    };
    Ok((staged.submitted, exit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_job_then_slurm() {
        let batch = |code| BatchReport {
            exit_code: Some(code),
            ..Default::default()
        };
        assert_eq!(exit_of(Some(&batch(0)), Some("COMPLETED")), Exit::Success);
        assert_eq!(exit_of(Some(&batch(1)), Some("FAILED")), Exit::Failed);
        assert_eq!(exit_of(None, Some("CANCELLED")), Exit::Stopped);
        assert_eq!(exit_of(None, Some("TIMEOUT")), Exit::Stopped);
        assert_eq!(exit_of(None, Some("NODE_FAIL")), Exit::Failed);
        assert!(is_final("CANCELLED"));
        assert!(!is_final("COMPLETING"));
        assert!(!is_final("PENDING"));
    }
}
