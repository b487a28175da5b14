//! The composer's files: verl's config directory held open ([`crate::fsx::Dir`]) and
//! every group listed and every config read through it (capped, no link followed, no FIFO
//! opened), with Hydra's relative group names (`../optim`) resolved by text inside it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::defaults::{Loaded, parse_config};
use super::{Composer, Fail, HYDRA_GROUPS, READ_CAP, yaml_file};
use crate::config::yaml;
use crate::fsx::{Dir, Kind as DirKind, Unsafe};

/// Whether `error` says nothing usable is there: missing, or a non-directory (not a link)
/// where a directory was expected (a path Hydra would not find either).
fn is_absent(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound
        || error.raw_os_error() == Some(libc::ENOTDIR)
        || matches!(Unsafe::of(error), Some(Unsafe::NotDir { .. }))
}

/// The names of `rel` (`/`-separated, relative to the config directory) with `.` dropped
/// and `..` taken back lexically, as Hydra's relative group paths (`../optim`) mean;
/// None when it climbs above the directory.
pub(super) fn normalise(rel: &str) -> Option<Vec<&str>> {
    let mut names = Vec::new();
    for name in rel.split('/') {
        match name {
            "" | "." => {}
            ".." => {
                names.pop()?;
            }
            name => names.push(name),
        }
    }
    Some(names)
}

impl Composer {
    /// The composer over the config directory `rel` of the code snapshot at `code_root`.
    /// `code_root` is the caller's (opened by path, as given); `rel` is opened below it
    /// through handles, a link on the way refused. A missing directory finds nothing.
    pub fn open(code_root: &Path, rel: &str) -> Result<Composer, Fail> {
        let shown = code_root.join(rel);
        let dir = match Dir::root(code_root).and_then(|root| root.open_dir(rel)) {
            Ok(dir) => Some(dir),
            Err(e) if is_absent(&e) => None,
            Err(source) => {
                return Err(Fail::Io {
                    path: shown,
                    source,
                });
            }
        };
        Ok(Composer::over(dir, shown))
    }

    pub(super) fn over(dir: Option<Dir>, shown: PathBuf) -> Composer {
        Composer {
            dir,
            shown,
            cache: HashMap::new(),
            choices: BTreeMap::new(),
            deletions: BTreeMap::new(),
            appends: Vec::new(),
            known: BTreeMap::new(),
            known_per_group: BTreeMap::new(),
        }
    }

    /// A new composer over the same directory (the same handle), with no overrides taken.
    pub fn fresh(&self) -> Result<Composer, Fail> {
        let dir = match &self.dir {
            Some(dir) => Some(dir.try_clone().map_err(|source| Fail::Io {
                path: self.shown.clone(),
                source,
            })?),
            None => None,
        };
        Ok(Composer::over(dir, self.shown.clone()))
    }

    /// What messages show for the config directory.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Whether `group` names a config group (a folder of the config dir, or Hydra's own).
    pub fn group_exists(&self, group: &str) -> bool {
        if group == "hydra"
            || HYDRA_GROUPS
                .iter()
                .any(|(g, o, _)| *g == group && !o.is_empty())
        {
            return true;
        }
        self.group_dir(group).is_some()
    }

    /// The directory of `group`, opened through the handle (a link on the way refused);
    /// None when it is not there or would leave the config dir.
    pub(super) fn group_dir(&self, group: &str) -> Option<Dir> {
        let names = normalise(group)?;
        self.dir.as_ref()?.open_dir(names.join("/")).ok()
    }

    pub(super) fn options(&self, group: &str) -> Vec<String> {
        if let Some((_, options, _)) = HYDRA_GROUPS.iter().find(|(g, _, _)| *g == group) {
            return options.iter().map(|o| o.to_string()).collect();
        }
        let mut out: Vec<String> = self
            .group_dir(group)
            .and_then(|dir| dir.entries().ok())
            .into_iter()
            .flatten()
            .filter_map(|(name, _)| {
                name.to_str()
                    .and_then(|n| n.strip_suffix(".yaml"))
                    .map(str::to_string)
            })
            .collect();
        out.sort();
        out
    }

    /// The primary config's file (as messages show it), if the config dir has something
    /// at its name (what is there is checked when it is read).
    pub fn primary_file(&self, name: &str) -> Option<PathBuf> {
        let file = yaml_file(name);
        let (dir, leaf) = self.locate(&file).ok()??;
        match dir.kind(leaf) {
            Ok(Some(kind)) if kind != DirKind::Dir => Some(self.shown.join(file)),
            _ => None,
        }
    }

    /// The directory holding the file `rel` (opened through the handle) and its last name;
    /// None when nothing is there. A name that climbs out of the config dir is Hydra's
    /// refusal; a link on the way is refused.
    pub(super) fn locate<'a>(&self, rel: &'a str) -> Result<Option<(Dir, &'a str)>, Fail> {
        let Some(names) = normalise(rel) else {
            return Err(Fail::Refused(format!(
                "'{rel}' points outside the config directory {}",
                self.shown.display()
            )));
        };
        let (Some(dir), Some((leaf, parents))) = (&self.dir, names.split_last()) else {
            return Ok(None);
        };
        match dir.open_dir(parents.join("/")) {
            Ok(parent) => Ok(Some((parent, leaf))),
            Err(e) if is_absent(&e) => Ok(None),
            Err(source) => Err(Fail::Io {
                path: self.shown.join(rel),
                source,
            }),
        }
    }

    pub(super) fn load(&mut self, config_path: &str) -> Result<Option<Loaded>, Fail> {
        if let Some(hit) = self.cache.get(config_path) {
            return Ok(hit.clone());
        }
        let file = yaml_file(config_path);
        let bytes = match self.locate(&file)? {
            None => None,
            Some((dir, leaf)) => {
                let path = dir.display(leaf);
                match dir.kind(leaf) {
                    // Not a file Hydra would read (a directory), or nothing: not found.
                    Ok(None | Some(DirKind::Dir)) => None,
                    // Anything else is read through the handle, refused unless a regular
                    // file of its own (no link, FIFO, device, hard link) within the cap.
                    Ok(Some(_)) => match dir.read(leaf, READ_CAP) {
                        Ok(bytes) => Some((path, bytes)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                        Err(source) => return Err(Fail::Io { path, source }),
                    },
                    Err(source) => return Err(Fail::Io { path, source }),
                }
            }
        };
        let Some((path, bytes)) = bytes else {
            self.cache.insert(config_path.to_string(), None);
            return Ok(None);
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            Fail::Invalid(yaml::ConfigError {
                origin: path.clone(),
                line: 0,
                column: 0,
                message: format!("not UTF-8 text ({e})"),
                hint: None,
            })
        })?;
        let loaded = parse_config(&path, text)?;
        self.cache
            .insert(config_path.to_string(), Some(loaded.clone()));
        Ok(Some(loaded))
    }
}
