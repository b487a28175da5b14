//! Transferring: a tag where the id is already there, a pull where a registry serves it,
//! else one export teed into every lacking host's load, verified by the engines' own view.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ImportImageOptionsBuilder, RemoveImageOptionsBuilder,
    TagImageOptionsBuilder,
};
use futures_util::future::join_all;
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::super::skip_layers::{self, SkipLayers, without_layers};
use super::super::{one_image, short_id, split_tag};
use super::Engine;
use super::observe::{Found, Source, look};
use crate::exit::one_line;
use crate::ui::{Reporter, Task, human_bytes};

/// Chunks of the export buffered per host (the engine sends about 32 KiB at a time, so some
/// 8 MiB): enough slack that one host's hiccup does not stall the others at once, and the
/// bound beyond which the tee waits for the slowest host, however slow it is.
const CHANNEL_CHUNKS: usize = 256;
/// A load answers only once the whole archive is in: the request timeout must cover the
/// transfer of a large image over a slow link, not just a round trip.
const LOAD_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Tags the image `wanted`, already on the host, as `reference`.
pub(super) async fn retag(host: Engine<'_>, reference: &str, wanted: &str) -> bool {
    let (repo, tag) = split_tag(reference);
    let options = TagImageOptionsBuilder::new().repo(repo).tag(tag).build();
    match host.docker.tag_image(wanted, Some(options)).await {
        Ok(()) => {
            tracing::debug!(
                host = host.host,
                "{} was there under another name: tagged {reference}",
                short_id(wanted)
            );
            true
        }
        Err(e) => {
            tracing::debug!(host = host.host, "tag {reference}: {}", one_line(&e));
            false
        }
    }
}

/// Pulls `image` on one engine (`host` names it in progress and messages): the id of what
/// was pulled, or why nothing was.
pub async fn pull_on(
    host: &str,
    docker: &Docker,
    image: &str,
    reporter: &dyn Reporter,
) -> Result<String, String> {
    pull(Engine::new(host, docker), image, reporter)
        .await
        .map(|found| found.id)
}

/// Pulls `image` on one host, with the downloaded bytes as progress.
pub(super) async fn pull(
    engine: Engine<'_>,
    image: &str,
    reporter: &dyn Reporter,
) -> Result<Found, String> {
    let task = reporter.task(&format!("image on {}", engine.host));
    task.update(&format!("pulling {image}"));
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut stream = engine.docker.create_image(Some(options), None, None);
    let mut layers: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let mut last = Instant::now();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let (Some(id), Some(detail)) = (info.id, info.progress_detail)
                    && info.status.as_deref() == Some("Downloading")
                {
                    let size = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
                    layers.insert(id, (size(detail.current), size(detail.total)));
                }
                if last.elapsed() >= PROGRESS_EVERY {
                    let (done, total) = layers
                        .values()
                        .fold((0, 0), |(d, t), (ld, lt)| (d + ld, t + lt));
                    task.progress(done, (total > 0).then_some(total.max(done)));
                    last = Instant::now();
                }
            }
            Err(e) => {
                let reason = format!("pull: {}", one_line(&e));
                tracing::debug!(host = engine.host, "{reason}");
                task.fail(&reason);
                return Err(reason);
            }
        }
    }
    match look(engine.docker, image).await {
        Ok(Some(found)) => {
            task.done(&format!("pulled {}", short_id(&found.id)));
            Ok(found)
        }
        Ok(None) => {
            task.fail("pull ended without the image");
            Err("the pull ended without the image".into())
        }
        Err(e) => {
            let reason = format!("inspect after the pull: {}", one_line(&e));
            task.fail(&reason);
            Err(reason)
        }
    }
}

/// What one host was sent of the image, and what it was not (layers it had).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Streamed {
    pub(super) sent: u64,
    pub(super) skipped: u64,
}

impl Streamed {
    fn message(&self, from: &str) -> String {
        let sent = format!("{} from {from}", human_bytes(self.sent));
        match self.skipped {
            0 => sent,
            skipped => format!("{sent} ({} of layers already there)", human_bytes(skipped)),
        }
    }
}

/// Streams the image from `source` into every target in parallel, then verifies the id on
/// each: the bytes each received (and was spared), or why it did not get the image.
pub(super) async fn stream(
    image: &str,
    source: &Source<'_>,
    targets: &[Engine<'_>],
    reporter: &dyn Reporter,
) -> Vec<Result<Streamed, String>> {
    let from = source.engine.host;
    let total = source.found.size;
    let skips = join_all(
        targets
            .iter()
            .map(|t| skip_layers::for_engine(t.docker, t.host, &source.found.layers)),
    )
    .await;
    let mut sinks = Vec::with_capacity(targets.len());
    let mut loads = Vec::with_capacity(targets.len());
    for (target, skip) in targets.iter().zip(skips) {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        let (guard, gone) = oneshot::channel();
        sinks.push(Sink { tx, gone });
        let sent = Arc::new(AtomicU64::new(0));
        let skipped = skip.as_ref().map(SkipLayers::skipped).unwrap_or_default();
        let body = count(without_layers(receive(rx), skip), sent.clone());
        let task = reporter.task(&format!("image on {}", target.host));
        task.update(&format!("streaming from {from}"));
        tracing::debug!(host = target.host, from, image, "load");
        let docker = target.docker.clone().with_timeout(LOAD_TIMEOUT);
        loads.push(async move {
            let options = ImportImageOptionsBuilder::new().quiet(true).build();
            let response = docker.import_image_stream(options, body, None);
            let loaded = drive_load(response, &sent, &skipped, total, &*task, guard).await;
            let bytes = Streamed {
                sent: sent.load(Ordering::Relaxed),
                skipped: skipped.load(Ordering::Relaxed),
            };
            (task, loaded, bytes)
        });
    }
    tracing::debug!(from, image, hosts = targets.len(), "export");
    // One image: `docker save` of a name without a tag writes every tag of it, whose layers
    // a host may hold at other places in the stack than the wanted image's.
    let export = source.engine.docker.export_image(&one_image(image));
    let (exported, loads) = futures_util::join!(tee(export, sinks), join_all(loads));
    if let Err(e) = &exported {
        tracing::debug!(from, "export failed: {e}");
    }
    let export_failed = exported.err();
    join_all(
        targets
            .iter()
            .zip(loads)
            .map(|(target, (task, loaded, bytes))| {
                let export_failed = export_failed.as_deref();
                async move {
                    let result = verify(*target, image, source, loaded, bytes, export_failed).await;
                    match &result {
                        Ok(bytes) => task.done(&bytes.message(from)),
                        Err(reason) => task.fail(reason),
                    }
                    tracing::debug!(host = target.host, ?result, "streamed");
                    result
                }
            }),
    )
    .await
}

/// The engine's own view decides how a load went: one that errored after the whole image was
/// in is a success, and one that "succeeded" with another id is not.
async fn verify(
    target: Engine<'_>,
    image: &str,
    source: &Source<'_>,
    loaded: Result<(), String>,
    bytes: Streamed,
    export_failed: Option<&str>,
) -> Result<Streamed, String> {
    let wanted = &source.found.id;
    match (look(target.docker, image).await, loaded) {
        (Ok(Some(found)), _) if &found.id == wanted => Ok(bytes),
        (Ok(Some(found)), Ok(())) => Err(format!(
            "loaded {image} is {}, not {}",
            short_id(&found.id),
            short_id(wanted)
        )),
        (_, Err(e)) => Err(match export_failed {
            Some(export) => format!("export from {} failed: {export}", source.engine.host),
            None => format!("load: {e}"),
        }),
        (Ok(None), Ok(())) => Err(format!("the load ended without {image}")),
        (Err(e), Ok(())) => Err(format!("inspect after the load: {}", one_line(&e))),
    }
}

/// After a failed transfer: untag whatever this run left under the reference (a pulled or
/// loaded image of another id); a host's own earlier image is left as it was.
pub(super) async fn clean_up(host: Engine<'_>, image: &str, wanted: &str, previous: Option<&str>) {
    let Ok(Some(now)) = look(host.docker, image).await else {
        return;
    };
    if now.id == wanted || Some(now.id.as_str()) == previous {
        return;
    }
    let options = RemoveImageOptionsBuilder::new().build();
    match host.docker.remove_image(image, Some(options), None).await {
        Ok(_) => tracing::debug!(host = host.host, "untagged {image} ({})", short_id(&now.id)),
        Err(e) => tracing::warn!(host = host.host, "cannot untag {image}: {}", one_line(&e)),
    }
}

/// Consumes the load's answer, reporting the bytes sent so far; `_guard` tells the tee this
/// host is gone when the load ends, however it ends.
async fn drive_load<R>(
    response: R,
    sent: &AtomicU64,
    skipped: &AtomicU64,
    total: Option<u64>,
    task: &dyn Task,
    _guard: oneshot::Sender<()>,
) -> Result<(), String>
where
    R: Stream<Item = Result<bollard::models::BuildInfo, bollard::errors::Error>>,
{
    let mut response = pin!(response);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let progress = || {
        let done = sent
            .load(Ordering::Relaxed)
            .saturating_add(skipped.load(Ordering::Relaxed));
        task.progress(done, total.map(|t| t.max(done)));
    };
    let result = loop {
        tokio::select! {
            item = response.next() => match item {
                Some(Ok(info)) => {
                    if let Some(line) = info.stream.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
                        tracing::debug!("load: {line}");
                    }
                }
                Some(Err(e)) => break Err(one_line(&e)),
                None => break Ok(()),
            },
            _ = tick.tick() => progress(),
        }
    };
    progress();
    result
}

/// One host's end of the tee.
fn receive<T>(
    rx: mpsc::Receiver<Result<T, String>>,
) -> impl Stream<Item = Result<T, std::io::Error>> + Send + 'static
where
    T: Send + 'static,
{
    futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item.map_err(std::io::Error::other), rx))
    })
}

/// `body`, counting what it hands on.
fn count<T, E>(
    body: impl Stream<Item = Result<T, E>>,
    sent: Arc<AtomicU64>,
) -> impl Stream<Item = Result<T, E>>
where
    T: AsRef<[u8]>,
{
    body.inspect(move |item| {
        if let Ok(chunk) = item {
            sent.fetch_add(chunk.as_ref().len() as u64, Ordering::Relaxed);
        }
    })
}

/// One receiver of the tee: its channel, and a signal that fires when its consumer is gone.
struct Sink<T> {
    tx: mpsc::Sender<Result<T, String>>,
    gone: oneshot::Receiver<()>,
}

impl<T> Sink<T> {
    /// False when the consumer is gone (the sink is then dropped, never polled again).
    async fn send(&mut self, item: Result<T, String>) -> bool {
        tokio::select! {
            sent = self.tx.send(item) => sent.is_ok(),
            _ = &mut self.gone => false,
        }
    }
}

/// Feeds every chunk of `source` to every live sink, in order, reading the next chunk only
/// once every live sink has taken this one (bounded channels: the slowest paces the source).
/// A sink whose consumer is gone is dropped; the others go on. Returns the bytes read, or
/// the source's error (also sent to every sink, so their loads fail rather than end short).
async fn tee<T, E, S>(source: S, mut sinks: Vec<Sink<T>>) -> Result<u64, String>
where
    T: Clone + AsRef<[u8]>,
    E: std::error::Error,
    S: Stream<Item = Result<T, E>>,
{
    let mut source = pin!(source);
    let mut read = 0u64;
    while !sinks.is_empty() {
        match source.next().await {
            None => return Ok(read),
            Some(Ok(chunk)) => {
                read += chunk.as_ref().len() as u64;
                let sent = join_all(sinks.iter_mut().map(|s| s.send(Ok(chunk.clone())))).await;
                let before = sinks.len();
                sinks = sinks
                    .into_iter()
                    .zip(sent)
                    .filter_map(|(sink, ok)| ok.then_some(sink))
                    .collect();
                if sinks.len() < before {
                    tracing::debug!(left = sinks.len(), "a receiver of the image left");
                }
            }
            Some(Err(e)) => {
                let reason = one_line(&e);
                join_all(sinks.iter_mut().map(|s| s.send(Err(reason.clone())))).await;
                return Err(reason);
            }
        }
    }
    tracing::debug!(read, "no receiver left: export stopped");
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[derive(Debug, thiserror::Error)]
    #[error("disk on fire")]
    struct Broken;

    type Chunks = mpsc::Receiver<Result<Vec<u8>, String>>;

    fn sink() -> (Sink<Vec<u8>>, Chunks, oneshot::Sender<()>) {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        let (guard, gone) = oneshot::channel();
        (Sink { tx, gone }, rx, guard)
    }

    fn drain(rx: &mut Chunks, into: &mut Vec<u8>) {
        while let Ok(item) = rx.try_recv() {
            into.extend(item.expect("chunk"));
        }
    }

    #[tokio::test]
    async fn a_stalled_receiver_bounds_the_export_and_a_gone_one_is_dropped() {
        let chunks = 1000usize;
        let pulled = Arc::new(AtomicU64::new(0));
        let counter = pulled.clone();
        let source =
            futures_util::stream::iter((0..chunks).map(|i| Ok::<_, Broken>(vec![i as u8; 3])))
                .inspect(move |_| {
                    counter.fetch_add(1, Ordering::Relaxed);
                });
        let (fast, mut fast_rx, _fast_guard) = sink();
        let (stalled, stalled_rx, stalled_guard) = sink();
        let mut tee = pin!(tee(source, vec![fast, stalled]));
        let mut got = Vec::new();
        // The fast receiver drains everything it is given; the stalled one reads nothing.
        for _ in 0..50 {
            assert!(
                tee.as_mut().now_or_never().is_none(),
                "the tee waits for the stalled receiver"
            );
            drain(&mut fast_rx, &mut got);
            // Back to the runtime: tokio's cooperative budget would otherwise stall the sends.
            tokio::task::yield_now().await;
        }
        let read = pulled.load(Ordering::Relaxed) as usize;
        assert!(
            read <= CHANNEL_CHUNKS + 2,
            "{read} chunks read from the source with a receiver stalled: memory would grow"
        );
        assert_eq!(
            got.len(),
            read * 3,
            "the fast receiver got every chunk read so far"
        );

        // The stalled host's load ends (fails): the tee drops it and finishes for the other.
        drop(stalled_guard);
        let read = loop {
            drain(&mut fast_rx, &mut got);
            if let Some(result) = tee.as_mut().now_or_never() {
                break result.expect("the source is fine");
            }
            tokio::task::yield_now().await;
        };
        drain(&mut fast_rx, &mut got);
        assert_eq!(read, chunks as u64 * 3);
        let want: Vec<u8> = (0..chunks).flat_map(|i| vec![i as u8; 3]).collect();
        assert_eq!(got, want, "the remaining receiver got every byte, in order");
        drop(stalled_rx);
    }

    #[tokio::test]
    async fn every_receiver_gone_stops_the_export() {
        let pulled = Arc::new(AtomicU64::new(0));
        let counter = pulled.clone();
        let source = futures_util::stream::iter((0..1000).map(|_| Ok::<_, Broken>(vec![0u8; 1])))
            .inspect(move |_| {
                counter.fetch_add(1, Ordering::Relaxed);
            });
        let (a, rx_a, guard_a) = sink();
        drop((rx_a, guard_a));
        let read = tee(source, vec![a]).await.expect("no source error");
        assert!(read <= 1, "the export stopped at once: {read} bytes read");
        assert!(pulled.load(Ordering::Relaxed) <= 1);
    }

    #[tokio::test]
    async fn a_source_error_reaches_every_receiver() {
        let source = futures_util::stream::iter(vec![Ok(vec![1u8, 2]), Err(Broken)]);
        let (a, mut rx_a, _ga) = sink();
        let (b, mut rx_b, _gb) = sink();
        let result = tee(source, vec![a, b]).await;
        assert_eq!(result, Err("disk on fire".to_string()));
        for rx in [&mut rx_a, &mut rx_b] {
            assert_eq!(rx.recv().await, Some(Ok(vec![1, 2])));
            assert_eq!(rx.recv().await, Some(Err("disk on fire".to_string())));
            assert_eq!(rx.recv().await, None, "the channel closes after the error");
        }
    }
}
