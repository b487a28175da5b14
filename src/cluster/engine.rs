//! One host's engine as the Slurm back end drives it from that host (a node step, the
//! epilog): connected once, then asked for what a node step does (bring the image, start
//! this host's containers of a plan, remove containers by cluster or Slurm job). Callers
//! outside `cluster` never see bollard.

use std::path::Path;

use bollard::Docker;

use super::Error;
use super::plan::ClusterPlan;
use crate::ui::Reporter;

/// A connected Docker Engine of one host.
#[derive(Clone)]
pub struct NodeEngine {
    docker: Docker,
}

impl From<&Docker> for NodeEngine {
    fn from(docker: &Docker) -> Self {
        Self {
            docker: docker.clone(),
        }
    }
}

impl From<&NodeEngine> for NodeEngine {
    fn from(engine: &NodeEngine) -> Self {
        engine.clone()
    }
}

impl NodeEngine {
    /// The engine at `endpoint` (None: DOCKER_HOST, else the local socket).
    pub async fn connect(endpoint: Option<&str>) -> Result<Self, Error> {
        Ok(Self {
            docker: super::docker::connect(endpoint).await?,
        })
    }

    /// The engine of a profile's host.
    pub async fn connect_host(host: &crate::config::profile::ClusterHost) -> Result<Self, Error> {
        Ok(Self {
            docker: super::docker::connect_host(host).await?,
        })
    }

    /// True when the engine has image `id`.
    pub async fn has_image(&self, id: &str) -> bool {
        super::node::has_image(&self.docker, id).await
    }

    /// Pulls `reference` (`me` names this host in messages); the id pulled.
    pub async fn pull(
        &self,
        me: &str,
        reference: &str,
        reporter: &dyn Reporter,
    ) -> Result<String, String> {
        super::image::pull_on(me, &self.docker, reference, reporter).await
    }

    /// See [`super::node::load_archive`].
    pub async fn load_archive(
        &self,
        reference: &str,
        id: &str,
        archive: &Path,
    ) -> Result<Option<u64>, Error> {
        super::node::load_archive(&self.docker, reference, id, archive).await
    }

    /// Creates and starts this host's containers of the plan; their names.
    pub async fn start_on(
        &self,
        plan: &ClusterPlan,
        host: &str,
        reporter: &dyn Reporter,
    ) -> Result<Vec<String>, Error> {
        super::node::start_on(&self.docker, plan, host, reporter).await
    }

    /// Removes the containers of cluster `cluster`; their names.
    pub async fn remove_cluster(&self, cluster: &str) -> Result<Vec<String>, Error> {
        super::node::remove_cluster(&self.docker, cluster).await
    }

    /// The containers of Slurm jobs: (name, Slurm job id).
    pub async fn slurm_containers(&self) -> Result<Vec<(String, u64)>, Error> {
        super::node::slurm_containers(&self.docker).await
    }

    /// Removes container `name`.
    pub async fn remove(&self, name: &str) -> Result<(), Error> {
        super::node::remove(&self.docker, name).await
    }

    /// The containers carrying `label` (`key=value`).
    pub async fn containers_labelled(
        &self,
        label: &str,
    ) -> Result<Vec<bollard::models::ContainerSummary>, Error> {
        super::docker::containers_labelled(&self.docker, label).await
    }
}
