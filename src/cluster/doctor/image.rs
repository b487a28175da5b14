//! `image`: the profile's image is the same image (by id) on every host. The reference is
//! the id `up` would bring everywhere: the one argus's own engine has, else the head's
//! host's (as `image::distribute` chooses its source).

use super::{Check, Status};
use crate::cluster::image::{build_flags_for, short_id};

/// Where the wanted id was seen.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub id: String,
    pub on: String,
    /// The cluster has one host, whose own id this is.
    pub alone: bool,
}

impl Wanted {
    /// ` (as on ...)` when the id was seen elsewhere than on the host itself.
    fn also(&self) -> String {
        if self.alone {
            String::new()
        } else {
            format!(" (as on {})", self.on)
        }
    }
}

/// The id `up` would distribute: this machine's engine's, else the first host's that has it.
pub fn wanted(local: Option<&str>, hosts: &[(String, Option<String>)]) -> Option<Wanted> {
    if let Some(id) = local {
        return Some(Wanted {
            id: id.to_string(),
            on: "this machine".into(),
            alone: false,
        });
    }
    hosts.iter().find_map(|(host, id)| {
        id.as_ref().map(|id| Wanted {
            id: id.clone(),
            on: format!("host {host}"),
            alone: hosts.len() == 1,
        })
    })
}

/// `image` of one host: what its engine has under `reference`.
pub fn check(
    reference: &str,
    here: &Result<Option<String>, String>,
    wanted: Option<&Wanted>,
) -> Check {
    let id = match here {
        Err(e) => {
            return Check {
                name: "image",
                status: Status::Unknown,
                seen: e.clone(),
                why: "the image could not be inspected".into(),
                fix: String::new(),
            };
        }
        Ok(id) => id,
    };
    match (id, wanted) {
        (Some(id), Some(w)) if *id == w.id => Check::ok(
            "image",
            format!("{reference} is {}{}", short_id(id), w.also()),
        ),
        (Some(id), Some(w)) => Check {
            name: "image",
            status: Status::Fail,
            seen: format!(
                "{reference} is {} here, {} on {}",
                short_id(id),
                short_id(&w.id),
                w.on
            ),
            why: "nodes created from different images run different Ray, Python or verl builds: Ray refuses nodes of another version, and verl's workers disagree".into(),
            fix: format!(
                "`argus up` replaces it with the image of {} (it copies that id to every host); or remove this host's tag (docker rmi {reference} on it) and let up bring the image",
                w.on
            ),
        },
        (Some(id), None) => Check::ok("image", format!("{reference} is {}", short_id(id))),
        (None, Some(w)) => Check {
            name: "image",
            status: Status::Warn,
            seen: format!("{reference} is not on this host"),
            why: "the probe cannot run here, so the checks that look inside the host are unknown".into(),
            fix: format!("`argus up` copies it here from {} (no registry needed)", w.on),
        },
        (None, None) => Check {
            name: "image",
            status: Status::Fail,
            seen: format!("{reference} is on no host and not on this machine"),
            why: "the cluster's containers cannot be created".into(),
            fix: format!(
                "build it here without a registry: argus image build{}",
                build_flags_for(reference)
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_that_differs_from_this_machines_is_named() {
        let hosts = vec![
            ("a".to_string(), Some("sha256:aaaa".to_string())),
            ("b".to_string(), Some("sha256:bbbb".to_string())),
        ];
        let w = wanted(Some("sha256:aaaa"), &hosts).unwrap();
        assert_eq!(
            check("r", &Ok(hosts[0].1.clone()), Some(&w)).status,
            Status::Ok
        );
        let c = check("r", &Ok(hosts[1].1.clone()), Some(&w));
        assert_eq!(c.status, Status::Fail);
        assert!(c.seen.contains("on this machine"), "{}", c.seen);
        assert_eq!(wanted(None, &hosts).unwrap().on, "host a");
        assert_eq!(check("r", &Ok(None), Some(&w)).status, Status::Warn);
        assert_eq!(check("r", &Ok(None), None).status, Status::Fail);
    }
}
