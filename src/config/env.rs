//! Environment variables in profiles and JobSpecs: valid names, and the variables argus
//! sets itself, which a file may not override (the override would silently lose, or
//! silently break what argus promises).

pub const NAME_RULE: &str = "letters, digits and _, not starting with a digit";

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why a profile's `env` (injected into every container) may not set `name`, if it may not.
pub fn owned_in_containers(name: &str) -> Option<&'static str> {
    match name {
        "RAY_AUTH_MODE" => Some(
            "argus sets RAY_AUTH_MODE in every container from ray.auth (newer Ray turns token auth on by itself otherwise); set ray.auth instead",
        ),
        "RAY_AUTH_TOKEN" => Some(
            "argus passes the cluster's token into every container: from the variable ray.token_env names, else from the token file `argus up` keeps on this machine (never in a profile or on the shared storage)",
        ),
        "HF_HOME" => Some(
            "argus sets HF_HOME to <mount>/common/hf so every node shares the cache `argus prepare` fills",
        ),
        _ if name.starts_with("ARGUS_") => {
            Some("ARGUS_* variables are argus's own (ARGUS_CLUSTER, ARGUS_SHARED, ...)")
        }
        _ => None,
    }
}

/// Why a job's env (`env_vars`, `submit.runtime_env.env_vars`) may not set `name`.
pub fn owned_in_jobs(name: &str) -> Option<&'static str> {
    match name {
        "PYTHONPATH" => Some(
            "argus sets PYTHONPATH to the code snapshot, then user/code, then the image's; put extra code under <shared>/user/code",
        ),
        // Where the job's checkpoints go: argus sets it, a JobSpec may point it elsewhere
        // (a resumed custom job reads the checkpoints of the job it continues).
        // ARGUS_RESUMES names the job a resumed one continues (set by `--resume`).
        "ARGUS_CHECKPOINT_DIR" | "ARGUS_RESUMES" => None,
        _ if name.starts_with("ARGUS_") => Some(
            "ARGUS_* variables are argus's own (ARGUS_CODE_PATH, ARGUS_TRAIN_FILE, ARGUS_JOB_DIR, ...)",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_owned_variables() {
        assert!(valid_name("NCCL_DEBUG") && valid_name("_X1"));
        assert!(!valid_name("1X") && !valid_name("A-B") && !valid_name("") && !valid_name("A B"));
        assert!(owned_in_containers("HF_HOME").is_some());
        assert!(owned_in_containers("RAY_AUTH_MODE").is_some());
        assert!(owned_in_containers("ARGUS_SHARED").is_some());
        assert!(owned_in_containers("HF_ENDPOINT").is_none());
        assert!(owned_in_jobs("PYTHONPATH").is_some());
        assert!(owned_in_jobs("NCCL_DEBUG").is_none());
    }
}
