//! Hydra's composition of a primary config from its defaults lists, as Hydra 1.3 does it
//! (`hydra/_internal/defaults_list.py`): `_self_`, config groups and options, packages
//! (`actor@actor_rollout_ref.actor`, `../optim@optim`, `# @package` headers, `_global_`),
//! `override` entries, options chosen by interpolation of another group's choice
//! (`critic@critic: ${model_engine}_critic`), and the group overrides of the command line
//! (`group=option`, `+group=option`, `~group`). Hydra's own `hydra/...` groups come from a
//! built-in copy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_yaml::Value as Yaml;

use super::tree::{self, Node};
use crate::config::yaml::{self, Seg, Source};
use crate::hydra::{Action, HydraValue, ParsedOverride};

/// Why a composition failed.
#[derive(Debug)]
pub enum Fail {
    /// A file could not be read.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file is not valid YAML, or not a config (located: file:line:column).
    Invalid(yaml::ConfigError),
    /// Hydra would refuse to compose (a missing option, a defaults entry that matches
    /// nothing, ...). The text follows Hydra's own message.
    Refused(String),
    /// A construct argus does not model (a defaults interpolation other than `${group}`).
    Unsupported(String),
}

/// Hydra's own groups (`hydra/...`) and their options, as hydra-core 1.3 ships them.
const HYDRA_GROUPS: &[(&str, &[&str], Option<&str>)] = &[
    ("hydra/output", &["default"], Some("default")),
    ("hydra/launcher", &["basic"], Some("basic")),
    ("hydra/sweeper", &["basic"], Some("basic")),
    ("hydra/help", &["default"], Some("default")),
    ("hydra/hydra_help", &["default"], Some("default")),
    (
        "hydra/hydra_logging",
        &["default", "disabled", "hydra_debug", "none"],
        Some("default"),
    ),
    (
        "hydra/job_logging",
        &["default", "disabled", "none", "stdout"],
        Some("default"),
    ),
    ("hydra/callbacks", &[], None),
    ("hydra/env", &["default"], Some("default")),
];

/// Hydra's own config node, before overrides.
const HYDRA_NODE: &str = include_str!("hydra_node.yaml");

#[derive(Debug, Clone, PartialEq)]
enum Choice {
    Name(String),
    Options(Vec<String>),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    SelfRef,
    Config(String),
    Group { group: String, choice: Choice },
}

/// One entry of a defaults list (Hydra's InputDefault).
#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    package: Option<String>,
    optional: bool,
    is_override: bool,
    external: bool,
    parent_base: String,
    parent_package: String,
    header: Option<String>,
}

impl Entry {
    fn new(kind: Kind, package: Option<String>) -> Entry {
        Entry {
            kind,
            package: package.map(|p| if p == "_here_" { String::new() } else { p }),
            optional: false,
            is_override: false,
            external: false,
            parent_base: String::new(),
            parent_package: String::new(),
            header: None,
        }
    }

    fn is_self(&self) -> bool {
        self.kind == Kind::SelfRef
    }

    fn update_parent(&mut self, base: &str, package: &str) {
        self.parent_base = base.to_string();
        self.parent_package = package.to_string();
        if let Some(p) = &self.package
            && p.contains("_group_")
        {
            self.package = Some(format!(
                "_global_.{}",
                p.replace("_group_", &self.default_package())
            ));
        }
    }

    fn raw_path(&self) -> &str {
        match &self.kind {
            Kind::Config(path) => path,
            Kind::Group { group, .. } => group,
            Kind::SelfRef => "",
        }
    }

    fn relative_group_path(&self) -> String {
        let path = self.raw_path().trim_start_matches('/');
        match &self.kind {
            Kind::Config(_) => path.rsplit_once('/').map_or("", |(d, _)| d).to_string(),
            _ => path.to_string(),
        }
    }

    fn group_path(&self) -> String {
        let absolute = self.raw_path().starts_with('/');
        let relative = self.relative_group_path();
        if absolute || self.parent_base.is_empty() {
            relative
        } else if relative.is_empty() {
            self.parent_base.clone()
        } else {
            format!("{}/{relative}", self.parent_base)
        }
    }

    fn name(&self) -> Option<String> {
        match &self.kind {
            Kind::Config(path) => Some(path.rsplit('/').next().unwrap_or(path).to_string()),
            Kind::Group {
                choice: Choice::Name(n),
                ..
            } => Some(n.clone()),
            _ => None,
        }
    }

    fn config_path(&self) -> String {
        match &self.kind {
            Kind::Config(path) => {
                let absolute = path.starts_with('/');
                let path = path.trim_start_matches('/');
                if absolute || self.parent_base.is_empty() {
                    path.to_string()
                } else {
                    format!("{}/{path}", self.parent_base)
                }
            }
            _ => format!("{}/{}", self.group_path(), self.name().unwrap_or_default()),
        }
    }

    fn default_package(&self) -> String {
        self.group_path().replace('/', ".")
    }

    fn final_package(&self, with_header: bool) -> String {
        let package = self
            .package
            .clone()
            .or_else(|| self.header.clone().filter(|_| with_header))
            .unwrap_or_else(|| self.relative_group_path().replace('/', "."));
        let joined = if self.parent_package.is_empty() {
            package
        } else if package.is_empty() {
            self.parent_package.clone()
        } else {
            format!("{}.{package}", self.parent_package)
        };
        match joined.rfind("_global_") {
            Some(i) => joined
                .get(i + "_global_".len() + 1..)
                .unwrap_or("")
                .to_string(),
            None => joined,
        }
    }

    /// `group` or `group@package`: what a command-line group override must name.
    fn override_key(&self) -> Option<String> {
        if !matches!(self.kind, Kind::Group { .. }) {
            return None;
        }
        let group = self.group_path();
        let default = self.default_package();
        let mut package = self.final_package(false);
        if default == package {
            return Some(group);
        }
        if package.is_empty() {
            package = "_global_".into();
        }
        Some(format!("{group}@{package}"))
    }
}

/// One loaded config file.
#[derive(Debug, Clone)]
struct Loaded {
    content: Node,
    defaults: Vec<Entry>,
    header: Option<String>,
}

/// A config file to merge, at a package.
#[derive(Debug)]
struct Item {
    config_path: String,
    package: String,
    override_key: Option<String>,
}

struct OverrideChoice {
    choice: Choice,
    external: bool,
    used: bool,
    containing: Option<String>,
}

/// The composer: Hydra's config repository over one directory, plus the group overrides.
pub struct Composer {
    root: PathBuf,
    cache: HashMap<String, Option<Loaded>>,
    choices: BTreeMap<String, OverrideChoice>,
    deletions: BTreeMap<String, (Option<String>, bool)>,
    appends: Vec<Entry>,
    known: BTreeMap<String, Option<String>>,
    known_per_group: BTreeMap<String, BTreeSet<String>>,
}

/// The composed config: the tree Hydra applies config overrides to.
pub struct Composed {
    pub tree: Node,
}

impl Composer {
    pub fn new(root: &Path) -> Composer {
        Composer {
            root: root.to_path_buf(),
            cache: HashMap::new(),
            choices: BTreeMap::new(),
            deletions: BTreeMap::new(),
            appends: Vec::new(),
            known: BTreeMap::new(),
            known_per_group: BTreeMap::new(),
        }
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
        self.inside(&self.root.join(group))
            .is_some_and(|p| p.is_dir())
    }

    /// `path` resolved (symlinks, `..`) if it stays inside the config dir.
    fn inside(&self, path: &Path) -> Option<PathBuf> {
        let resolved = std::fs::canonicalize(path).ok()?;
        let root = std::fs::canonicalize(&self.root).ok()?;
        resolved.starts_with(&root).then_some(resolved)
    }

    fn options(&self, group: &str) -> Vec<String> {
        if let Some((_, options, _)) = HYDRA_GROUPS.iter().find(|(g, _, _)| *g == group) {
            return options.iter().map(|o| o.to_string()).collect();
        }
        let mut out: Vec<String> = self
            .inside(&self.root.join(group))
            .and_then(|dir| std::fs::read_dir(dir).ok())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".yaml"))
                    .map(str::to_string)
            })
            .collect();
        out.sort();
        out
    }

    /// The primary config's file, if the config dir has it.
    pub fn primary_file(&self, name: &str) -> Option<PathBuf> {
        self.file_of(name).filter(|p| p.is_file())
    }

    fn file_of(&self, config_path: &str) -> Option<PathBuf> {
        let file = if config_path.ends_with(".yaml") {
            config_path.to_string()
        } else {
            format!("{config_path}.yaml")
        };
        self.inside(&self.root.join(file))
    }

    fn load(&mut self, config_path: &str) -> Result<Option<Loaded>, Fail> {
        if let Some(hit) = self.cache.get(config_path) {
            return Ok(hit.clone());
        }
        let unresolved = self.root.join(config_path);
        let Some(path) = self.file_of(config_path).filter(|p| p.is_file()) else {
            if std::fs::symlink_metadata(format!("{}.yaml", unresolved.display())).is_ok() {
                return Err(Fail::Refused(format!(
                    "'{config_path}' points outside the config directory {}",
                    self.root.display()
                )));
            }
            self.cache.insert(config_path.to_string(), None);
            return Ok(None);
        };
        let bytes = std::fs::read(&path).map_err(|source| Fail::Io {
            path: path.clone(),
            source,
        })?;
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

    /// Composes `primary` with the group overrides among `overrides`.
    pub fn compose(
        &mut self,
        primary: &str,
        group_overrides: &[ParsedOverride],
    ) -> Result<Composed, Fail> {
        self.take_overrides(group_overrides)?;
        let mut hydra = Entry::new(Kind::Config("hydra/config".into()), None);
        let mut main = Entry::new(Kind::Config(primary.to_string()), None);
        // Hydra's virtual root: [hydra/config, primary], expanded last to first.
        let main_items = self.expand(&mut main, true, 0, false)?;
        let hydra_items = self.expand_hydra(&mut hydra)?;
        self.ensure_used()?;
        let mut keys = BTreeSet::new();
        for item in hydra_items.iter().chain(&main_items) {
            if let Some(key) = &item.override_key
                && !keys.insert(key.clone())
            {
                return Err(Fail::Refused(format!(
                    "{key} appears more than once in the final defaults list"
                )));
            }
        }
        let mut tree = hydra_node();
        for item in &main_items {
            let Some(loaded) = self.load(&item.config_path)? else {
                continue;
            };
            let content = loaded.content.at_package(&item.package);
            tree::merge(&mut tree, content).map_err(|e| {
                Fail::Refused(format!(
                    "In '{}': {e} (raised while composing)",
                    item.config_path
                ))
            })?;
        }
        Ok(Composed { tree })
    }

    fn take_overrides(&mut self, overrides: &[ParsedOverride]) -> Result<(), Fail> {
        for o in overrides {
            let key = o.key_element();
            match o.action {
                Action::ForceAdd => {
                    return Err(Fail::Refused(format!(
                        "force-add of config groups is not supported: '{o}'"
                    )));
                }
                Action::Delete => {
                    let name = match &o.value {
                        None => None,
                        Some(HydraValue::Str(s)) => Some(s.clone()),
                        Some(_) => {
                            return Err(Fail::Refused(format!(
                                "Config group override deletion value must be a string: {o}"
                            )));
                        }
                    };
                    self.deletions.insert(key, (name, false));
                }
                Action::Add | Action::Set => {
                    let choice = match &o.value {
                        Some(HydraValue::Str(s)) => Choice::Name(s.clone()),
                        Some(HydraValue::List(items)) => Choice::Options(
                            items
                                .iter()
                                .map(|i| match i {
                                    HydraValue::Str(s) => Ok(s.clone()),
                                    _ => Err(Fail::Refused(format!(
                                        "Config group override options must be strings: {o}"
                                    ))),
                                })
                                .collect::<Result<_, _>>()?,
                        ),
                        _ => {
                            return Err(Fail::Refused(format!(
                                "Config group override must be a string or a list: {o}"
                            )));
                        }
                    };
                    if o.action == Action::Add {
                        let mut entry = Entry::new(
                            Kind::Group {
                                group: o.key.clone(),
                                choice,
                            },
                            o.package.clone(),
                        );
                        entry.external = true;
                        self.appends.push(entry);
                    } else {
                        self.choices.insert(
                            key,
                            OverrideChoice {
                                choice,
                                external: true,
                                used: false,
                                containing: None,
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn is_deleted(&mut self, entry: &Entry) -> bool {
        let Some(key) = entry.override_key() else {
            return false;
        };
        match self.deletions.get_mut(&key) {
            Some((name, used)) if name.is_none() || *name == entry.name() => {
                *used = true;
                true
            }
            _ => false,
        }
    }

    fn set_known_choice(&mut self, entry: &Entry) -> Result<(), Fail> {
        let Some(key) = entry.override_key() else {
            return Ok(());
        };
        let name = entry.name();
        match self.known.get(&key) {
            Some(prev) if *prev != name => {
                return Err(Fail::Refused(format!(
                    "Multiple values for {key}. To override a value use 'override {key}: {}'",
                    prev.clone().unwrap_or_else(|| "null".into())
                )));
            }
            Some(_) => {}
            None => {
                self.known.insert(key.clone(), name);
            }
        }
        self.known_per_group
            .entry(entry.group_path())
            .or_default()
            .insert(key);
        Ok(())
    }

    fn overridden(&mut self, entry: &Entry) -> Option<Choice> {
        let key = entry.override_key()?;
        let o = self.choices.get_mut(&key)?;
        o.used = true;
        Some(o.choice.clone())
    }

    /// Hydra's own config: its content is built in; its groups only need a valid option.
    fn expand_hydra(&mut self, hydra: &mut Entry) -> Result<Vec<Item>, Fail> {
        let mut entries: Vec<Entry> = HYDRA_GROUPS
            .iter()
            .map(|(group, _, default)| {
                let mut e = Entry::new(
                    Kind::Group {
                        group: group.trim_start_matches("hydra/").to_string(),
                        choice: default.map_or(Choice::Null, |d| Choice::Name(d.into())),
                    },
                    None,
                );
                e.update_parent("hydra", "hydra");
                e
            })
            .collect();
        hydra.header = Some("_global_.hydra".into());
        let mut items = Vec::new();
        for e in entries.iter_mut().rev() {
            if let Some(choice) = self.overridden(e)
                && let Kind::Group { choice: c, .. } = &mut e.kind
            {
                *c = choice;
            }
            if self.is_deleted(e) {
                continue;
            }
            self.set_known_choice(e)?;
            let group = e.group_path();
            match &e.kind {
                Kind::Group {
                    choice: Choice::Name(n),
                    ..
                } => {
                    let options = self.options(&group);
                    if !options.contains(n) {
                        return Err(Fail::Refused(not_found(&group, n, &options)));
                    }
                    items.push(Item {
                        config_path: format!("{group}/{n}"),
                        package: String::new(),
                        override_key: e.override_key(),
                    });
                }
                Kind::Group {
                    choice: Choice::Options(list),
                    ..
                } => {
                    let options = self.options(&group);
                    if let Some(bad) = list.iter().find(|n| !options.contains(n)) {
                        return Err(Fail::Refused(not_found(&group, bad, &options)));
                    }
                }
                _ => {}
            }
        }
        // The items only count for duplicate detection: the content is built in.
        Ok(items)
    }

    /// `interpolated`: the node is (inside) a defaults entry chosen by interpolation.
    fn expand(
        &mut self,
        node: &mut Entry,
        is_root: bool,
        depth: usize,
        interpolated: bool,
    ) -> Result<Vec<Item>, Fail> {
        if depth > 64 {
            return Err(Fail::Refused(format!(
                "the defaults lists nest too deep at '{}' (a cycle?)",
                node.config_path()
            )));
        }
        let missing = node.name().as_deref() == Some("???");
        if node.name().is_some() && !missing {
            let config_path = node.config_path();
            if let Some(loaded) = self.load(&config_path)? {
                node.header = loaded.header.clone();
            }
        }
        if self.is_deleted(node) {
            return Ok(Vec::new());
        }
        self.set_known_choice(node)?;
        let Some(_) = node.name() else {
            return Ok(Vec::new());
        };
        if missing {
            let key = node.override_key().unwrap_or_else(|| node.config_path());
            let options = self.options(&node.group_path());
            return Err(Fail::Refused(format!(
                "You must specify '{key}', e.g, {key}=<OPTION> (options: {})",
                options.join(", ")
            )));
        }
        let config_path = node.config_path();
        let group = node.group_path();
        if matches!(node.kind, Kind::Group { .. })
            && HYDRA_GROUPS.iter().any(|(g, _, _)| *g == group)
        {
            // One of Hydra's own groups chosen from this config: its content is Hydra's.
            let name = node.name().unwrap_or_default();
            let options = self.options(&group);
            if !options.contains(&name) {
                return Err(Fail::Refused(not_found(&group, &name, &options)));
            }
            return Ok(vec![Item {
                config_path,
                package: String::new(),
                override_key: node.override_key(),
            }]);
        }
        let Some(loaded) = self.load(&config_path)? else {
            if node.optional {
                return Ok(Vec::new());
            }
            return Err(Fail::Refused(match &node.kind {
                Kind::Group { .. } => not_found(
                    &node.group_path(),
                    &node.name().unwrap_or_default(),
                    &self.options(&node.group_path()),
                ),
                _ if is_root => format!("Cannot find primary config '{config_path}'"),
                _ => format!("Could not load '{config_path}'"),
            }));
        };
        let mut defaults = loaded.defaults.clone();
        if !defaults.is_empty() || (is_root && !self.appends.is_empty()) {
            validate_self(&mut defaults, &config_path)?;
        }
        if is_root {
            defaults.extend(self.appends.clone());
        }
        let base = node.group_path();
        let package = node.final_package(true);
        let mut seen_override: Option<String> = None;
        for d in defaults.iter_mut().filter(|d| !d.is_self()) {
            d.update_parent(&base, &package);
            if let Some(prev) = &seen_override
                && !(d.is_override || d.external)
            {
                return Err(Fail::Refused(format!(
                    "In {config_path}: Override '{prev}' is defined before '{}'. Overrides must be at the end of the defaults list",
                    d.override_key().unwrap_or_else(|| d.config_path())
                )));
            }
            if d.is_override {
                let key = d.override_key().unwrap_or_default();
                if interpolated {
                    return Err(Fail::Refused(format!(
                        "{config_path}: Default List Overrides are not allowed in the subtree of an in interpolated config group (override {key}={}).",
                        d.name().unwrap_or_else(|| "null".into())
                    )));
                }
                seen_override = Some(key.clone());
                if let Kind::Group { choice, .. } = &d.kind {
                    self.choices.entry(key).or_insert(OverrideChoice {
                        choice: choice.clone(),
                        external: false,
                        used: false,
                        containing: Some(config_path.clone()),
                    });
                }
            }
        }
        let mut children: Vec<Vec<Item>> = Vec::new();
        let mut deferred: Vec<(usize, Entry)> = Vec::new();
        for d in defaults.iter_mut().rev() {
            if d.is_self() {
                children.push(vec![Item {
                    config_path: config_path.clone(),
                    package: package.clone(),
                    override_key: None,
                }]);
                continue;
            }
            if d.is_override {
                continue;
            }
            d.update_parent(&base, &package);
            if let Some(choice) = self.overridden(d)
                && let Kind::Group { choice: c, .. } = &mut d.kind
            {
                *c = choice;
            }
            match d.kind.clone() {
                Kind::Group {
                    group,
                    choice: Choice::Options(list),
                } => {
                    for option in list.iter().rev() {
                        if option.contains("${") {
                            return Err(Fail::Unsupported(format!(
                                "In '{config_path}': an interpolated option in a list ({option})"
                            )));
                        }
                        let mut c = Entry::new(
                            Kind::Config(format!("{group}/{option}")),
                            d.package.clone(),
                        );
                        c.optional = d.optional;
                        c.update_parent(&base, &package);
                        children.push(self.expand(&mut c, false, depth + 1, interpolated)?);
                    }
                }
                _ => {
                    // Chosen by interpolation: expanded once its siblings' choices are known.
                    if d.raw_path().contains("${") || d.name().is_some_and(|n| n.contains("${")) {
                        deferred.push((children.len(), d.clone()));
                        children.push(Vec::new());
                        continue;
                    }
                    children.push(self.expand(d, false, depth + 1, interpolated)?);
                }
            }
        }
        // As Hydra: the interpolations read the choices known once every other entry of
        // this list is expanded (`model_engine=megatron` on the command line included).
        let known = self.known.clone();
        for (at, mut d) in deferred {
            resolve_interpolation(&mut d, &known, &config_path)?;
            d.update_parent(&base, &package);
            children[at] = self.expand(&mut d, false, depth + 1, true)?;
        }
        if children.is_empty() {
            return Ok(vec![Item {
                config_path,
                package,
                override_key: node.override_key(),
            }]);
        }
        children.reverse();
        Ok(children.into_iter().flatten().collect())
    }

    fn ensure_used(&self) -> Result<(), Fail> {
        for (key, o) in &self.choices {
            if o.used {
                continue;
            }
            let group = key.split('@').next().unwrap_or(key);
            let choices: Vec<&String> = self
                .known_per_group
                .get(group)
                .map(|s| s.iter().collect())
                .unwrap_or_default();
            let mut msg = match choices.as_slice() {
                [] => format!("Could not override '{key}'. No match in the defaults list."),
                [one] => format!("Could not override '{key}'. Did you mean to override {one}?"),
                many => format!(
                    "Could not override '{key}'. Did you mean to override one of {}?",
                    many.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            if let Some(path) = &o.containing {
                msg = format!("In '{path}': {msg}");
            }
            if o.external {
                let value = match &o.choice {
                    Choice::Name(n) => n.clone(),
                    Choice::Options(l) => format!("[{}]", l.join(",")),
                    Choice::Null => "null".into(),
                };
                msg.push_str(&format!(
                    " To append to your default list use +{key}={value}"
                ));
            }
            return Err(Fail::Refused(msg));
        }
        for (key, (name, used)) in &self.deletions {
            if !used {
                let desc = match name {
                    Some(n) => format!("{key}={n}"),
                    None => key.clone(),
                };
                return Err(Fail::Refused(format!(
                    "Could not delete '{desc}'. No match in the defaults list"
                )));
            }
        }
        Ok(())
    }
}

/// A defaults entry's `${key}` (in its option, or a config entry's path) replaced by the
/// option chosen for the group `key`, as Hydra resolves it against the known choices. A
/// key no choice has is Hydra's error; what OmegaConf would resolve otherwise (a resolver,
/// a nested or dotted key, a null choice) is not modelled.
fn resolve_interpolation(
    entry: &mut Entry,
    known: &BTreeMap<String, Option<String>>,
    config_path: &str,
) -> Result<(), Fail> {
    let text = match &entry.kind {
        Kind::Group {
            choice: Choice::Name(name),
            ..
        } => name.clone(),
        Kind::Config(path) => path.clone(),
        _ => return Ok(()),
    };
    let unsupported = || {
        Fail::Unsupported(format!(
            "In '{config_path}': the defaults entry '{}: {text}' chooses its option by an interpolation argus does not model",
            entry.raw_path()
        ))
    };
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(unsupported)?;
        let key = &after[..end];
        if key.is_empty() || key.contains(['$', '{', ':', '.', ' ']) {
            return Err(unsupported());
        }
        match known.get(key) {
            Some(Some(choice)) => out.push_str(choice),
            Some(None) => return Err(unsupported()),
            None => {
                let keys: Vec<&str> = known.keys().map(String::as_str).collect();
                return Err(Fail::Refused(format!(
                    "Error resolving interpolation '{text}', possible interpolation keys: {}",
                    keys.join(", ")
                )));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    match &mut entry.kind {
        Kind::Group { choice, .. } => *choice = Choice::Name(out),
        Kind::Config(path) => *path = out,
        Kind::SelfRef => {}
    }
    Ok(())
}

fn not_found(group: &str, name: &str, options: &[String]) -> String {
    let mut msg = format!("Could not find '{group}/{name}'");
    if !options.is_empty() {
        msg.push_str(&format!(" (options in '{group}': {})", options.join(", ")));
    }
    msg
}

fn validate_self(defaults: &mut Vec<Entry>, config_path: &str) -> Result<(), Fail> {
    let mut has_self = false;
    let mut has_non_override = false;
    for d in defaults.iter() {
        if !d.is_override {
            has_non_override = true;
        }
        if d.is_self() {
            if has_self {
                return Err(Fail::Refused(format!(
                    "Duplicate _self_ defined in {config_path}"
                )));
            }
            has_self = true;
        }
    }
    if (!has_self && has_non_override) || defaults.is_empty() {
        defaults.push(Entry::new(Kind::SelfRef, None));
    }
    Ok(())
}

fn hydra_node() -> Node {
    serde_yaml::from_str::<Yaml>(HYDRA_NODE)
        .map(|v| Node::from_yaml(&v))
        .unwrap_or_else(|_| Node::empty())
}

/// `# @package x` in the header (leading `# @key value` lines) makes x the absolute package.
fn package_header(text: &str) -> Result<Option<String>, String> {
    let head: String = text.chars().take(512).collect();
    for line in head.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(rest) = line.strip_prefix('#').map(str::trim_start) else {
            break;
        };
        if !rest.starts_with('@') {
            break;
        }
        let parts: Vec<&str> = rest
            .trim_start_matches('#')
            .split(' ')
            .filter(|p| !p.is_empty())
            .collect();
        match parts.as_slice() {
            [key, value] if *key == "@package" => {
                let value = value.trim();
                return Ok(Some(if value.is_empty() || value == "_global_" {
                    "_global_".to_string()
                } else if value.starts_with("_global_.") {
                    value.to_string()
                } else {
                    format!("_global_.{value}")
                }));
            }
            [_, _] => {}
            [_] | [] => return Err(format!("Expected header format: KEY VALUE, got '{rest}'")),
            _ => return Err(format!("Too many components in '{rest}'")),
        }
    }
    Ok(None)
}

fn parse_config(path: &Path, text: String) -> Result<Loaded, Fail> {
    let header = package_header(&text).map_err(|message| {
        Fail::Invalid(yaml::ConfigError {
            origin: path.to_path_buf(),
            line: 1,
            column: 1,
            message,
            hint: None,
        })
    })?;
    let source = Source::new(path, text);
    let mut doc: Yaml = yaml::parse(&source).map_err(Fail::Invalid)?;
    doc.apply_merge()
        .map_err(|e| Fail::Invalid(source.error_at(&[], e.to_string())))?;
    let mut map = match doc {
        Yaml::Null => serde_yaml::Mapping::new(),
        Yaml::Mapping(m) => m,
        _ => {
            return Err(Fail::Invalid(
                source.error_at(&[], "a Hydra config must be a mapping"),
            ));
        }
    };
    let defaults = match map.remove("defaults") {
        None => Vec::new(),
        Some(Yaml::Sequence(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                parse_entry(item).map_err(|m| {
                    Fail::Invalid(source.error_at(&[Seg::Key("defaults".into()), Seg::Index(i)], m))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(Fail::Invalid(source.error_at(
                &[Seg::Key("defaults".into())],
                "defaults must be a list",
            )));
        }
    };
    Ok(Loaded {
        content: Node::from_yaml(&Yaml::Mapping(map)),
        defaults,
        header,
    })
}

/// `_self_`, `path[@pkg]`, or `[optional ][override ]group[@pkg]: option | [options] | null`.
fn parse_entry(item: &Yaml) -> Result<Entry, String> {
    let split_package = |s: &str| -> (String, Option<String>) {
        match s.split_once('@') {
            Some((g, p)) => (
                g.to_string(),
                Some(p.split_once(':').map_or(p, |(p, _)| p).to_string()),
            ),
            None => (s.to_string(), None),
        }
    };
    match item {
        Yaml::String(s) if s == "_self_" => Ok(Entry::new(Kind::SelfRef, None)),
        Yaml::String(s) => {
            let (path, package) = split_package(s);
            if path == "_self_" {
                return Err("_self_@PACKAGE is not supported".into());
            }
            Ok(Entry::new(Kind::Config(path), package))
        }
        Yaml::Mapping(m) if m.len() == 1 => {
            let Some((Yaml::String(key), value)) = m.iter().next() else {
                return Err("a defaults entry's key must be a string".into());
            };
            let (group_words, package) = split_package(key);
            let words: Vec<&str> = group_words.split(' ').collect();
            let (group, keywords) = words.split_last().ok_or("a defaults entry has no group")?;
            let mut optional = false;
            let mut is_override = false;
            for w in keywords {
                match *w {
                    "optional" => optional = true,
                    "override" => is_override = true,
                    _ => break,
                }
            }
            let choice = match value {
                Yaml::Null => Choice::Null,
                Yaml::String(s) => Choice::Name(s.clone()),
                Yaml::Sequence(items) => Choice::Options(
                    items
                        .iter()
                        .map(|i| {
                            i.as_str().map(str::to_string).ok_or_else(|| {
                                "nested list items of a defaults entry must be strings".to_string()
                            })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                _ => return Err("a defaults entry's value must be a string, a list or null".into()),
            };
            let mut entry = Entry::new(
                Kind::Group {
                    group: group.to_string(),
                    choice,
                },
                package,
            );
            entry.optional = optional;
            entry.is_override = is_override;
            Ok(entry)
        }
        Yaml::Mapping(m) if m.is_empty() => {
            Err("a defaults entry is missing its group name".into())
        }
        Yaml::Mapping(_) => Err("too many keys in a defaults entry".into()),
        _ => Err("a defaults entry must be a string or a one-key mapping".into()),
    }
}
