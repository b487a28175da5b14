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
use super::{Error, RunFile, RunFiles, slurm_command, slurm_command_input};
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

use crate::records::now_rfc3339;

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
    // The script goes to sbatch on its stdin, as it was written (the copy in the run's
    // directory is the record): a path would be read through whatever is on the way.
    let script = submitted.script.clone();
    let out = blocking(move || {
        slurm_command_input("sbatch", &["--parsable"], &env, Some(script.as_bytes()))
    })
    .await?;
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
    job.check_on_shared(&p.container_layout().mount())?;
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
        profile: files.profile_path(),
        output: files.output_pattern(),
        supervised: job.spec.restart.is_some(),
    };
    let text = script::script(&inputs)?;
    let submission_id = match &job.spec.submission_id {
        Some(id) => id.to_string(),
        None => run_id.clone(),
    };
    let mut submitted = Submitted {
        run_id: run_id.clone(),
        slurm_job_id: None,
        script_path: files.script_path().display().to_string(),
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
    let image_id = image_for_nodes(p, &layout, reporter).await?;

    let files = RunFiles::create(&layout, &run_id).map_err(|source| Error::Io {
        path: files.path(),
        source,
    })?;
    crate::testpoint::reach("slurm:run-created");
    let profile = files.profile();
    profile
        .write_atomic(loaded.source.text.as_bytes())
        .map_err(profile.io())?;
    let mut spec = job.spec.clone();
    spec.submission_id = None;
    let text_of_spec = crate::inputs::recorded::to_text(&spec);
    let jobspec = files.jobspec();
    jobspec
        .write_atomic(text_of_spec.as_bytes())
        .map_err(jobspec.io())?;
    let mut record = SlurmRecord {
        run_id: run_id.clone(),
        slurm_job_id: None,
        submitted_at: now_rfc3339(),
        allocation,
        script: files.script_path().display().to_string(),
        output: files.output_pattern().display().to_string(),
        submission_id,
        image_id,
        argus: Some(argus.display().to_string()),
        slurm_state: None,
    };
    super::write_json(&files.record(), &record)?;
    if inside.is_none() {
        let script = files.script();
        script.write_atomic(text.as_bytes()).map_err(script.io())?;
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

/// The profile's image for the nodes: built when it is argus's own and absent, checked for
/// what argus runs in it (a node would find out only once allocated), archived on the
/// shared storage for the nodes to load. Its id.
async fn image_for_nodes(
    p: &crate::config::profile::Profile,
    layout: &crate::config::Layout,
    reporter: &dyn Reporter,
) -> Result<String, Error> {
    crate::cluster::image::ensure_built(p.docker.host.as_deref(), &p.image, reporter).await?;
    let docker = crate::cluster::docker::connect(p.docker.host.as_deref()).await?;
    let image_id = crate::cluster::node::image_id(&docker, &p.image)
        .await
        .ok_or_else(|| Error::Invalid(format!("image {} is not on this host's engine", p.image)))?;
    crate::cluster::doctor::image_tools::require(&docker, &p.name, &p.image, &image_id, reporter)
        .await?;
    let save =
        async |path: &Path| crate::cluster::node::save_archive(&docker, &p.image, path).await;
    if let Some(archive) = archive_image(layout, &image_id, save).await? {
        reporter.note(&format!("image archived at {}", archive.display()));
    }
    Ok(image_id)
}

/// Archives image `image_id` as `<shared>/common/images/<hex>.tar` unless an archive of it
/// is there; its path when it was written. `save` writes the archive at the path it is
/// given (`cluster::node::save_archive`, which works by path): it is given a path in a
/// fresh 0700 directory made in the held `common/images` handle, which only this process
/// writes (its `/proc/self/fd` path); the archive is then renamed into `common/images`
/// relative to the two handles. A directory on the way swapped for a link meanwhile does
/// not move it.
async fn archive_image(
    layout: &crate::config::Layout,
    image_id: &str,
    save: impl AsyncFnOnce(&Path) -> Result<bool, crate::cluster::Error>,
) -> Result<Option<PathBuf>, Error> {
    let name = super::image_archive_name(image_id)?;
    let images = layout
        .create_dirs(super::IMAGES)
        .map_err(|source| Error::Io {
            path: layout.root().join(super::IMAGES),
            source,
        })?;
    let shown = images.display(&name);
    let io = |source| Error::Io {
        path: shown.clone(),
        source,
    };
    if images.kind(&name).map_err(io)?.is_some() {
        return Ok(None);
    }
    let staging_name = crate::fsx::temp_name(&name);
    let staging = images.create_dir(&staging_name, 0o700).map_err(io)?;
    let inside = staging.fd_path().join(&name);
    let result = match save(&inside).await {
        Ok(_) => staging.rename(&name, &images, &name).map_err(io),
        // Its messages would name the `/proc/self/fd` path: the archive's is shown.
        Err(crate::cluster::Error::SharedStorage { source, .. }) => Err(io(source)),
        Err(e) => Err(e.into()),
    };
    let _ = images.remove_all(&staging_name);
    result.map(|()| Some(shown.clone()))
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
    let unknown = || Error::UnknownRun {
        run_id: run_id.into(),
        dir: layout.runs(),
    };
    let files = match RunFiles::open(&layout, run_id) {
        Ok(files) => files,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown()),
        Err(source) => {
            return Err(Error::Io {
                path: RunFiles::new(&layout, run_id).path(),
                source,
            });
        }
    };
    match super::read_json(&files.record()) {
        Ok(record) => Ok((files, record)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(unknown())
        }
        Err(e) => Err(e),
    }
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
    // The output Slurm writes for the job (`slurm-<id>.out` in the run's directory), read
    // through the run's handle: never the path the record names (others can write it).
    // A run inside an allocation has none (its batch step's output is this terminal's).
    let output = (!record.output.is_empty()).then(|| files.output(job_id));
    let mut offset = 0u64;
    let mut last_state = SlurmState::default();
    let mut last_stage = String::new();
    let mut requeue_seen: Option<std::time::Instant> = None;
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
        let batch = super::read_json::<BatchReport>(&files.batch()).ok();
        if let Some(batch) = &batch
            && batch.stage != last_stage
        {
            on_line(&format!("batch step: {}", batch.stage));
            last_stage = batch.stage.clone();
        }
        offset = tail(output.as_ref(), offset, &mut on_log);
        match &now.state {
            None => Poll::Ready(Ok(None)),
            // A supervised run's batch on its way to its next allocation is not over.
            Some(state)
                if is_final(state)
                    && may_be_requeued(batch.as_ref(), state)
                    && requeue_seen
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        < REQUEUE_WAIT =>
            {
                Poll::Pending(())
            }
            Some(state) if is_final(state) => Poll::Ready(Ok(Some(state.clone()))),
            _ => {
                requeue_seen = None;
                Poll::Pending(())
            }
        }
    })
    .await;
    let final_state = match followed {
        Ok(result) => result?,
        Err(()) => None,
    };
    tail(output.as_ref(), offset, &mut on_log);
    record.slurm_state = final_state.clone().or(record.slurm_state);
    super::write_json(&files.record(), &record)?;
    let batch = super::read_json::<BatchReport>(&files.batch()).ok();
    Ok(exit_of(batch.as_ref(), record.slurm_state.as_deref()))
}

/// How long a supervised run's Slurm job may show a final state on its way back to
/// PENDING (requeued) before it is taken as over.
const REQUEUE_WAIT: Duration = Duration::from_secs(60);

/// Whether Slurm's final `state` may be a supervised run's batch being requeued: argus
/// requeued it, or Slurm does on a node failure or a preemption.
fn may_be_requeued(batch: Option<&BatchReport>, state: &str) -> bool {
    batch.is_some_and(|b| {
        b.restart.is_some()
            && (b.stage == "requeued"
                || matches!(
                    state,
                    "NODE_FAIL" | "PREEMPTED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "REQUEUED"
                ))
    })
}

/// The most of the batch output passed on per look at it (the rest, at the next).
const TAIL_CAP: u64 = 16 << 20;

/// What was appended to the batch output since `offset` (opened through the run's
/// handle: a regular file, no link), passed on; the new offset.
fn tail(output: Option<&RunFile>, offset: u64, on_log: &mut impl FnMut(&str)) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Some(Ok(mut file)) = output.map(RunFile::open) else {
        return offset;
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_CAP).read_to_end(&mut bytes);
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
        .arg(staged.files.profile_path())
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

    #[tokio::test]
    async fn an_images_directory_swapped_for_a_link_while_archiving_keeps_the_archive_inside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let layout = crate::config::Layout::new(dir.path().join("shared"));
        let images = layout.root().join("common/images");
        let moved = dir.path().join("moved");
        let (images_c, moved_c, outside_c) = (images.clone(), moved.clone(), outside.clone());
        // The swap happens while the image is being saved (after the directory was made).
        let save = async move |path: &Path| {
            std::fs::rename(&images_c, &moved_c).unwrap();
            std::os::unix::fs::symlink(&outside_c, &images_c).unwrap();
            std::fs::write(path, b"tar").unwrap();
            Ok(true)
        };
        let written = archive_image(&layout, "sha256:abcd", save).await.unwrap();
        assert_eq!(written, Some(images.join("abcd.tar")));
        assert_eq!(std::fs::read(moved.join("abcd.tar")).unwrap(), b"tar");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Only the archive is left in the moved directory (the staging directory is gone).
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 1);
        // Now that it is a link, it is refused, nothing saved through it.
        let never = async |_: &Path| -> Result<bool, crate::cluster::Error> { unreachable!() };
        let err = archive_image(&layout, "sha256:ef01", never)
            .await
            .unwrap_err();
        assert_eq!(crate::exit::Classify::exit(&err), Exit::Usage, "{err}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn an_archive_already_there_is_kept_and_a_failed_save_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::config::Layout::new(dir.path().join("shared"));
        let images = layout.root().join("common/images");
        std::fs::create_dir_all(&images).unwrap();
        std::fs::write(images.join("abcd.tar"), b"old").unwrap();
        let never = async |_: &Path| -> Result<bool, crate::cluster::Error> { unreachable!() };
        assert_eq!(
            archive_image(&layout, "sha256:abcd", never).await.unwrap(),
            None
        );
        let fails = async |_: &Path| -> Result<bool, crate::cluster::Error> {
            Err(crate::cluster::Error::SharedStorage {
                path: "/proc/self/fd/9/x".into(),
                source: std::io::Error::other("disk full"),
            })
        };
        let err = archive_image(&layout, "sha256:ef01", fails)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("common/images/ef01.tar"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&images).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn the_batch_output_is_read_through_the_runs_directory_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::config::Layout::new(dir.path().join("shared"));
        let files = RunFiles::create(&layout, "20260101-000000-abcd").unwrap();
        let run = files.path();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root's secret").unwrap();
        std::os::unix::fs::symlink(&secret, run.join("slurm-7.out")).unwrap();
        let mut got = String::new();
        assert_eq!(tail(Some(&files.output(7)), 0, &mut |t| got.push_str(t)), 0);
        assert_eq!(got, "");
        std::fs::write(run.join("slurm-8.out"), b"line 1\n").unwrap();
        let offset = tail(Some(&files.output(8)), 0, &mut |t| got.push_str(t));
        assert_eq!((offset, got.as_str()), (7, "line 1\n"));
        // Its directory swapped for a link: what is read is still the run's own output.
        let moved = dir.path().join("moved");
        std::fs::rename(&run, &moved).unwrap();
        std::os::unix::fs::symlink(dir.path(), &run).unwrap();
        std::fs::write(moved.join("slurm-8.out"), b"line 1\nline 2\n").unwrap();
        std::fs::write(dir.path().join("slurm-8.out"), b"outside outside").unwrap();
        let offset = tail(Some(&files.output(8)), offset, &mut |t| got.push_str(t));
        assert_eq!((offset, got.as_str()), (14, "line 1\nline 2\n"));
    }
}
