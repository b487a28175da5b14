//! A bundle on the shared storage: its files redacted and cut to its cap, staged under a
//! temporary name with the manifest last, then renamed over `diagnostics/<attempt>`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Entry, Manifest, Missed};
use crate::diagnose::{DIR, Error, MANIFEST};
use crate::fsx;
use crate::records::Records;
use crate::secrets::Secrets;

/// The bundle's files redacted by value, and by name where the values are unknown (the
/// names `redact` holds: [`Secrets::add_name`]; the env by name and by shape, before),
/// then cut to its cap (`total_bytes`): what is kept, listed in `manifest` (with its
/// size); what is not, named in it as not collected (every reason redacted too).
pub(super) fn seal(
    files: Vec<(String, Vec<u8>, Entry)>,
    redact: &Secrets,
    total_bytes: u64,
    manifest: &mut Manifest,
) -> Vec<(String, Vec<u8>)> {
    let mut total = 0u64;
    let mut kept = Vec::new();
    for (path, bytes, mut entry) in files {
        let text = redact
            .redact_str(&String::from_utf8_lossy(&bytes))
            .into_owned();
        let bytes = text.into_bytes();
        if total + bytes.len() as u64 > total_bytes {
            manifest.not_collected.push(Missed {
                what: path,
                why: format!("the bundle's cap of {total_bytes} bytes was reached"),
            });
            continue;
        }
        total += bytes.len() as u64;
        entry.bytes = bytes.len() as u64;
        manifest.files.push(entry);
        kept.push((path, bytes));
    }
    manifest.bytes = total;
    for missed in &mut manifest.not_collected {
        missed.why = redact.redact_str(&missed.why).into_owned();
    }
    kept
}

/// Writes the bundle: staged as `diagnostics/.tmp-<attempt>...`, its manifest last (with
/// the time it all took), then renamed over `diagnostics/<attempt>`.
pub(super) fn write(
    records: &Records,
    id: &str,
    attempt: u32,
    files: &[(String, Vec<u8>)],
    manifest: &mut Manifest,
    started: Instant,
    redact: &Secrets,
) -> Result<PathBuf, Error> {
    let shown = records.dir(id).join(DIR).join(attempt.to_string());
    let failed = |source| Error::Write {
        path: shown.clone(),
        source,
    };
    let job = records
        .job(id)
        .map_err(failed)?
        .ok_or_else(|| Error::UnknownJob(id.to_string()))?;
    let diagnostics = job.create_dirs(DIR, &mut |_| {}).map_err(failed)?;
    let name = attempt.to_string();
    let tmp = fsx::temp_name(&name);
    let stage = diagnostics.create_dir(&tmp, 0o777).map_err(failed)?;
    let filled = (|| {
        for (rel, bytes) in files {
            put(&stage, rel, bytes)?;
        }
        manifest.seconds = started.elapsed().as_secs_f64();
        let text = serde_json::to_string_pretty(manifest).unwrap_or_default();
        put(&stage, MANIFEST, redact.redact_str(&text).as_bytes())?;
        if diagnostics.kind(&name)?.is_some() {
            diagnostics.remove_all(&name)?;
        }
        diagnostics.rename(&tmp, &diagnostics, &name)
    })();
    if let Err(e) = filled {
        let _ = diagnostics.remove_all(&tmp);
        return Err(failed(e));
    }
    Ok(diagnostics.display(&name))
}

/// Writes the new file `rel` below `dir`, making its directories.
fn put(dir: &fsx::Dir, rel: &str, bytes: &[u8]) -> std::io::Result<()> {
    let rel = Path::new(rel);
    let name = rel
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    dir.create_dirs(parent, &mut |_| {})?.write_new(name, bytes)
}
