//! Hydra's composition of a primary config from its defaults lists, as Hydra 1.3 does it
//! (`hydra/_internal/defaults_list.py`): `_self_`, config groups and options, packages
//! (`actor@actor_rollout_ref.actor`, `../optim@optim`, `# @package` headers, `_global_`),
//! `override` entries, options chosen by interpolation of another group's choice
//! (`critic@critic: ${model_engine}_critic`), and the group overrides of the command line
//! (`group=option`, `+group=option`, `~group`). Hydra's own `hydra/...` groups come from a
//! built-in copy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

mod defaults;
mod files;

use defaults::{Choice, Entry, Kind, Loaded, hydra_node, resolve_interpolation, validate_self};

use super::tree::{self, Node};
use crate::config::yaml;
use crate::fsx::Dir;
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

/// The most a config file may hold: verl's largest is a few KiB, and a file that anyone
/// who can write the shared storage could swap must not eat the memory.
const READ_CAP: u64 = 4 << 20;

/// The composer: Hydra's config repository over one directory, plus the group overrides.
///
/// The directory sits in a code snapshot on the shared storage, which others can write:
/// it is held open ([`Dir`]) and every group and file below it is opened through that
/// handle, refusing a link, a FIFO or device, a second hard link or an oversized file
/// ([`crate::fsx::Unsafe`], in [`Fail::Io`]), never checked by path and then read.
pub struct Composer {
    /// None when the snapshot has no such directory (nothing is found in it).
    dir: Option<Dir>,
    /// What messages show for the directory.
    shown: PathBuf,
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
        self.take_list_overrides(&mut defaults, &config_path, &base, &package, interpolated)?;
        let mut children = self.expand_children(
            &mut defaults,
            &config_path,
            &base,
            &package,
            depth,
            interpolated,
        )?;
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

    /// The list's `override` entries taken as choices (they must come last, and never in
    /// a subtree chosen by interpolation).
    fn take_list_overrides(
        &mut self,
        defaults: &mut [Entry],
        config_path: &str,
        base: &str,
        package: &str,
        interpolated: bool,
    ) -> Result<(), Fail> {
        let mut seen_override: Option<String> = None;
        for d in defaults.iter_mut().filter(|d| !d.is_self()) {
            d.update_parent(base, package);
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
                        containing: Some(config_path.to_string()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Each entry of the list expanded, in the list's order; entries chosen by
    /// interpolation last, once their siblings' choices are known.
    fn expand_children(
        &mut self,
        defaults: &mut [Entry],
        config_path: &str,
        base: &str,
        package: &str,
        depth: usize,
        interpolated: bool,
    ) -> Result<Vec<Vec<Item>>, Fail> {
        let mut children: Vec<Vec<Item>> = Vec::new();
        let mut deferred: Vec<(usize, Entry)> = Vec::new();
        for d in defaults.iter_mut().rev() {
            if d.is_self() {
                children.push(vec![Item {
                    config_path: config_path.to_string(),
                    package: package.to_string(),
                    override_key: None,
                }]);
                continue;
            }
            if d.is_override {
                continue;
            }
            d.update_parent(base, package);
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
                        c.update_parent(base, package);
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
            resolve_interpolation(&mut d, &known, config_path)?;
            d.update_parent(base, package);
            children[at] = self.expand(&mut d, false, depth + 1, true)?;
        }
        Ok(children)
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

/// The file of a config path: `name.yaml` (a path already ending in `.yaml` kept).
fn yaml_file(config_path: &str) -> String {
    if config_path.ends_with(".yaml") {
        config_path.to_string()
    } else {
        format!("{config_path}.yaml")
    }
}

fn not_found(group: &str, name: &str, options: &[String]) -> String {
    let mut msg = format!("Could not find '{group}/{name}'");
    if !options.is_empty() {
        msg.push_str(&format!(" (options in '{group}': {})", options.join(", ")));
    }
    msg
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::files::normalise;
    use crate::fsx::Unsafe;
    use std::time::Duration;

    use super::*;
    use crate::exit::{Classify, Exit};
    use crate::submit::override_check::{self, CONFIG_DIR, Outcome};

    /// A snapshot at `root` whose config dir has a primary config with a relative group
    /// (`../optim@optim`), as verl's.
    fn snapshot(root: &Path, marker: &str) {
        let c = root.join(CONFIG_DIR);
        for (path, text) in [
            (
                "ppo_trainer.yaml".to_string(),
                "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - _self_\ntrainer:\n  nnodes: 1\n".to_string(),
            ),
            (
                "actor/dp_actor.yaml".into(),
                "defaults:\n  - ../optim@optim: fsdp\n  - _self_\nstrategy: fsdp\n".into(),
            ),
            ("optim/fsdp.yaml".into(), format!("{marker}: 1\n")),
        ] {
            let file = c.join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(file, text).expect("write");
        }
    }

    fn composed(root: &Path) -> Result<Node, Fail> {
        Composer::open(root, CONFIG_DIR)?
            .compose("ppo_trainer", &[])
            .map(|c| c.tree)
    }

    fn has(tree: &Node, key: &str) -> bool {
        let mut keys = Vec::new();
        tree.keys("", &mut keys);
        keys.iter().any(|k| k == key)
    }

    /// The I/O failure of a composition that must have failed on one.
    fn io_failure(result: Result<Node, Fail>) -> std::io::Error {
        match result {
            Err(Fail::Io { source, .. }) => source,
            Err(other) => panic!("not an I/O failure: {other:?}"),
            Ok(_) => panic!("composed"),
        }
    }

    #[test]
    fn relative_groups_resolve_inside_the_config_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let tree = composed(dir.path()).expect("composes");
        assert!(has(&tree, "actor_rollout_ref.actor.optim.lr"));
        assert!(has(&tree, "actor_rollout_ref.actor.strategy"));
        assert_eq!(
            normalise("actor/../optim/fsdp"),
            Some(vec!["optim", "fsdp"])
        );
        assert_eq!(normalise("./a//b"), Some(vec!["a", "b"]));
        assert_eq!(normalise("actor/../../x"), None);
    }

    #[test]
    fn a_defaults_entry_climbing_out_of_the_config_dir_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let c = dir.path().join(CONFIG_DIR);
        std::fs::write(dir.path().join("verl/trainer/secret.yaml"), "x: 1\n").expect("write");
        std::fs::write(
            c.join("ppo_trainer.yaml"),
            "defaults:\n  - ../../trainer/secret\n  - _self_\n",
        )
        .expect("write");
        match composed(dir.path()) {
            Err(Fail::Refused(m)) => assert!(m.contains("points outside"), "{m}"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("composed"),
        }
    }

    #[test]
    fn a_fifo_as_the_primary_config_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let file = dir.path().join(CONFIG_DIR).join("ppo_trainer.yaml");
        std::fs::remove_file(&file).expect("rm");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &file,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .expect("mkfifo");
        let root = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(io_failure(composed(&root)));
        });
        let refused = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the FIFO blocked the composition");
        assert!(
            matches!(Unsafe::of(&refused), Some(Unsafe::NotFile { .. })),
            "{refused}"
        );
        // The whole check: bad input (2), not a hang, not a silent "not checked".
        let root = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(override_check::check(&root, "ppo_trainer", &[], 0));
        });
        let e = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the FIFO blocked the check")
            .expect_err("refused");
        assert_eq!(e.exit(), Exit::Usage, "{e}");
        assert!(e.to_string().contains("ppo_trainer.yaml"), "{e}");
    }

    #[test]
    fn a_config_linked_to_a_file_outside_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("fsdp.yaml"), "stolen: 1\n").expect("write");
        let file = dir.path().join(CONFIG_DIR).join("optim/fsdp.yaml");
        std::fs::remove_file(&file).expect("rm");
        std::os::unix::fs::symlink(outside.path().join("fsdp.yaml"), &file).expect("symlink");
        let refused = io_failure(composed(dir.path()));
        assert!(
            matches!(Unsafe::of(&refused), Some(Unsafe::Link { .. })),
            "{refused}"
        );
        let e = override_check::check(dir.path(), "ppo_trainer", &[], 0).expect_err("refused");
        assert_eq!(e.exit(), Exit::Usage, "{e}");
    }

    #[test]
    fn a_group_dir_linked_outside_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("fsdp.yaml"), "stolen: 1\n").expect("write");
        let optim = dir.path().join(CONFIG_DIR).join("optim");
        std::fs::remove_dir_all(&optim).expect("rm");
        std::os::unix::fs::symlink(outside.path(), &optim).expect("symlink");
        let refused = io_failure(composed(dir.path()));
        assert!(
            matches!(Unsafe::of(&refused), Some(Unsafe::Link { .. })),
            "{refused}"
        );
    }

    #[test]
    fn an_oversized_config_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "lr");
        let file = dir.path().join(CONFIG_DIR).join("ppo_trainer.yaml");
        let mut text = b"trainer:\n  nnodes: 1\n".to_vec();
        text.resize(READ_CAP as usize + 1, b'\n');
        std::fs::write(&file, text).expect("write");
        let refused = io_failure(composed(dir.path()));
        assert!(
            matches!(Unsafe::of(&refused), Some(Unsafe::TooLarge { .. })),
            "{refused}"
        );
    }

    #[test]
    fn a_config_dir_swapped_after_it_was_opened_is_still_the_one_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        snapshot(dir.path(), "real");
        let outside = tempfile::tempdir().expect("tempdir");
        snapshot(outside.path(), "stolen");
        let mut composer = Composer::open(dir.path(), CONFIG_DIR).expect("opens");
        // Someone who can write the snapshot swaps its config dir for a link elsewhere.
        let config = dir.path().join(CONFIG_DIR);
        let moved = dir.path().join("verl/trainer/moved");
        std::fs::rename(&config, &moved).expect("rename");
        std::os::unix::fs::symlink(outside.path().join(CONFIG_DIR), &config).expect("symlink");
        assert!(composer.primary_file("ppo_trainer").is_some());
        assert!(composer.group_exists("optim"));
        let tree = composer.compose("ppo_trainer", &[]).expect("composes").tree;
        assert!(has(&tree, "actor_rollout_ref.actor.optim.real"));
        assert!(!has(&tree, "actor_rollout_ref.actor.optim.stolen"));
    }

    #[test]
    fn a_missing_config_dir_or_file_is_not_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outcome = override_check::check(dir.path(), "ppo_trainer", &[], 0).expect("ok");
        assert!(matches!(outcome, Outcome::NotChecked { .. }), "{outcome:?}");
        snapshot(dir.path(), "lr");
        let composer = Composer::open(dir.path(), CONFIG_DIR).expect("opens");
        assert!(composer.primary_file("nope").is_none());
        assert!(!composer.group_exists("nope"));
        assert!(!composer.group_exists("../../trainer"));
        // A directory where a config file would be is not a config (as Hydra sees it).
        std::fs::create_dir(dir.path().join(CONFIG_DIR).join("sft_trainer.yaml")).expect("mkdir");
        assert!(composer.primary_file("sft_trainer").is_none());
    }
}
