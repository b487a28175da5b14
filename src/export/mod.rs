//! Other engines' objects from the same resolved job: the profile's cluster and a JobSpec's
//! submission, exactly as `argus submit` resolves it, handed to an engine that runs them
//! itself. `kuberay` builds KubeRay objects (pure); this module gathers its inputs (the
//! I/O: the JobSpec through [`crate::submit::prepare`], a `code.source` hashed for its code
//! id) and says what cannot be carried: refusals stop the export, warnings go with it.
//! Nothing is written to the shared storage or sent anywhere.

pub mod emit;
pub mod kuberay;
pub mod quantity;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::LoadedProfile;
use crate::config::jobspec::{Code, LoadedJobSpec};
use crate::config::yaml::{Place, Seg, Source, display_path};
use crate::exit::{Classify, Exit};
use crate::ids::CodeRef;
use crate::ray::RayClient;
use crate::secrets::secret_shape;
use crate::submit::{self, Prepared, Target};
use crate::ui::Reporter;
use crate::yaml_path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The object would be wrong: nothing is exported.
    Refusal,
    /// The engine does this differently; the export goes ahead.
    Warning,
}

/// One thing that cannot be carried as it is, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// The profile or JobSpec it is about (None for a flag).
    pub file: Option<String>,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The field (`shared.host_path`) or flag (`--image`).
    pub field: String,
    pub message: String,
    pub hint: Option<String>,
}

impl Finding {
    /// About the node at `path` of a document: its line and column, or those of the
    /// nearest enclosing node written there (a defaulted field points at its section).
    pub fn at(
        severity: Severity,
        source: &Source,
        path: &[Seg],
        message: impl Into<String>,
    ) -> Self {
        let place = (1..=path.len())
            .rev()
            .find_map(|len| source.place(&path[..len]));
        let (at, message) = match place {
            Some(Place::At(line, column)) => (Some((line, column)), message.into()),
            Some(Place::Set(arg)) => (None, format!("given by --set {arg}: {}", message.into())),
            None => (None, message.into()),
        };
        Finding {
            severity,
            file: Some(source.origin.display().to_string()),
            line: at.map(|a| a.0),
            column: at.map(|a| a.1),
            field: display_path(path),
            message,
            hint: None,
        }
    }

    /// About a flag, or the export as a whole.
    pub fn general(severity: Severity, field: &str, message: impl Into<String>) -> Self {
        Finding {
            severity,
            file: None,
            line: None,
            column: None,
            field: field.to_string(),
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets the hint in place (for findings pushed through [`Findings::refuse`]).
    pub fn set_hint(&mut self, hint: impl Into<String>) {
        self.hint = Some(hint.into());
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line, self.column) {
            (Some(file), Some(line), Some(column)) => write!(f, "{file}:{line}:{column}: ")?,
            (Some(file), _, _) => write!(f, "{file}: ")?,
            _ => {}
        }
        write!(f, "{}: {}", self.field, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n    hint: {hint}")?;
        }
        Ok(())
    }
}

/// The findings of one export, in the order they were found.
#[derive(Debug, Clone, Default)]
pub struct Findings(Vec<Finding>);

impl Findings {
    pub fn push(&mut self, finding: Finding) {
        if !self.0.contains(&finding) {
            self.0.push(finding);
        }
    }
    pub fn extend(&mut self, findings: impl IntoIterator<Item = Finding>) {
        for finding in findings {
            self.push(finding);
        }
    }
    pub fn refuse(
        &mut self,
        source: &Source,
        path: &[Seg],
        message: impl Into<String>,
    ) -> &mut Finding {
        self.push_last(Finding::at(Severity::Refusal, source, path, message))
    }
    pub fn warn(
        &mut self,
        source: &Source,
        path: &[Seg],
        message: impl Into<String>,
    ) -> &mut Finding {
        self.push_last(Finding::at(Severity::Warning, source, path, message))
    }
    fn push_last(&mut self, finding: Finding) -> &mut Finding {
        self.0.push(finding);
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
    pub fn has_refusals(&self) -> bool {
        self.0.iter().any(|f| f.severity == Severity::Refusal)
    }
    pub fn into_vec(self) -> Vec<Finding> {
        self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every finding of the export (refusals and warnings, for `--json`).
    #[error("{}", refused(.0))]
    Refused(Vec<Finding>),
    #[error("cannot write {}", crate::text::shown(path))]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn refused(findings: &[Finding]) -> String {
    let refusals: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Refusal)
        .collect();
    let mut out = format!(
        "{} cannot be carried to Kubernetes; nothing was written:",
        match refusals.len() {
            1 => "1 setting".to_string(),
            n => format!("{n} settings"),
        }
    );
    for finding in refusals {
        out.push_str(&format!("\n  {finding}"));
    }
    out
}

impl Classify for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Refused(_) => Exit::Usage,
            Error::Write { .. } => Exit::Failed,
        }
    }
}

impl Error {
    pub fn findings(&self) -> &[Finding] {
        match self {
            Error::Refused(findings) => findings,
            Error::Write { .. } => &[],
        }
    }
}

/// An exported manifest and what goes with it.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    pub kind: &'static str,
    pub name: String,
    pub namespace: Option<String>,
    /// The Ray submission id (RayJob only).
    pub submission_id: Option<String>,
    #[serde(skip)]
    pub yaml: String,
    pub warnings: Vec<Finding>,
    /// For humans: what argus chose where the input left it open.
    pub notes: Vec<String>,
}

/// Exports the profile (and the JobSpec, if any) as one KubeRay object.
pub fn kuberay(
    profile: &LoadedProfile,
    jobspec: Option<&LoadedJobSpec>,
    options: &kuberay::Options,
    reporter: &dyn Reporter,
) -> Result<Exported, Error> {
    let mut findings = Findings::default();
    let mut notes = Vec::new();
    findings.extend(secrets(&profile.source, PROFILE_ENV_MAPS));
    let mut resolved = None;
    if let Some(loaded) = jobspec {
        findings.extend(secrets(&loaded.source, JOBSPEC_ENV_MAPS));
        resolved = resolve_job(profile, loaded, &mut findings, &mut notes, reporter);
    }
    let job = match (jobspec, &resolved) {
        (Some(loaded), Some((spec, prepared))) => Some(kuberay::Job {
            source: &loaded.source,
            spec: &spec.spec,
            prepared,
        }),
        _ => None,
    };
    let built = kuberay::build(profile, job.as_ref(), options);
    findings.extend(built.findings);
    match built.object {
        Some(object) if !findings.has_refusals() && (jobspec.is_none() || job.is_some()) => {
            let header =
                kuberay::header(profile, jobspec.map(|j| j.source.origin.as_path()), options);
            Ok(Exported {
                kind: object.kind(),
                name: object.name().to_string(),
                namespace: options.namespace.clone(),
                submission_id: job.map(|j| j.prepared.submission_id.clone()),
                yaml: format!("{header}{}", emit::to_yaml(&object.to_value())),
                warnings: findings.into_vec(),
                notes,
            })
        }
        _ => Err(Error::Refused(findings.into_vec())),
    }
}

/// The JobSpec as `argus submit` resolves it, against the shared storage as this host sees
/// it when it is mounted here. None when it cannot be resolved (the reason is a refusal).
fn resolve_job(
    profile: &LoadedProfile,
    loaded: &LoadedJobSpec,
    findings: &mut Findings,
    notes: &mut Vec<String>,
    reporter: &dyn Reporter,
) -> Option<(LoadedJobSpec, Prepared)> {
    let mut job = loaded.clone();
    job.absolutize();
    // No request is ever sent: the client only gives the target its shape.
    let mut target = Target::from_profile(profile, RayClient::new(&profile.dashboard_url(), None));
    if let Some(host) = &target.host_shared
        && !host.root().is_dir()
    {
        findings
            .warn(&profile.source, &yaml_path!["shared", "host_path"], format!(
                "{} is not mounted on this host: the JobSpec is resolved without it (no snapshot or HF cache lookup, overrides not checked)",
                host.root().display()
            ))
            .set_hint("export from a machine that mounts the shared storage to get the same resolution as `argus submit`");
        target.host_shared = None;
    }
    let src = &loaded.source;
    let mut derived_code = None;
    if let Code::Source(code) = job.spec.code.clone() {
        let source = Path::new(&code.source);
        let code_id = crate::snapshot::tree_hash_of(source, &code.exclude, reporter).map(|tree| {
            let git = crate::snapshot::walk::git_state(
                &std::fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf()),
            );
            crate::snapshot::hash::derive_code_id(&tree, git.as_ref())
        });
        match code_id {
            Ok(id) => {
                let path = format!("{}/{}/{id}", target.mount.code().display(), code.name);
                findings
                    .warn(src, &yaml_path!["code", "source"], format!(
                        "not snapshotted by an export: the pods run snapshot {}/{id} (this tree's content id), which must be on the volume they mount",
                        code.name
                    ))
                    .set_hint(format!("argus snapshot {} --name {}", code.source, code.name));
                derived_code = Some(path.clone());
                job.spec.code = Code::Snapshot(CodeRef {
                    name: Some(code.name.clone()),
                    id: match id.parse() {
                        Ok(id) => id,
                        Err(e) => {
                            findings.refuse(src, &yaml_path!["code", "source"], format!("{e}"));
                            return None;
                        }
                    },
                });
            }
            Err(e) => {
                findings
                    .refuse(src, &yaml_path!["code", "source"], format!("cannot derive the code id: {e}"))
                    .set_hint("a directory relative to the JobSpec, or code_id: of a snapshot on the volume");
                return None;
            }
        }
    }
    run_only_fields(&job, src, findings);
    if job.spec.submission_id.is_none() {
        let id = derived_submission_id(profile, loaded, derived_code.as_deref());
        notes.push(format!(
            "no submission_id in {}: using {id}, derived from the profile and the JobSpec (the same files name the same job; set submission_id to run it again)",
            src.origin.display()
        ));
        job.spec.submission_id = match id.parse() {
            Ok(id) => Some(id),
            Err(e) => {
                findings.refuse(src, &yaml_path!["submission_id"], format!("{e}"));
                return None;
            }
        };
    }
    match submit::prepare(&target, &job, true) {
        Ok(prepared) => {
            for note in &prepared.notes {
                let about = match note.split_whitespace().next() {
                    Some("model") => yaml_path!["model_id"].to_vec(),
                    Some("overrides") => yaml_path!["overrides"].to_vec(),
                    _ => Vec::new(),
                };
                findings.push(Finding::at(Severity::Warning, src, &about, note.clone()));
            }
            Some((job, prepared))
        }
        Err(e) => {
            let path = match &e {
                submit::Error::CodeNotFound { .. } => yaml_path!["code_id"].to_vec(),
                submit::Error::BadId(_) => yaml_path!["submission_id"].to_vec(),
                submit::Error::Overrides(
                    crate::submit::override_check::Error::UnknownOverride { key, .. },
                ) => override_path(src, key, &loaded.spec),
                _ => Vec::new(),
            };
            let mut finding = Finding::at(Severity::Refusal, src, &path, e.to_string());
            finding.hint = e.hint();
            findings.push(finding);
            None
        }
    }
}

/// What only `argus run` acts on, said where it is written: the local copies a run puts
/// on the shared storage first, and the restart policy a RayJob has none of.
fn run_only_fields(job: &LoadedJobSpec, src: &Source, findings: &mut Findings) {
    if job.spec.data_from.is_some() {
        findings
            .warn(src, &yaml_path!["data_from"], "used by `argus run` only: the datasets must already be on the volume the pods mount")
            .set_hint("argus prepare --from DIR, from a machine that mounts the shared storage");
    }
    if let (Some(dir), Some(model)) = (&job.spec.model_from, &job.spec.model_id) {
        findings
            .warn(src, &yaml_path!["model_from"], "used by `argus run` only: the model must already be in the HF cache on the volume the pods mount")
            .set_hint(format!("argus prepare --model {model} --model-from {dir}, from a machine that mounts the shared storage"));
    }
    if job.spec.restart.is_some() {
        findings
            .warn(src, &yaml_path!["restart"], "argus's supervision (restart from the newest complete checkpoint) is not carried: a RayJob has none of it; KubeRay's backoffLimit retries on a new cluster, from the start unless verl's resume_mode=auto finds the checkpoint on the volume")
            .set_hint("supervise the run with `argus run`, or set the RayJob's spec.backoffLimit yourself");
    }
}

/// Where an override is written: `overrides.<key>` (a map) or `overrides[i]` (a list).
pub fn override_path(src: &Source, key: &str, spec: &crate::config::jobspec::JobSpec) -> Vec<Seg> {
    let as_map = yaml_path!["overrides", key].to_vec();
    if src.place(&as_map).is_some() {
        return as_map;
    }
    match spec.overrides.0.iter().position(|o| o.key == key) {
        Some(i) => yaml_path!["overrides", i].to_vec(),
        None => yaml_path!["overrides"].to_vec(),
    }
}

/// `<workload>-<10 hex>` of the profile, the JobSpec and a derived code path: the same
/// inputs give the same id, so applying the export again changes nothing.
fn derived_submission_id(
    profile: &LoadedProfile,
    job: &LoadedJobSpec,
    code: Option<&str>,
) -> String {
    let mut hash = Sha256::new();
    for part in [
        profile.source.text.as_str(),
        job.source.text.as_str(),
        code.unwrap_or(""),
    ] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let hex: String = hash
        .finalize()
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{hex}", job.spec.workload.as_str())
}

/// Maps of environment variables (and metadata), where a name says what the value is
/// (`*`: any item of a list).
const PROFILE_ENV_MAPS: &[&[&str]] = &[
    &["env"],
    &["head", "env"],
    &["workers", "*", "env"],
    &["submit", "runtime_env", "env_vars"],
];
const JOBSPEC_ENV_MAPS: &[&[&str]] = &[&["env_vars"], &["metadata"]];

/// Every secret written in a document: values of variables named like one (`HF_TOKEN`,
/// `WANDB_API_KEY`) in its environment maps, and values shaped like one (a token, a
/// password in a URL, a private key) anywhere.
pub fn secrets(source: &Source, env_maps: &[&[&str]]) -> Vec<Finding> {
    let Ok(doc) = crate::config::yaml::parse::<serde_yaml::Value>(source) else {
        return Vec::new();
    };
    // The values of every secret variable this process knows (the profile's, the
    // JobSpec's, this environment's): a value holding one is refused wherever it stands.
    let known = crate::secrets::known();
    let mut out = Vec::new();
    let mut path = Vec::new();
    walk(&doc, &mut path, &mut |path, key, value| {
        let in_env_map = env_maps.iter().any(|map| {
            map.len() + 1 == path.len()
                && map.iter().zip(path.iter()).all(|(want, seg)| match seg {
                    Seg::Index(_) => *want == "*",
                    Seg::Key(key) => key == want,
                })
        });
        // A key inside an override's value (`overrides.<key>.env_vars.WANDB_API_KEY`), where
        // argus redacts by the same rule.
        let in_override_value = path.len() > 2 && path[0] == Seg::Key("overrides".into());
        let what = match (key, value) {
            (Some(key), Some(value))
                if (in_env_map || in_override_value)
                    && !value.is_empty()
                    && crate::secrets::is_secret_name(key) =>
            {
                Some(format!("`{key}` is a secret"))
            }
            (_, Some(value)) => secret_shape(value)
                .map(|what| format!("the value is {what}"))
                .or_else(|| {
                    (known.redact_str(value) != value).then(|| {
                        "the value holds the value of a secret variable (of the profile, the JobSpec or this environment)".to_string()
                    })
                }),
            _ => None,
        };
        if let Some(what) = what {
            let hint = match key {
                Some("HF_TOKEN") => {
                    "remove it; pass --hf-token-secret NAME (a Kubernetes Secret whose key HF_TOKEN holds the token)"
                }
                Some("RAY_AUTH_TOKEN") => {
                    "remove it; use ray.auth: token and --auth-secret NAME (a Secret whose key auth_token holds the token)"
                }
                _ => {
                    "keep it in a Kubernetes Secret and reference it from the pods (valueFrom.secretKeyRef), not in the profile or JobSpec"
                }
            };
            out.push(
                Finding::at(
                    Severity::Refusal,
                    source,
                    path,
                    format!("{what}: it would be exported in clear"),
                )
                .hint(hint),
            );
        }
    });
    out
}

/// `(path, key, scalar)` of one scalar of a document.
type Visit<'a> = dyn FnMut(&[Seg], Option<&str>, Option<&str>) + 'a;

/// Calls `visit(path, key, scalar)` for every scalar of a document (keys of maps given).
fn walk(value: &serde_yaml::Value, path: &mut Vec<Seg>, visit: &mut Visit) {
    use serde_yaml::Value;
    match value {
        Value::Mapping(map) => {
            for (k, v) in map {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => crate::config::yaml::to_string(other).trim().to_string(),
                };
                path.push(Seg::Key(key.clone()));
                match v {
                    Value::Mapping(_) | Value::Sequence(_) => walk(v, path, visit),
                    scalar => visit(path, Some(&key), scalar_text(scalar).as_deref()),
                }
                path.pop();
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                walk(item, path, visit);
                path.pop();
            }
        }
        Value::Tagged(tagged) => walk(&tagged.value, path, visit),
        scalar => visit(path, None, scalar_text(scalar).as_deref()),
    }
}

fn scalar_text(value: &serde_yaml::Value) -> Option<String> {
    match value {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_words_not_substrings() {
        for name in [
            "HF_TOKEN",
            "WANDB_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "hftoken",
            "RAY_AUTH_TOKEN",
            "api-key",
        ] {
            assert!(crate::secrets::is_secret_name(name), "{name}");
        }
        for name in [
            "TOKENIZERS_PARALLELISM",
            "NCCL_DEBUG",
            "HF_HUB_DISABLE_TELEMETRY",
            "KEYBOARD",
            "HF_ENDPOINT",
        ] {
            assert!(!crate::secrets::is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn secrets_are_located_in_their_document() {
        let src = Source::new(
            "p.yaml",
            "env:\n  HF_TOKEN: abc\n  TOKENIZERS_PARALLELISM: 'false'\nsubmit:\n  runtime_env:\n    env_vars: {WANDB_API_KEY: k}\nother:\n  url: https://u:p@h/x\n  HF_TOKEN: not-an-env-map\n",
        );
        let found = secrets(&src, PROFILE_ENV_MAPS);
        let at: Vec<(String, Option<usize>)> =
            found.iter().map(|f| (f.field.clone(), f.line)).collect();
        assert_eq!(
            at,
            [
                ("env.HF_TOKEN".to_string(), Some(2)),
                (
                    "submit.runtime_env.env_vars.WANDB_API_KEY".to_string(),
                    Some(6)
                ),
                ("other.url".to_string(), Some(8)),
            ]
        );
        assert!(
            found[0]
                .hint
                .as_deref()
                .unwrap_or_default()
                .contains("--hf-token-secret")
        );
    }
}
