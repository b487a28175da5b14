//! The check of override keys against the configs a verl snapshot carries. (Writing
//! values in Hydra's syntax lives in the leaf module `crate::hydra`.)

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml::Value;

/// Every dotted key of a composed config (intermediate keys included).
#[derive(Debug, Default)]
pub struct ConfigKeys {
    pub keys: BTreeSet<String>,
    /// Which file the keys came from (for messages).
    pub origin: String,
}

impl ConfigKeys {
    /// The keys verl's entrypoint accepts, read from the snapshot at `code_root`, if it
    /// carries verl's Hydra configs.
    pub fn for_entrypoint(code_root: &Path, sft: bool) -> Option<ConfigKeys> {
        let dir = code_root.join("verl/trainer/config");
        if !dir.is_dir() {
            return None;
        }
        let (primary, generated) = if sft {
            ("sft_trainer_engine.yaml", None)
        } else {
            ("ppo_trainer.yaml", Some("_generated_ppo_trainer.yaml"))
        };
        let mut keys = BTreeSet::new();
        let origin;
        if let Some(generated) = generated.map(|g| dir.join(g)).filter(|p| p.is_file()) {
            // verl ships the fully composed PPO config: no composition needed.
            flatten(&read_yaml(&generated)?, "", &mut keys);
            origin = generated.display().to_string();
        } else {
            let file = dir.join(primary);
            compose(&dir, &file, "", &mut keys, 0)?;
            origin = file.display().to_string();
        }
        Some(ConfigKeys { keys, origin })
    }

    /// None when `key` may be overridden; else the closest valid key.
    pub fn check(&self, key: &str) -> Result<(), Option<String>> {
        // `+key` adds and `++key` forces: no need to exist. `~key` deletes: must exist.
        if key.starts_with('+') {
            return Ok(());
        }
        let key = key.trim_start_matches('~');
        let key = key.split('@').next().unwrap_or(key);
        if self.keys.contains(key) {
            return Ok(());
        }
        // Inside a free-form map (a key whose value is `{}` or null): anything goes.
        let mut prefix = key;
        while let Some((parent, _)) = prefix.rsplit_once('.') {
            if self.keys.contains(&format!("{parent}.*")) {
                return Ok(());
            }
            prefix = parent;
        }
        let best = self
            .keys
            .iter()
            .filter(|k| !k.ends_with(".*"))
            .map(|k| (strsim::damerau_levenshtein(k, key), k))
            .min()
            .filter(|(distance, _)| *distance <= key.len().max(4) / 3 + 2)
            .map(|(_, k)| k.clone());
        Err(best)
    }
}

fn read_yaml(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_yaml::from_str(&text).ok()
}

fn flatten(value: &Value, prefix: &str, keys: &mut BTreeSet<String>) {
    let Value::Mapping(map) = value else { return };
    for (k, v) in map {
        let Some(k) = k.as_str() else { continue };
        if k == "defaults" && prefix.is_empty() {
            continue;
        }
        let key = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Mapping(m) if m.is_empty() => {
                keys.insert(format!("{key}.*"));
            }
            Value::Null => {
                keys.insert(format!("{key}.*"));
            }
            _ => {}
        }
        keys.insert(key.clone());
        flatten(v, &key, keys);
    }
}

/// Hydra's defaults list, one level at a time: `group@package: option` loads
/// `<dir>/<group>/<option>.yaml` at `package` (relative to the current package).
fn compose(
    dir: &Path,
    file: &Path,
    prefix: &str,
    keys: &mut BTreeSet<String>,
    depth: usize,
) -> Option<()> {
    if depth > 8 {
        return Some(());
    }
    let doc = read_yaml(file)?;
    let here = file.parent().unwrap_or(dir);
    if let Some(Value::Sequence(defaults)) = doc.get("defaults") {
        for entry in defaults {
            match entry {
                Value::String(name) if name == "_self_" => {}
                Value::String(name) => {
                    let _ = compose(
                        dir,
                        &here.join(format!("{name}.yaml")),
                        prefix,
                        keys,
                        depth + 1,
                    );
                }
                Value::Mapping(map) => {
                    for (group, option) in map {
                        let (Some(group), Some(option)) = (group.as_str(), option.as_str()) else {
                            continue;
                        };
                        let group = group.trim_start_matches("override ").trim();
                        let (group_path, package) = match group.split_once('@') {
                            Some((g, p)) => (g, p.to_string()),
                            None => (group, group.rsplit('/').next().unwrap_or(group).to_string()),
                        };
                        let package = package
                            .trim_start_matches("_global_")
                            .trim_start_matches('.');
                        let target = match (prefix.is_empty(), package.is_empty()) {
                            (_, true) => prefix.to_string(),
                            (true, false) => package.to_string(),
                            (false, false) => format!("{prefix}.{package}"),
                        };
                        // `../group` climbs out of the current group's folder, as in Hydra.
                        let path = here.join(group_path).join(format!("{option}.yaml"));
                        if !target.is_empty() {
                            keys.insert(target.clone());
                        }
                        let _ = compose(dir, &path, &target, keys, depth + 1);
                    }
                }
                _ => {}
            }
        }
    }
    let mut own = BTreeSet::new();
    flatten(&doc, "", &mut own);
    for key in own {
        keys.insert(if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        });
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compose_from_defaults_and_typos_get_a_suggestion() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("verl/trainer/config");
        std::fs::create_dir_all(config.join("model")).unwrap();
        std::fs::write(config.join("sft_trainer_engine.yaml"), "defaults:\n  - model@model: hf_model\n  - _self_\ndata:\n  train_files: x\n  extra: {}\ntrainer:\n  device: cuda\n").unwrap();
        std::fs::write(
            config.join("model/hf_model.yaml"),
            "path: null\nlora_rank: 0\n",
        )
        .unwrap();
        let keys = ConfigKeys::for_entrypoint(dir.path(), true).unwrap();
        assert!(keys.check("model.path").is_ok());
        assert!(keys.check("trainer.device").is_ok());
        assert!(
            keys.check("data.extra.anything").is_ok(),
            "inside an empty map"
        );
        assert!(keys.check("+brand.new=1").is_ok());
        assert_eq!(
            keys.check("trainer.devcie"),
            Err(Some("trainer.device".to_string()))
        );
        assert_eq!(
            keys.check("model.lora_rnak"),
            Err(Some("model.lora_rank".to_string()))
        );
    }
}
