//! The stages around the job that touch the cluster: `up` (the image, built here when
//! absent and argus's own, then the cluster converged and ready) and `down`.

use std::time::Duration;

use super::record::StagePart;
use super::{Ctx, Error};
use crate::cluster::access;
use crate::cluster::image;
use crate::cluster::reconcile::{self, UpOptions};

/// What the up stage found.
pub struct Cluster {
    pub image_id: String,
    pub ray_version: String,
    pub note: String,
    /// Where `up`'s seconds went.
    pub parts: Vec<StagePart>,
}

pub async fn up(ctx: &Ctx<'_>) -> Result<Cluster, Error> {
    let profile = &ctx.loaded.profile;
    image::ensure_built(profile.docker.host.as_deref(), &profile.image, ctx.reporter).await?;
    let up = reconcile::up(
        ctx.loaded,
        &UpOptions {
            dry_run: false,
            timeout: Duration::from_secs(profile.ray.ready_timeout_s),
        },
        ctx.reporter,
    )
    .await?;
    let ray = access::ray_client(ctx.loaded)
        .await?
        .with_connect_retries(2);
    let ray_version = ray.ray_version().await.unwrap_or_else(|_| "unknown".into());
    let t = up.timings;
    let parts = [
        ("image", t.image),
        ("containers", t.containers),
        ("ray_ready", t.ray_ready),
    ]
    .map(|(name, seconds)| StagePart {
        name: name.into(),
        seconds,
    })
    .into();
    Ok(Cluster {
        parts,
        note: format!(
            "{} nodes, {} GPUs, ray {ray_version}",
            up.nodes.len(),
            up.gpus
        ),
        image_id: up.image_id,
        ray_version,
    })
}

pub async fn down(ctx: &Ctx<'_>) -> Result<String, Error> {
    reconcile::down(ctx.loaded, false, ctx.reporter).await?;
    Ok("cluster removed; shared data kept".into())
}
