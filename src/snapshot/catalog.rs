//! What is published under `common/code/`: listing the snapshots (an unreadable one is
//! listed with why, beside the others), finding one by id, and removing one no unfinished
//! job uses, all through directory handles.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::manifest::{self, Manifest};
use super::{Error, io, open_code, publish, validate_id};
use crate::fsx::Dir;
use crate::fsx::found;

#[derive(Debug, Clone, Serialize)]
pub struct ListedSnapshot {
    pub name: String,
    pub code_id: String,
    pub created: String,
    pub files: usize,
    pub bytes: u64,
    pub git_commit: Option<String>,
    pub git_dirty: bool,
    /// Why this entry of the code root is not a snapshot that can be read (a link planted
    /// there, a corrupt or missing manifest, a file where a directory belongs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

impl ListedSnapshot {
    fn unreadable(name: &str, code_id: &str, why: String) -> Self {
        ListedSnapshot {
            name: name.to_string(),
            code_id: code_id.to_string(),
            created: String::new(),
            files: 0,
            bytes: 0,
            git_commit: None,
            git_dirty: false,
            unreadable: Some(why),
        }
    }
}

/// Why `name` (of `kind`) in `dir` cannot be a snapshot directory, if it cannot.
fn not_a_dir(dir: &Dir, name: &str, kind: crate::fsx::Kind) -> Option<String> {
    let path = dir.display(name);
    match kind {
        crate::fsx::Kind::Dir => None,
        crate::fsx::Kind::Link => Some(crate::fsx::Unsafe::Link { path }.to_string()),
        _ => Some(crate::fsx::Unsafe::NotDir { path }.to_string()),
    }
}

/// Why the entry `name` of `dir`, whose name is not UTF-8, is no snapshot.
fn not_utf8(dir: &Dir, name: &std::ffi::OsStr) -> String {
    format!(
        "{:?}: its name is not UTF-8, so it is not a snapshot argus made",
        dir.display(name)
    )
}

/// Every snapshot under `code_root`, by name then creation time. An entry that cannot be
/// read (a link planted there, a corrupt manifest) is listed as unreadable, saying why,
/// and the others still are; only an unusable code root itself is an error.
pub fn list(code_root: &Path) -> Result<Vec<ListedSnapshot>, Error> {
    let mut out = Vec::new();
    let Some(code) = open_code(code_root)? else {
        return Ok(out);
    };
    let names = code.entries().map_err(io("cannot read", code_root))?;
    for (raw, kind) in names {
        let name = raw.to_string_lossy().into_owned();
        // Dot entries are temporary copies and locks, never snapshots.
        if name.starts_with('.') {
            continue;
        }
        if raw.to_str().is_none() {
            out.push(ListedSnapshot::unreadable(
                &name,
                "-",
                not_utf8(&code, &raw),
            ));
            continue;
        }
        if let Some(why) = not_a_dir(&code, &name, kind) {
            out.push(ListedSnapshot::unreadable(&name, "-", why));
            continue;
        }
        let family = match code.open_dir(&name) {
            Ok(family) => family,
            Err(e) => {
                let why = crate::exit::one_line(&io("cannot read", &code.display(&name))(e));
                out.push(ListedSnapshot::unreadable(&name, "-", why));
                continue;
            }
        };
        let ids = match family.entries() {
            Ok(ids) => ids,
            Err(e) => {
                let why = crate::exit::one_line(&io("cannot read", family.path())(e));
                out.push(ListedSnapshot::unreadable(&name, "-", why));
                continue;
            }
        };
        for (raw, kind) in ids {
            let id = raw.to_string_lossy().into_owned();
            if id.starts_with('.') {
                continue;
            }
            if raw.to_str().is_none() {
                out.push(ListedSnapshot::unreadable(
                    &name,
                    &id,
                    not_utf8(&family, &raw),
                ));
                continue;
            }
            if let Some(why) = not_a_dir(&family, &id, kind) {
                out.push(ListedSnapshot::unreadable(&name, &id, why));
                continue;
            }
            let manifest = family
                .open_dir(&id)
                .map_err(io("cannot read", &family.display(&id)))
                .and_then(|snapshot| Manifest::read_in(&snapshot));
            let manifest = match manifest {
                // A copy of another snapshot under a name that is not its id.
                Ok(m) if m.code_id != id => {
                    let why = Error::Misnamed {
                        path: family.display(&id),
                        names: m.code_id,
                    };
                    out.push(ListedSnapshot::unreadable(&name, &id, why.to_string()));
                    continue;
                }
                Ok(m) => m,
                Err(e) => {
                    out.push(ListedSnapshot::unreadable(
                        &name,
                        &id,
                        crate::exit::one_line(&e),
                    ));
                    continue;
                }
            };
            out.push(ListedSnapshot {
                name: name.clone(),
                code_id: manifest.code_id.clone(),
                created: manifest.created.clone(),
                files: manifest.files.iter().filter(|f| f.sha256.is_some()).count(),
                bytes: manifest.files.iter().map(|f| f.size).sum(),
                git_commit: manifest.git_commit.clone(),
                git_dirty: manifest.git_dirty,
                unreadable: None,
            });
        }
    }
    out.sort_by(|a, b| (&a.name, &a.created, &a.code_id).cmp(&(&b.name, &b.created, &b.code_id)));
    Ok(out)
}

/// A published snapshot found by its id.
#[derive(Debug)]
pub struct Found {
    /// Where it is (for messages and for jobs, which see the storage mounted).
    pub path: PathBuf,
    pub name: String,
    pub code_id: String,
    /// Entries of the code root passed over while looking for it, each saying why (a link
    /// or an unreadable directory planted beside the snapshots): for a warning.
    pub skipped: Vec<String>,
    /// Its `<name>/` directory, held open.
    family: Dir,
}

impl Found {
    /// The snapshot directory itself, held open (never reached through a link).
    pub fn open(&self) -> Result<Dir, Error> {
        self.family
            .open_dir(&self.code_id)
            .map_err(io("cannot read", &self.path))
    }
}

/// How much of a snapshot [`locate`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// A manifest that reads and names the id (for using or verifying the snapshot).
    Manifest,
    /// A manifest file, whatever it says (for removing a damaged or misnamed one).
    Present,
}

/// `<code_id>` in the family `name`, held open as `family`, if it holds a snapshot (a
/// manifest), reached without following a link.
fn published_in(
    family: Dir,
    name: &str,
    code_id: &str,
    path: PathBuf,
    check: Check,
) -> Result<Option<Found>, Error> {
    let Some(snapshot) = found(family.open_dir(code_id)).map_err(io("cannot read", &path))? else {
        return Ok(None);
    };
    let Some(argus) =
        found(snapshot.open_dir(manifest::ARGUS_DIR)).map_err(io("cannot read", &path))?
    else {
        return Ok(None);
    };
    let manifest = argus.display(manifest::MANIFEST_NAME);
    match argus
        .kind(manifest::MANIFEST_NAME)
        .map_err(io("cannot read", &manifest))?
    {
        Some(crate::fsx::Kind::File) => {
            if check == Check::Manifest {
                // A copy of another snapshot under this name is not the snapshot `code_id`.
                let manifest = Manifest::read_in(&snapshot)?;
                if manifest.code_id != code_id {
                    return Err(Error::Misnamed {
                        path,
                        names: manifest.code_id,
                    });
                }
            }
            Ok(Some(Found {
                path,
                name: name.to_string(),
                code_id: code_id.to_string(),
                skipped: Vec::new(),
                family,
            }))
        }
        Some(crate::fsx::Kind::Link) => Err(crate::fsx::Unsafe::Link { path: manifest }.into()),
        _ => Ok(None),
    }
}

/// The snapshot `id` (`code_id`, or `name/code_id` when the id is ambiguous): a directory
/// whose manifest names it.
pub fn locate(code_root: &Path, id: &str) -> Result<Found, Error> {
    locate_checked(code_root, id, Check::Manifest)
}

/// [`locate`], asking `check` of the snapshot. Only a family that holds `id` matters: an
/// unusable sibling (a link or a file planted in the code root, a directory that cannot be
/// read) is passed over and named in [`Found::skipped`].
fn locate_checked(code_root: &Path, id: &str, check: Check) -> Result<Found, Error> {
    let qualified = id.split_once('/');
    match qualified {
        Some((name, code_id)) => {
            validate_id("name", name)?;
            validate_id("code id", code_id)?;
        }
        None => validate_id("code id", id)?,
    }
    let Some(code) = open_code(code_root)? else {
        return Err(Error::NotFound(id.to_string()));
    };
    if let Some((name, code_id)) = qualified {
        let path = code.display(name).join(code_id);
        let Some(family) = found(code.open_dir(name)).map_err(io("cannot read", &path))? else {
            return Err(Error::NotFound(id.to_string()));
        };
        return published_in(family, name, code_id, path, check)?
            .ok_or_else(|| Error::NotFound(id.to_string()));
    }
    let mut matches = Vec::new();
    let mut skipped = Vec::new();
    for (name, kind) in code.entries().map_err(io("cannot read", code_root))? {
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let family = match kind {
            crate::fsx::Kind::Dir => code.open_dir(name),
            crate::fsx::Kind::Link => {
                let path = code.display(name);
                skipped.push(crate::fsx::Unsafe::Link { path }.into());
                continue;
            }
            _ => continue,
        };
        let family = match family {
            Ok(family) => family,
            Err(e) => {
                skipped.push(io("cannot read", &code.display(name))(e));
                continue;
            }
        };
        // Something that is not the snapshot where it would be: said first if none is found.
        match published_in(family, name, id, code.display(name).join(id), check) {
            Ok(found) => matches.extend(found),
            Err(e) => skipped.insert(0, e),
        }
    }
    if matches.len() > 1 {
        return Err(Error::InvalidId {
            what: "code id (it exists under several names; write name/code_id)",
            value: id.to_string(),
        });
    }
    let Some(mut found) = matches.pop() else {
        // What was passed over may be where it is: say what that was.
        return Err(skipped
            .into_iter()
            .next()
            .unwrap_or_else(|| Error::NotFound(id.to_string())));
    };
    found.skipped = skipped
        .iter()
        .map(|e| format!("passed over: {}", crate::exit::one_line(e)))
        .collect();
    Ok(found)
}

/// The directory of snapshot `id` (`code_id`, or `name/code_id` when the id is ambiguous).
pub fn find(code_root: &Path, id: &str) -> Result<PathBuf, Error> {
    locate(code_root, id).map(|found| found.path)
}

/// Removes a snapshot (a damaged or misnamed one too), unless an unfinished job record
/// under `jobs_root` names it. What it removed, with what it passed over on the way.
pub fn remove(code_root: &Path, jobs_root: &Path, id: &str, force: bool) -> Result<Found, Error> {
    let found = locate_checked(code_root, id, Check::Present)?;
    if !force {
        let users = unfinished_jobs_using(jobs_root, &found.code_id);
        if !users.is_empty() {
            return Err(Error::InUse {
                id: id.to_string(),
                jobs: users.join(", "),
            });
        }
    }
    publish::remove(&found.family, &found.code_id)?;
    Ok(found)
}

/// Jobs whose record (`jobs/<id>/job.json`) names `code_id` and has not finished (an
/// unknown status counts as unfinished: the snapshot may still be in use).
/// A record that cannot be read at all may name it too, so it counts (saying so).
pub fn unfinished_jobs_using(jobs_root: &Path, code_id: &str) -> Vec<String> {
    let records = crate::records::Records::new(jobs_root);
    let entries = match records.entries() {
        Ok(entries) => entries,
        // `jobs/` itself unusable (a planted link): nothing proves the snapshot unused.
        Err(e) => return vec![format!("jobs/ ({})", crate::exit::one_line(&e))],
    };
    let mut users: Vec<String> = entries
        .into_iter()
        .filter_map(|listed| match listed {
            crate::records::Listed::Record(r)
                if r.code_id.as_deref() == Some(code_id) && !r.status.is_finished() =>
            {
                Some(r.submission_id.clone())
            }
            crate::records::Listed::Record(_) => None,
            crate::records::Listed::Unreadable { id, .. } => {
                Some(format!("{id} (unreadable record)"))
            }
        })
        .collect();
    users.sort();
    users
}
