//! Which of a job's verl checkpoints can be resumed from.
//!
//! verl (0.8.0, FSDP) saves step `N` as
//!
//! ```text
//! <default_local_dir>/global_step_N/
//!     actor/{model,optim,extra_state}_world_size_W_rank_R.pt   one of each per rank
//!     actor/fsdp_config.json, actor/huggingface/
//!     critic/...                                               the same, when there is a critic
//!     data.pt                                                  the dataloader's state
//! <default_local_dir>/latest_checkpointed_iteration.txt        N, written after all of it
//! ```
//!
//! verl 0.9's V1 trainer writes the same, and in its async modes (`trainer.v1.trainer_mode:
//! colocate_async | separate_async`) also `global_step_N/transfer_queue/` (the prompts in
//! flight), after `data.pt` and before the tracker. With `actor.checkpoint.async_save: true`
//! (0.8.0 and 0.9) verl writes no tracker file at all.
//!
//! `resume_mode=auto` trusts the tracker file. A checkpoint can still be unusable: a rank's
//! shard missing or empty (a host that died while its files were on their way to NFS, a
//! disk that filled), a `data.pt` missing, a `transfer_queue/` missing that the job's other
//! checkpoints have, or shards of another world size (verl's checkpoints only load with the
//! world size that wrote them). A step newer than the tracker is one verl was still
//! writing. Without a tracker, every checkpoint is judged by its files alone. [`choose`]
//! takes the newest complete checkpoint and says why each newer one was passed over.

use std::collections::{BTreeMap, BTreeSet};

use crate::fsx::{Dir, Kind};

/// verl's tracker file: the step of the last checkpoint it finished.
pub const TRACKER: &str = "latest_checkpointed_iteration.txt";

/// What is saved for every rank of a role, when saved at all (`model` always).
const KINDS: [&str; 3] = ["model", "optim", "extra_state"];
/// verl 0.9's async trainer modes' state of the prompts in flight, in a step's directory.
pub const TRANSFER_QUEUE: &str = "transfer_queue";

/// A checkpoint every rank of which is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complete {
    pub step: u64,
    /// The world size its shards were written with.
    pub world_size: u32,
    /// The roles saved (`actor`, `critic`).
    pub roles: Vec<String>,
    /// What was saved of each role (`actor/model`, `actor/optim`, ...).
    pub shards: BTreeSet<String>,
}

/// The newest complete checkpoint, and the newer steps passed over with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choice {
    pub chosen: Option<Complete>,
    pub skipped: Vec<(u64, String)>,
    /// What the tracker file names, if it names a step.
    pub tracker: Option<u64>,
}

impl Choice {
    /// Whether verl's `resume_mode=auto` would load the chosen checkpoint (the tracker
    /// names it): otherwise it must be named (`resume_mode=resume_path`).
    pub fn tracker_agrees(&self) -> bool {
        self.chosen.as_ref().map(|c| c.step) == self.tracker
    }
}

/// The checkpoints in `dir` (a job's `trainer.default_local_dir`, held open), newest
/// first, the first complete one chosen. `world_size`, when known, is the job's (its
/// nodes times GPUs per node): a checkpoint of another world size cannot be loaded.
pub fn choose(dir: &Dir, world_size: Option<u32>) -> std::io::Result<Choice> {
    let tracker = dir
        .read(TRACKER, 64)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.trim().parse::<u64>().ok());
    let mut steps: Vec<(u64, std::ffi::OsString, Kind)> = dir
        .entries()?
        .into_iter()
        .filter_map(|(name, kind)| {
            let step = name
                .to_str()?
                .strip_prefix("global_step_")?
                .parse::<u64>()
                .ok()?;
            Some((step, name, kind))
        })
        .collect();
    steps.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut choice = Choice {
        tracker,
        ..Choice::default()
    };
    // Every checkpoint is looked at: one missing a kind of shard another one has (the
    // optimizer's, with a world size of 1 a rank's whole share) is not complete either.
    let mut verdicts = Vec::new();
    for (step, name, kind) in steps {
        let verdict = if kind != Kind::Dir {
            Err("not a directory (a link or a file is never followed)".to_string())
        } else if tracker.is_some_and(|t| step > t) {
            Err(format!(
                "newer than the step {TRACKER} names: verl was still writing it"
            ))
        } else {
            dir.open_dir(&name)
                .map_err(|e| crate::exit::one_line(&e))
                .and_then(|held| complete(&held, step, world_size))
        };
        verdicts.push((step, verdict));
    }
    let saved: BTreeMap<String, u64> = verdicts
        .iter()
        .filter_map(|(step, v)| v.as_ref().ok().map(|c| (c, *step)))
        .flat_map(|(c, step)| c.shards.iter().map(move |s| (s.clone(), step)))
        .collect();
    for (step, verdict) in verdicts {
        let verdict = verdict.and_then(|found| {
            match saved
                .iter()
                .find(|(shard, _)| !found.shards.contains(*shard))
            {
                Some((shard, other)) if shard == TRANSFER_QUEUE => Err(format!(
                    "its {TRANSFER_QUEUE}/ is missing (global_step_{other} has it)"
                )),
                Some((shard, other)) => Err(format!(
                    "its {shard} shards are missing (global_step_{other} has them)"
                )),
                None => Ok(found),
            }
        });
        match verdict {
            Ok(found) => {
                choice.chosen = Some(found);
                break;
            }
            Err(why) => choice.skipped.push((step, why)),
        }
    }
    Ok(choice)
}

/// Whether the checkpoint held as `step_dir` is complete.
fn complete(step_dir: &Dir, step: u64, world_size: Option<u32>) -> Result<Complete, String> {
    // Opened as a regular file (a link or anything else is refused): non-empty.
    if !non_empty(step_dir, "data.pt") {
        return Err("data.pt (the dataloader's state) is missing or empty".into());
    }
    let entries = step_dir.entries().map_err(|e| e.to_string())?;
    let mut roles = Vec::new();
    let mut sizes = BTreeSet::new();
    let mut shards = BTreeSet::new();
    for (name, kind) in &entries {
        let Some(role) = name.to_str().filter(|_| *kind == Kind::Dir) else {
            continue;
        };
        let held = step_dir
            .open_dir(role)
            .map_err(|e| crate::exit::one_line(&e))?;
        if let Some((size, kinds)) = role_world_size(&held, role)? {
            roles.push(role.to_string());
            sizes.insert(size);
            shards.extend(kinds.into_iter().map(|k| format!("{role}/{k}")));
        }
    }
    roles.sort();
    // An async mode's prompts in flight: part of the checkpoint when there, and then
    // expected of every checkpoint of the job (checked against the others by `choose`).
    if entries
        .iter()
        .any(|(name, kind)| name == TRANSFER_QUEUE && *kind == Kind::Dir)
    {
        let held = step_dir
            .open_dir(TRANSFER_QUEUE)
            .map_err(|e| crate::exit::one_line(&e))?;
        if held.entries().map_err(|e| e.to_string())?.is_empty() {
            return Err(format!("{TRANSFER_QUEUE}/ is empty"));
        }
        shards.insert(TRANSFER_QUEUE.to_string());
    }
    let world = match sizes.into_iter().collect::<Vec<_>>().as_slice() {
        [] => return Err("no role (actor, critic) has model shards".into()),
        [one] => *one,
        many => {
            return Err(format!(
                "its roles were saved with different world sizes ({many:?})"
            ));
        }
    };
    if let Some(want) = world_size
        && want != world
    {
        return Err(format!(
            "saved with world size {world}, but the job runs {want} ranks (verl loads a checkpoint only with the world size that wrote it)"
        ));
    }
    Ok(Complete {
        step,
        world_size: world,
        roles,
        shards,
    })
}

/// The world size of one role's shards and the kinds saved, None when the directory holds
/// none (not a role); an error names the first shard missing or empty.
fn role_world_size(role_dir: &Dir, role: &str) -> Result<Option<(u32, Vec<&'static str>)>, String> {
    // kind -> world size -> ranks present
    let mut shards: BTreeMap<&str, BTreeMap<u32, BTreeSet<u32>>> = BTreeMap::new();
    for (name, kind) in role_dir.entries().map_err(|e| e.to_string())? {
        let Some(name) = name.to_str() else { continue };
        let Some((shard, world, rank)) = parse_shard(name) else {
            continue;
        };
        if kind != Kind::File || !non_empty(role_dir, name) {
            return Err(format!("{role}/{name} is empty or not a file"));
        }
        shards
            .entry(shard)
            .or_default()
            .entry(world)
            .or_default()
            .insert(rank);
    }
    if shards.is_empty() {
        return Ok(None);
    }
    let worlds: BTreeSet<u32> = shards.values().flat_map(|w| w.keys().copied()).collect();
    let [world] = worlds.into_iter().collect::<Vec<_>>()[..] else {
        return Err(format!("{role}/ holds shards of several world sizes"));
    };
    if !shards.contains_key("model") {
        return Err(format!("{role}/ has no model shards"));
    }
    for (shard, by_world) in &shards {
        let ranks = &by_world[&world];
        if let Some(missing) = (0..world).find(|r| !ranks.contains(r)) {
            return Err(format!(
                "{role}/{shard}_world_size_{world}_rank_{missing}.pt is missing (a rank's shard was never written)"
            ));
        }
    }
    Ok(Some((world, shards.into_keys().collect())))
}

/// `model_world_size_2_rank_1.pt` -> (`model`, 2, 1).
fn parse_shard(name: &str) -> Option<(&'static str, u32, u32)> {
    let rest = name.strip_suffix(".pt")?;
    let kind = KINDS
        .into_iter()
        .find(|k| rest.starts_with(&format!("{k}_world_size_")))?;
    let rest = rest.strip_prefix(kind)?.strip_prefix("_world_size_")?;
    let (world, rank) = rest.split_once("_rank_")?;
    let world: u32 = world.parse().ok().filter(|w| *w > 0)?;
    let rank: u32 = rank.parse().ok().filter(|r| *r < world)?;
    Some((kind, world, rank))
}

fn non_empty(dir: &Dir, name: &str) -> bool {
    dir.open_file(name)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.len() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// What verl 0.8.0 wrote for a 2-rank GRPO job on the built-in profile (the actor only).
    fn save(dir: &Path, step: u64, world: u32) {
        let actor = dir.join(format!("global_step_{step}/actor"));
        std::fs::create_dir_all(actor.join("huggingface")).unwrap();
        for rank in 0..world {
            for kind in KINDS {
                std::fs::write(
                    actor.join(format!("{kind}_world_size_{world}_rank_{rank}.pt")),
                    b"x",
                )
                .unwrap();
            }
        }
        std::fs::write(actor.join("fsdp_config.json"), b"{}").unwrap();
        std::fs::write(dir.join(format!("global_step_{step}/data.pt")), b"x").unwrap();
        std::fs::write(dir.join(TRACKER), step.to_string()).unwrap();
    }

    fn choice(dir: &Path, world: Option<u32>) -> Choice {
        choose(&Dir::root(dir).unwrap(), world).unwrap()
    }

    #[test]
    fn the_newest_complete_checkpoint_is_chosen_and_the_tracker_agrees() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), 2, 2);
        save(dir.path(), 4, 2);
        let c = choice(dir.path(), Some(2));
        assert_eq!(
            c.chosen,
            Some(Complete {
                step: 4,
                world_size: 2,
                roles: vec!["actor".into()],
                shards: ["actor/extra_state", "actor/model", "actor/optim"]
                    .map(String::from)
                    .into()
            })
        );
        assert!(c.tracker_agrees() && c.skipped.is_empty());
    }

    #[test]
    fn without_the_tracker_checkpoints_are_judged_by_their_files() {
        // `actor.checkpoint.async_save: true`: verl writes no tracker at all.
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), 2, 2);
        save(dir.path(), 4, 2);
        std::fs::remove_file(dir.path().join(TRACKER)).unwrap();
        std::fs::remove_file(dir.path().join("global_step_4/data.pt")).unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(
            (c.chosen.as_ref().map(|c| c.step), c.tracker),
            (Some(2), None)
        );
        assert!(c.skipped[0].1.contains("data.pt"), "{:?}", c.skipped);
        // Not what `resume_mode=auto` would load: the step is named to verl.
        assert!(!c.tracker_agrees());
        // A job killed while writing its first checkpoint has none.
        let first = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(first.path().join("global_step_2/actor")).unwrap();
        assert_eq!(choice(first.path(), Some(2)).chosen, None);
    }

    #[test]
    fn an_async_modes_transfer_queue_is_part_of_its_checkpoints() {
        // verl 0.9, trainer.v1.trainer_mode: colocate_async: every step has transfer_queue/.
        let dir = tempfile::tempdir().unwrap();
        for step in [2, 4] {
            save(dir.path(), step, 2);
            let tq = dir
                .path()
                .join(format!("global_step_{step}/{TRANSFER_QUEUE}"));
            std::fs::create_dir_all(&tq).unwrap();
            std::fs::write(tq.join("metadata.json"), b"{}").unwrap();
        }
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(4));
        assert!(c.chosen.unwrap().shards.contains(TRANSFER_QUEUE));
        // A step whose transfer_queue/ never came (the job died after data.pt) or came
        // empty is passed over for the one before.
        std::fs::remove_dir_all(dir.path().join("global_step_4/transfer_queue")).unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(2));
        assert_eq!(
            c.skipped,
            vec![(
                4,
                "its transfer_queue/ is missing (global_step_2 has it)".to_string()
            )]
        );
        std::fs::create_dir(dir.path().join("global_step_4/transfer_queue")).unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.skipped, vec![(4, "transfer_queue/ is empty".to_string())]);
    }

    #[test]
    fn a_kind_of_shard_missing_whole_is_missing_when_another_checkpoint_has_it() {
        // World size 1: the one rank's optimizer shard gone is the kind gone.
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), 2, 1);
        save(dir.path(), 4, 1);
        std::fs::remove_file(
            dir.path()
                .join("global_step_4/actor/optim_world_size_1_rank_0.pt"),
        )
        .unwrap();
        let c = choice(dir.path(), Some(1));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(2));
        assert_eq!(
            c.skipped,
            vec![(
                4,
                "its actor/optim shards are missing (global_step_2 has them)".to_string()
            )]
        );
        // Alone, a checkpoint saved without an optimizer is what the job saves.
        std::fs::remove_dir_all(dir.path().join("global_step_2")).unwrap();
        assert_eq!(choice(dir.path(), Some(1)).chosen.map(|c| c.step), Some(4));
    }

    #[test]
    fn a_missing_rank_an_empty_shard_or_data_pt_falls_back_to_the_one_before() {
        for (broken, why) in [
            (
                "actor/optim_world_size_2_rank_1.pt",
                "optim_world_size_2_rank_1.pt is missing",
            ),
            ("data.pt", "data.pt (the dataloader's state) is missing"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            save(dir.path(), 2, 2);
            save(dir.path(), 4, 2);
            std::fs::remove_file(dir.path().join("global_step_4").join(broken)).unwrap();
            let c = choice(dir.path(), Some(2));
            assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(2), "{broken}");
            assert!(c.skipped[0].1.contains(why), "{:?}", c.skipped);
            assert!(!c.tracker_agrees());
        }
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), 2, 2);
        save(dir.path(), 4, 2);
        std::fs::write(
            dir.path()
                .join("global_step_4/actor/model_world_size_2_rank_0.pt"),
            b"",
        )
        .unwrap();
        assert_eq!(choice(dir.path(), None).chosen.map(|c| c.step), Some(2));
    }

    #[test]
    fn a_step_beyond_the_tracker_another_world_size_or_a_link_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), 2, 2);
        save(dir.path(), 6, 4);
        save(dir.path(), 4, 2);
        // The tracker says 4: step 6 was still being written.
        std::fs::create_dir(dir.path().join("global_step_8")).unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(4));
        assert_eq!(c.skipped.len(), 2);
        assert!(c.skipped[0].1.contains("still writing"), "{:?}", c.skipped);
        std::fs::write(dir.path().join(TRACKER), "6").unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(4));
        assert!(
            c.skipped[1].1.contains("world size 4, but the job runs 2"),
            "{:?}",
            c.skipped
        );
        let other = tempfile::tempdir().unwrap();
        save(other.path(), 10, 2);
        std::os::unix::fs::symlink(
            other.path().join("global_step_10"),
            dir.path().join("global_step_10"),
        )
        .unwrap();
        std::fs::write(dir.path().join(TRACKER), "10").unwrap();
        let c = choice(dir.path(), Some(2));
        assert_eq!(c.chosen.as_ref().map(|c| c.step), Some(4));
        assert!(c.skipped[0].1.contains("never followed"), "{:?}", c.skipped);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(choice(empty.path(), None), Choice::default());
    }

    #[test]
    fn a_directory_swapped_after_it_was_opened_is_read_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("checkpoints");
        let outside = dir.path().join("outside");
        save(&ckpt, 3, 2);
        save(&outside, 900, 2);
        let held = Dir::root(&ckpt).unwrap();
        std::fs::rename(&ckpt, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, &ckpt).unwrap();
        let c = choose(&held, None).unwrap();
        assert_eq!((c.chosen.map(|c| c.step), c.tracker), (Some(3), Some(3)));
    }

    #[test]
    fn shard_names_parse_as_verl_writes_them() {
        assert_eq!(
            parse_shard("model_world_size_2_rank_1.pt"),
            Some(("model", 2, 1))
        );
        assert_eq!(
            parse_shard("extra_state_world_size_8_rank_7.pt"),
            Some(("extra_state", 8, 7))
        );
        for bad in [
            "model_world_size_2_rank_2.pt",
            "model_world_size_0_rank_0.pt",
            "model_world_size_2_rank_1",
            "fsdp_config.json",
            "model_world_size_x_rank_1.pt",
        ] {
            assert_eq!(parse_shard(bad), None, "{bad}");
        }
    }
}
