//! Which run an `argus run` is: the key of what it runs, the newest run of that key under
//! `runs/`, and whether to start a new run, resume that one, or say it is finished.
//!
//! The key is the sha256 of the cluster's name and the JobSpec as loaded (paths made
//! absolute, `--set` values applied, serialised in a fixed order), and for a replay the
//! lock it replays. Everything that changes the job changes the key; two runs of one key
//! are the same run. The `restart` policy is argus's, not the job's: it is left out, so
//! `argus run job.yaml --restart 3` is the same run as `argus run job.yaml`.

use std::path::Path;

use serde::Serialize;

use super::lock::RunLock;
use super::record::RunReport;
use crate::config::jobspec::JobSpec;

/// What a run runs, as 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey(String);

#[derive(Serialize)]
struct KeyInputs<'a> {
    format: u32,
    cluster: &'a str,
    jobspec: &'a JobSpec,
    /// A replay is its own run: the lock it replays is part of what it runs.
    replay_of: Option<&'a RunLock>,
}

impl RunKey {
    pub fn of(cluster: &str, jobspec: &JobSpec, replay_of: Option<&RunLock>) -> RunKey {
        let jobspec = &JobSpec {
            restart: None,
            ..jobspec.clone()
        };
        let text = crate::config::yaml::to_string(&KeyInputs {
            format: 1,
            cluster,
            jobspec,
            replay_of,
        });
        RunKey(crate::digest::sha256_hex(text.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits, for messages.
    pub fn short(&self) -> &str {
        &self.0[..12.min(self.0.len())]
    }
}

impl std::fmt::Display for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The newest run of `key` under `runs/` (by start time, then id). `runs/` and each run's
/// directory are opened through handles: a link planted at either is not listed. A run of
/// this key whose report argus cannot read (edited by hand, cut short) is an error naming
/// it: a new run would take over its job.
pub fn newest(runs: &Path, key: &RunKey) -> Result<Option<RunReport>, String> {
    let Ok(runs) = super::record::open_runs(runs) else {
        return Ok(None);
    };
    let mut found = Vec::new();
    for (name, _) in runs.entries().unwrap_or_default() {
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        match RunReport::try_read_in(&runs, &name) {
            Ok(Some(report)) => found.push(report),
            Err(why) if RunReport::key_in(&runs, &name).as_deref() == Some(key.as_str()) => {
                return Err(format!(
                    "the report of a run of this JobSpec cannot be read: {why}"
                ));
            }
            Err(why) => tracing::warn!("{why}"),
            Ok(None) => {}
        }
    }
    Ok(found
        .into_iter()
        .filter(|r| r.key.as_deref() == Some(key.as_str()))
        .max_by(|a, b| {
            (a.started_at.as_str(), a.run_id.as_str())
                .cmp(&(b.started_at.as_str(), b.run_id.as_str()))
        }))
}

/// How this `argus run` starts.
#[derive(Debug)]
pub enum Start {
    /// No run of this key, or `--new`.
    New,
    /// The newest run of this key stopped before its end: go on with it.
    Resume(RunReport),
    /// The newest run of this key has ended: nothing to do.
    Finished(RunReport),
}

/// The rule. Pure.
pub fn decide(newest: Option<RunReport>, new: bool) -> Start {
    match newest {
        _ if new => Start::New,
        None => Start::New,
        Some(report) if report.is_done() => Start::Finished(report),
        Some(report) => Start::Resume(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> JobSpec {
        crate::config::jobspec::LoadedJobSpec::from_source(
            crate::config::yaml::Source::new("j.yaml", yaml.to_string()),
            &[],
        )
        .unwrap()
        .spec
    }

    const JOB: &str = "workload: custom\ncode_id: x\nentrypoint: python3 -c pass\n";

    #[test]
    fn the_key_follows_what_runs_and_nothing_else() {
        let a = RunKey::of("c", &spec(JOB), None);
        assert_eq!(a.as_str().len(), 64);
        // The same job written differently is the same run.
        let reordered = "entrypoint: python3 -c pass\n# a comment\ncode_id: x\nworkload: custom\n";
        assert_eq!(a, RunKey::of("c", &spec(reordered), None));
        // Another cluster, another field, a --set: another run.
        assert_ne!(a, RunKey::of("d", &spec(JOB), None));
        assert_ne!(
            a,
            RunKey::of("c", &spec(&format!("{JOB}time_limit: 5m\n")), None)
        );
        let with_set = crate::config::jobspec::LoadedJobSpec::from_source(
            crate::config::yaml::Source::new("j.yaml", JOB.to_string()),
            &["overrides.trainer.logger=[console]".to_string()],
        )
        .unwrap()
        .spec;
        assert_ne!(a, RunKey::of("c", &with_set, None));
    }

    #[test]
    fn the_restart_policy_is_not_part_of_the_key() {
        let plain = RunKey::of("c", &spec(JOB), None);
        let supervised = spec(&format!(
            "{JOB}restart: {{max: 3, on: [hang], hang_after: 20m}}\n"
        ));
        assert!(supervised.restart.is_some());
        assert_eq!(plain, RunKey::of("c", &supervised, None));
        let by_set = crate::config::jobspec::LoadedJobSpec::from_source(
            crate::config::yaml::Source::new("j.yaml", JOB.to_string()),
            &["restart.max=2".to_string()],
        )
        .unwrap()
        .spec;
        assert_eq!(by_set.restart.as_ref().map(|r| r.max), Some(2));
        assert_eq!(plain, RunKey::of("c", &by_set, None));
        // A JobSpec without the section serialises as before it existed: old keys hold.
        let text = crate::config::yaml::to_string(&spec(JOB));
        assert!(!text.contains("restart"), "{text}");
    }

    fn report(id: &str, started: &str, key: &RunKey, stage: &str) -> RunReport {
        RunReport {
            run_id: id.into(),
            key: Some(key.to_string()),
            started_at: started.into(),
            stage: stage.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_newest_run_of_the_key_decides() {
        let root = tempfile::tempdir().unwrap();
        let key = RunKey::of("c", &spec(JOB), None);
        let other = RunKey::of("d", &spec(JOB), None);
        for r in [
            report("run-a", "2026-01-01T00:00:00Z", &key, "done"),
            report("run-b", "2026-01-02T00:00:00Z", &key, "wait"),
            report("run-c", "2026-01-03T00:00:00Z", &other, "up"),
        ] {
            let dir = root.path().join(&r.run_id);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(
                dir.join(crate::run::record::REPORT),
                serde_json::to_vec(&r).unwrap(),
            )
            .unwrap();
        }
        std::fs::create_dir(root.path().join(".tmp-run-d")).unwrap();
        let found = newest(root.path(), &key).unwrap().unwrap();
        assert_eq!(found.run_id, "run-b");
        assert!(
            matches!(decide(Some(found.clone()), false), Start::Resume(r) if r.run_id == "run-b")
        );
        assert!(matches!(decide(Some(found), true), Start::New));
        let done = report("run-a", "t", &key, "done");
        assert!(matches!(decide(Some(done), false), Start::Finished(_)));
        assert!(matches!(decide(None, false), Start::New));
        assert!(newest(&root.path().join("absent"), &key).unwrap().is_none());
        // A report of this key that cannot be read is named, not passed over.
        std::fs::write(
            root.path().join("run-b").join(crate::run::record::REPORT),
            format!("{{\"key\": \"{key}\", \"run_id\": 5}}"),
        )
        .unwrap();
        assert!(newest(root.path(), &key).unwrap_err().contains("run-b"));
    }
}
