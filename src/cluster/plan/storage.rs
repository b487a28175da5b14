//! The shared storage as the containers see it: a bind of the host's path, or an NFS
//! volume the engine mounts.

use super::{SharedMount, VolumePlan};
use crate::config::profile::{Profile, SharedStorage};

/// The volume to create (NFS only) and every container's mount of the shared storage, at
/// the profile's one container root ([`Profile::container_layout`]).
pub(super) fn shared(p: &Profile) -> (Option<VolumePlan>, SharedMount) {
    match &p.shared.storage {
        SharedStorage::HostPath(host) => (
            None,
            SharedMount::Bind {
                source: host.path().to_path_buf(),
                target: p.container_layout().mount().into_owned(),
            },
        ),
        SharedStorage::Nfs(nfs) => {
            let volume = VolumePlan {
                name: format!("{}-shared", p.name),
                server: nfs.server.to_string(),
                export: nfs.export.to_string(),
                options: nfs.options.as_ref().map(ToString::to_string),
            };
            let mount = SharedMount::Volume {
                name: volume.name.clone(),
                target: p.container_layout().mount().into_owned(),
            };
            (Some(volume), mount)
        }
    }
}
