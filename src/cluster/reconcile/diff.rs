//! The difference between what runs and what the plan asks for. Pure: a converged cluster
//! produces only `keep` actions, and a replaced head takes its workers with it.

use std::collections::HashMap;

use serde::Serialize;

use crate::cluster::observe::Observed;
use crate::cluster::plan::{ClusterPlan, Role};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    Create {
        name: String,
        host: String,
    },
    Recreate {
        name: String,
        host: String,
        reason: String,
    },
    Keep {
        name: String,
        host: String,
    },
    Remove {
        name: String,
        host: String,
        reason: String,
    },
}

impl Action {
    pub fn name(&self) -> &str {
        match self {
            Action::Create { name, .. }
            | Action::Recreate { name, .. }
            | Action::Keep { name, .. }
            | Action::Remove { name, .. } => name,
        }
    }
    pub fn host(&self) -> &str {
        match self {
            Action::Create { host, .. }
            | Action::Recreate { host, .. }
            | Action::Keep { host, .. }
            | Action::Remove { host, .. } => host,
        }
    }
    pub fn changes(&self) -> bool {
        !matches!(self, Action::Keep { .. })
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = |host: &str| {
            if host == crate::config::profile::LOCAL_HOST {
                String::new()
            } else {
                format!(" on {host}")
            }
        };
        match self {
            Action::Create { name, host } => write!(f, "create    {name}{}", on(host)),
            Action::Recreate { name, host, reason } => {
                write!(f, "recreate  {name}{} ({reason})", on(host))
            }
            Action::Keep { name, host } => write!(f, "keep      {name}{}", on(host)),
            Action::Remove { name, host, reason } => {
                write!(f, "remove    {name}{} ({reason})", on(host))
            }
        }
    }
}

/// What must change to go from `observed` to `plan`. Pure. A container is itself only on
/// the host the plan puts it on: one of the same name on another host is removed there.
pub fn diff(plan: &ClusterPlan, observed: &[Observed]) -> Vec<Action> {
    let by_key: HashMap<(&str, &str), &Observed> = observed
        .iter()
        .map(|o| ((o.host.as_str(), o.name.as_str()), o))
        .collect();
    let mut actions = Vec::new();
    let mut head_replaced = false;
    for want in &plan.containers {
        let name = want.name.clone();
        let host = want.host.clone();
        let action = match by_key.get(&(want.host.as_str(), want.name.as_str())) {
            None => Action::Create { name, host },
            Some(o) if o.spec.as_deref() != Some(want.spec_hash().as_str()) => Action::Recreate {
                name,
                host,
                reason: "spec changed".into(),
            },
            Some(o) if !matches!(o.state.as_str(), "running" | "restarting") => Action::Recreate {
                name,
                host,
                reason: format!("container is {}", o.state),
            },
            Some(_) if head_replaced => Action::Recreate {
                name,
                host,
                reason: "the head is replaced".into(),
            },
            Some(_) => Action::Keep { name, host },
        };
        if want.role == Role::Head && action.changes() {
            head_replaced = true;
        }
        actions.push(action);
    }
    for o in observed {
        let planned = plan
            .containers
            .iter()
            .find(|c| c.name == o.name)
            .map(|c| c.host.as_str());
        let reason = match planned {
            Some(host) if host == o.host => continue,
            Some(host) => format!("it belongs on host {host}"),
            None => "not in the profile".into(),
        };
        actions.push(Action::Remove {
            name: o.name.clone(),
            host: o.host.clone(),
            reason,
        });
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::{self, ContainerPlan, PlanInputs};
    use crate::config::LoadedProfile;

    fn plan() -> ClusterPlan {
        plan::plan(
            &LoadedProfile::load(None).unwrap(),
            &PlanInputs {
                image_id: "sha256:1".into(),
                ..Default::default()
            },
        )
    }

    fn running(c: &ContainerPlan) -> Observed {
        Observed {
            host: c.host.clone(),
            id: c.name.clone(),
            name: c.name.clone(),
            state: "running".into(),
            spec: Some(c.spec_hash()),
        }
    }

    #[test]
    fn converged_cluster_only_keeps() {
        let plan = plan();
        let observed: Vec<_> = plan.containers.iter().map(running).collect();
        assert!(diff(&plan, &observed).iter().all(|a| !a.changes()));
    }

    #[test]
    fn missing_exited_changed_and_extra_containers_are_acted_on() {
        let plan = plan();
        let mut observed: Vec<_> = plan.containers.iter().map(running).collect();
        observed.remove(2);
        observed[1].state = "exited".into();
        observed.push(Observed {
            host: "local".into(),
            id: "x".into(),
            name: "argus-local-old-0".into(),
            state: "running".into(),
            spec: None,
        });
        let actions = diff(&plan, &observed);
        assert_eq!(
            actions[0],
            Action::Keep {
                name: "argus-local-head".into(),
                host: "local".into(),
            }
        );
        assert_eq!(
            actions[1],
            Action::Recreate {
                name: "argus-local-gpu-0".into(),
                host: "local".into(),
                reason: "container is exited".into()
            }
        );
        assert_eq!(
            actions[2],
            Action::Create {
                name: "argus-local-gpu-1".into(),
                host: "local".into(),
            }
        );
        assert_eq!(
            actions[3],
            Action::Remove {
                name: "argus-local-old-0".into(),
                host: "local".into(),
                reason: "not in the profile".into()
            }
        );
    }

    #[test]
    fn a_replaced_head_takes_the_workers_with_it() {
        let plan = plan();
        let mut observed: Vec<_> = plan.containers.iter().map(running).collect();
        observed[0].spec = Some("old".into());
        let actions = diff(&plan, &observed);
        assert!(
            actions.iter().all(|a| matches!(a, Action::Recreate { .. })),
            "{actions:?}"
        );
    }
}
