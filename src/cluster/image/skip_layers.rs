//! An image archive without the layers the receiving engine already has.
//!
//! `docker save` on the classic image store writes one of two layouts. Up to Docker 24 each
//! layer is `<v1 id>/layer.tar` beside `<v1 id>/json` (directories in the order of their
//! names), then `manifest.json`. From Docker 25 the archive is an OCI image layout: each layer
//! is the blob `blobs/sha256/<hex>` of its diff id `sha256:<hex>` (the uncompressed tar is the
//! blob), beside the config, the manifest, `index.json` and a `manifest.json` naming those
//! paths (moby's `image/tarexport/save.go`). Either way `docker load` unpacks the archive and
//! registers a layer only when its chain id is not in the engine's layer store yet: a layer
//! it has is never opened (moby's `image/tarexport/load.go`). So the archive may leave out
//! every layer the receiving engine has, and the load makes the same image.
//!
//! Which layer an entry holds is read from the archive itself. In the OCI layout a blob is
//! named by its content's hash, so `blobs/sha256/<hex>` of a layer's diff id is that layer. In
//! the older layout a directory's name is its v1 id, the SHA-256 of its `json` with `id` (and,
//! below the top layer, `os`) dropped, `layer_id` (the chain id) and `parent` (as a digest)
//! added, keys sorted (moby's `v1.CreateID`); a directory whose name is that hash for one of
//! the engine's chain ids holds a layer the engine has. Nothing else is left out, and every
//! byte that is sent is the export's own.
//!
//! Nothing is skipped (the archive passes whole) for an image with two equal layers (`docker
//! save` stores or links one for both, see [`duplicate_layers`]), or for an engine on the
//! containerd image store (its load wants every blob, see [`engine_layers`]).
//!
//! The tar stream is read, not rewritten: headers (ustar names, PAX `path` and `size`, GNU
//! long names) are parsed only to know where each entry starts and ends, which the `tar`
//! crate's blocking reader cannot tell a byte stream that must pass on unchanged.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bollard::Docker;
use bollard::query_parameters::ListImagesOptionsBuilder;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::value::RawValue;

use super::tar_header::{BLOCK, Located, locate, long_name, not_followed, pax_records};
use crate::digest::sha256_hex;

/// The largest entry read whole before it is passed on: a layer's `json` (a few KiB) or an
/// extended header. Anything larger where one of those is expected passes unread.
const MAX_HELD: u64 = 1 << 20;
/// Image inspections at once when listing an engine's layers.
const INSPECT_AT_ONCE: usize = 8;

/// The chain ids of a stack of layers, bottom first: the first layer's diff id, then
/// `sha256(previous chain id + " " + diff id)` (the OCI image spec's ChainID).
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut chains: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let chain = match chains.last() {
            None => diff.clone(),
            Some(below) => format!(
                "sha256:{}",
                sha256_hex(format!("{below} {diff}").as_bytes())
            ),
        };
        chains.push(chain);
    }
    chains
}

/// True when an image's layers repeat (`docker save` then links one `layer.tar` to another,
/// and leaving the linked one out would break the link).
pub fn duplicate_layers(diff_ids: &[String]) -> bool {
    let mut seen = HashSet::new();
    !diff_ids.iter().all(|d| seen.insert(d))
}

/// Which of `wanted` (chain ids) are layers of some image on the engine; None when none
/// is, or when its load is not known to skip a layer it has (not Docker's engine, or on the
/// containerd image store).
pub async fn engine_layers(
    docker: &Docker,
    wanted: &[String],
) -> Result<Option<HashSet<String>>, bollard::errors::Error> {
    // Only Docker's own engine is known to skip a layer it has: Podman's load refuses an
    // archive with a layer missing, and so may the containerd image store.
    let docker_engine = crate::cluster::docker::is_dockers_engine(docker).await?;
    let info = docker.info().await?;
    let containerd = info.driver_status.iter().flatten().any(|pair| {
        pair.first().is_some_and(|k| k == "driver-type")
            && pair.get(1).is_some_and(|v| v.contains("containerd"))
    });
    if !docker_engine || containerd {
        return Ok(None);
    }
    let options = ListImagesOptionsBuilder::new().all(true).build();
    let images = docker.list_images(Some(options)).await?;
    let inspected: Vec<_> =
        futures_util::stream::iter(images.iter().map(|i| docker.inspect_image(&i.id)))
            .buffer_unordered(INSPECT_AT_ONCE)
            .collect()
            .await;
    let mut chains = HashSet::new();
    for image in inspected {
        // An image removed since the listing has no layers to offer.
        let Ok(image) = image else { continue };
        let layers = image.root_fs.and_then(|r| r.layers).unwrap_or_default();
        chains.extend(
            chain_ids(&layers)
                .into_iter()
                .filter(|c| wanted.contains(c)),
        );
    }
    Ok((!chains.is_empty()).then_some(chains))
}

/// What to leave out of an archive of the image of `diff_ids` for the engine `docker` (`host`
/// in logs): the layers it has; None when nothing can be (see [`engine_layers`] and
/// [`duplicate_layers`]) or its layers cannot be listed.
pub async fn for_engine(docker: &Docker, host: &str, diff_ids: &[String]) -> Option<SkipLayers> {
    if duplicate_layers(diff_ids) {
        return None;
    }
    let mine = chain_ids(diff_ids);
    // Only the image's own layers are looked for (each directory is hashed once per
    // candidate), not every layer the engine holds.
    match engine_layers(docker, &mine).await {
        Ok(shared) => {
            let shared = shared?;
            tracing::debug!(
                host,
                shared = shared.len(),
                of = mine.len(),
                "layers already there"
            );
            Some(SkipLayers::new(diff_ids, shared))
        }
        Err(e) => {
            tracing::debug!(
                host,
                "cannot list its layers: {}",
                crate::exit::one_line(&e)
            );
            None
        }
    }
}

/// Passes an image archive on, leaving out the layers the engine has.
pub struct SkipLayers {
    /// The chain ids of the layers the engine has.
    chains: HashSet<String>,
    /// The blob names (`<hex>` of the diff id) of those layers, for the OCI layout.
    blobs: HashSet<String>,
    state: State,
    /// Read but not passed on yet: extended headers, the current header, an entry held whole.
    held: Vec<u8>,
    /// The headers of the layer being left out, passed on only if the stream ends inside it.
    dropping: Vec<u8>,
    /// Where the current header starts in `held` (extended headers before it).
    header_at: usize,
    /// From extended headers, for the next entry.
    next_path: Option<String>,
    next_size: Option<u64>,
    /// Directories holding a layer the engine has.
    have: HashSet<String>,
    skipped: Arc<AtomicU64>,
}

enum State {
    /// Reading a header block into `held`.
    Header,
    /// Passing this many more bytes.
    Pass(u64),
    /// Leaving out this many more bytes.
    Drop(u64),
    /// Reading an entry whole into `held`: this many bytes of it left, its data's size.
    Hold { kind: Held, left: u64, size: u64 },
    /// The rest passes unread: the archive ended, or was not what was expected.
    Through,
}

#[derive(Clone)]
enum Held {
    /// A layer's `json`, in directory `dir`.
    Json { dir: String },
    /// A PAX extended header for the next entry.
    Pax,
    /// A GNU long name for the next entry.
    LongName,
}

impl SkipLayers {
    /// For an image of `diff_ids` (bottom first) on an engine holding the layers of chain
    /// ids `held`; with two equal layers nothing is left out (see [`duplicate_layers`]).
    pub fn new(diff_ids: &[String], held: HashSet<String>) -> Self {
        let held = if duplicate_layers(diff_ids) {
            HashSet::new()
        } else {
            held
        };
        let blobs = diff_ids
            .iter()
            .zip(chain_ids(diff_ids))
            .filter(|(_, chain)| held.contains(chain))
            .filter_map(|(diff, _)| diff.strip_prefix("sha256:").map(str::to_string))
            .collect();
        Self {
            chains: held,
            blobs,
            state: State::Header,
            held: Vec::new(),
            dropping: Vec::new(),
            header_at: 0,
            next_path: None,
            next_size: None,
            have: HashSet::new(),
            skipped: Arc::default(),
        }
    }

    /// The bytes of the layers left out so far (their `layer.tar`s' sizes).
    pub fn skipped(&self) -> Arc<AtomicU64> {
        self.skipped.clone()
    }

    /// The next piece of the archive in; what to pass on, in order.
    pub fn feed(&mut self, chunk: &Bytes) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut pos = 0;
        // The start of a run of `chunk` being passed on as it is.
        let mut run: Option<usize> = None;
        let end_run = |run: &mut Option<usize>, out: &mut Vec<Bytes>, pos: usize| {
            if let Some(start) = run.take()
                && start < pos
            {
                out.push(chunk.slice(start..pos));
            }
        };
        while pos < chunk.len() {
            let available = (chunk.len() - pos) as u64;
            match &mut self.state {
                State::Through => {
                    run.get_or_insert(pos);
                    pos = chunk.len();
                }
                State::Pass(left) => {
                    let n = (*left).min(available);
                    run.get_or_insert(pos);
                    pos += n as usize;
                    *left -= n;
                    if *left == 0 {
                        self.state = State::Header;
                    }
                }
                State::Drop(left) => {
                    end_run(&mut run, &mut out, pos);
                    let n = (*left).min(available);
                    pos += n as usize;
                    *left -= n;
                    if *left == 0 {
                        self.state = State::Header;
                        self.dropping.clear();
                    }
                }
                State::Header => {
                    end_run(&mut run, &mut out, pos);
                    let want = BLOCK - (self.held.len() - self.header_at);
                    let n = want.min(chunk.len() - pos);
                    self.held.extend_from_slice(&chunk[pos..pos + n]);
                    pos += n;
                    if self.held.len() - self.header_at == BLOCK {
                        self.on_header(&mut out);
                    }
                }
                State::Hold { left, .. } => {
                    end_run(&mut run, &mut out, pos);
                    let n = (*left).min(available) as usize;
                    self.held.extend_from_slice(&chunk[pos..pos + n]);
                    pos += n;
                    *left -= n as u64;
                    if *left == 0 {
                        self.on_held(&mut out);
                    }
                }
            }
        }
        end_run(&mut run, &mut out, pos);
        out
    }

    /// At the end of the stream: whatever is still held (an archive cut short passes as it
    /// came, for the engine to refuse).
    ///
    /// A stream that ends inside a layer being left out ends with that layer's header: the
    /// engine then sees an archive cut short (as it would have), not one that ended cleanly
    /// without the layer.
    pub fn finish(&mut self) -> Option<Bytes> {
        let mut rest = match self.state {
            State::Drop(_) => std::mem::take(&mut self.dropping),
            _ => Vec::new(),
        };
        rest.append(&mut self.held);
        self.state = State::Through;
        (!rest.is_empty()).then(|| Bytes::from(rest))
    }

    fn flush(&mut self, out: &mut Vec<Bytes>) {
        if !self.held.is_empty() {
            out.push(Bytes::from(std::mem::take(&mut self.held)));
        }
        self.header_at = 0;
    }

    /// Anything unexpected: pass the rest as it is.
    fn through(&mut self, out: &mut Vec<Bytes>) {
        self.flush(out);
        self.state = State::Through;
    }

    fn on_header(&mut self, out: &mut Vec<Bytes>) {
        let header: [u8; BLOCK] = match self.held[self.header_at..].try_into() {
            Ok(h) => h,
            Err(_) => return self.through(out),
        };
        if header.iter().all(|&b| b == 0) {
            // The end of the archive.
            return self.through(out);
        }
        // An entry whose size cannot be read passes with the rest, unread.
        let (path, size) = (self.next_path.take(), self.next_size.take());
        let Some(Located { name, size, padded }) = locate(&header, path, size) else {
            return self.through(out);
        };
        let held = |kind| State::Hold {
            kind,
            left: padded,
            size,
        };
        match header[156] {
            // One extended header per entry is plenty; a chain of them is not held.
            b'x' | b'L' if padded > MAX_HELD || self.header_at > 0 => self.through(out),
            _ if not_followed(&header) => self.through(out),
            b'x' => self.state = held(Held::Pax),
            b'L' => self.state = held(Held::LongName),
            b'0' | 0 => match layer_entry(&name) {
                Some((dir, "json")) if padded <= MAX_HELD => {
                    self.state = held(Held::Json {
                        dir: dir.to_string(),
                    });
                }
                Some((dir, "layer.tar")) if self.have.contains(dir) => {
                    tracing::debug!(dir, size, "left out: the engine has this layer");
                    self.leave_out(size, padded);
                }
                _ => match blob_name(&name) {
                    Some(hex) if self.blobs.contains(hex) => {
                        tracing::debug!(blob = hex, size, "left out: the engine has this layer");
                        self.leave_out(size, padded);
                    }
                    _ => self.pass(out, padded),
                },
            },
            _ => self.pass(out, padded),
        }
    }

    /// Leaves out the entry whose header is held (its data `padded` bytes, `size` of them
    /// the layer's).
    fn leave_out(&mut self, size: u64, padded: u64) {
        self.skipped.fetch_add(size, Ordering::Relaxed);
        self.header_at = 0;
        if padded == 0 {
            self.held.clear();
            self.state = State::Header;
        } else {
            self.dropping = std::mem::take(&mut self.held);
            self.state = State::Drop(padded);
        }
    }

    fn pass(&mut self, out: &mut Vec<Bytes>, padded: u64) {
        self.flush(out);
        self.state = if padded == 0 {
            State::Header
        } else {
            State::Pass(padded)
        };
    }

    fn on_held(&mut self, out: &mut Vec<Bytes>) {
        let State::Hold { kind, size, .. } = &self.state else {
            return;
        };
        let (kind, size) = (kind.clone(), *size as usize);
        let data_at = self.header_at + BLOCK;
        let data = &self.held[data_at..data_at + size];
        match kind {
            Held::Json { dir } => {
                if holds_one_of(&dir, data, &self.chains) {
                    self.have.insert(dir);
                }
                self.flush(out);
                self.state = State::Header;
            }
            Held::Pax => match pax_records(data) {
                Some((path, size)) => {
                    self.next_path = path.or(self.next_path.take());
                    self.next_size = size.or(self.next_size);
                    self.header_at = self.held.len();
                    self.state = State::Header;
                }
                None => self.through(out),
            },
            Held::LongName => {
                self.next_path = Some(long_name(data));
                self.header_at = self.held.len();
                self.state = State::Header;
            }
        }
    }
}

/// `stream` with the layers of `skip` left out (all of it when `skip` is None).
pub fn without_layers<S, E>(
    stream: S,
    skip: Option<SkipLayers>,
) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<Bytes, E>>,
{
    let queue: VecDeque<Result<Bytes, E>> = VecDeque::new();
    futures_util::stream::unfold(
        (Box::pin(stream), skip, queue, false),
        |(mut stream, mut skip, mut queue, mut ended)| async move {
            loop {
                if let Some(item) = queue.pop_front() {
                    return Some((item, (stream, skip, queue, ended)));
                }
                if ended {
                    return None;
                }
                match (stream.next().await, skip.as_mut()) {
                    (Some(Ok(chunk)), Some(skip)) => {
                        queue.extend(skip.feed(&chunk).into_iter().map(Ok))
                    }
                    (Some(item), None) => queue.push_back(item),
                    (Some(Err(e)), Some(skip)) => {
                        queue.extend(skip.finish().map(Ok));
                        queue.push_back(Err(e));
                        ended = true;
                    }
                    (None, skip) => {
                        queue.extend(skip.and_then(SkipLayers::finish).map(Ok));
                        ended = true;
                    }
                }
            }
        },
    )
}

/// `<dir>/<file>` where `dir` is a v1 id (64 lower-case hex digits).
fn layer_entry(name: &str) -> Option<(&str, &str)> {
    let (dir, file) = name.trim_start_matches("./").split_once('/')?;
    is_sha256_hex(dir).then_some((dir, file))
}

/// `<hex>` of an entry `blobs/sha256/<hex>` (the OCI layout's blobs).
pub(super) fn blob_name(name: &str) -> Option<&str> {
    let hex = name
        .trim_start_matches("./")
        .strip_prefix("blobs/sha256/")?;
    is_sha256_hex(hex).then_some(hex)
}

/// 64 lower-case hex digits, as a SHA-256 digest is written in an archive's names.
fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True when directory `dir`, whose layer's `json` is `json`, holds one of `chains`.
fn holds_one_of(dir: &str, json: &[u8], chains: &HashSet<String>) -> bool {
    let Ok(fields) = serde_json::from_slice::<BTreeMap<String, Box<RawValue>>>(json) else {
        return false;
    };
    let parent = match fields.get("parent") {
        Some(p) => match serde_json::from_str::<String>(p.get()) {
            Ok(hex) => Some(format!("\"sha256:{hex}\"")),
            Err(_) => return false,
        },
        None => None,
    };
    let quoted: Vec<String> = chains.iter().map(|c| format!("\"{c}\"")).collect();
    // Below the top layer `os` was set after the id was made; the top layer had it before.
    [true, false].into_iter().any(|drop_os| {
        let mut fields: BTreeMap<&str, &str> = fields
            .iter()
            .filter(|(k, _)| match k.as_str() {
                "id" | "parent" => false,
                "os" => !drop_os,
                _ => true,
            })
            .map(|(k, v)| (k.as_str(), v.get()))
            .collect();
        if let Some(parent) = &parent {
            fields.insert("parent", parent);
        }
        quoted.iter().any(|chain| {
            fields.insert("layer_id", chain);
            sha256_hex(go_object(&fields).as_bytes()) == dir
        })
    })
}

/// A JSON object as Go's `json.Marshal` writes a `map[string]*json.RawMessage`: keys sorted,
/// no spaces, the values as they are.
fn go_object(fields: &BTreeMap<&str, &str>) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::Value::from(*k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

#[cfg(test)]
mod tests {
    use super::super::tar_header::{entry, pax};
    use super::*;

    /// A layer's `json` below the top, as Docker 20.10's `docker save` wrote it for the
    /// verl image's first layer (the Ray image), and the v1 id it is named by.
    const LOWER_JSON: &str = r#"{"id":"cbd99c9b5288e2c4250853a610b269a4ea812f27a8e59670122f541232f90245","created":"1970-01-01T00:00:00Z","container_config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"os":"linux"}"#;
    const LOWER_DIR: &str = "cbd99c9b5288e2c4250853a610b269a4ea812f27a8e59670122f541232f90245";
    const LOWER_CHAIN: &str =
        "sha256:9db3230d61a47c02fa649d6fe30f094b0f76eb429dc057980dd905eed7ca8694";

    /// The image's diff ids: the lower layer's (its chain id too), then the top one's.
    fn diffs() -> Vec<String> {
        vec![
            LOWER_CHAIN.to_string(),
            format!("sha256:{}", "9".repeat(64)),
        ]
    }

    /// For an engine holding the lower layer.
    fn engine_with_lower() -> SkipLayers {
        SkipLayers::new(&diffs(), [LOWER_CHAIN.to_string()].into())
    }

    #[test]
    fn a_directory_is_known_by_its_v1_id() {
        let chains: HashSet<String> = [LOWER_CHAIN.to_string()].into();
        assert!(holds_one_of(LOWER_DIR, LOWER_JSON.as_bytes(), &chains));
        let other: HashSet<String> = [format!("sha256:{}", "0".repeat(64))].into();
        assert!(!holds_one_of(LOWER_DIR, LOWER_JSON.as_bytes(), &other));
        // The same json under another name is not that layer.
        let renamed = LOWER_DIR.replace('c', "d");
        assert!(!holds_one_of(&renamed, LOWER_JSON.as_bytes(), &chains));
        assert!(!holds_one_of(LOWER_DIR, b"not json", &chains));
    }

    #[test]
    fn chain_ids_follow_the_oci_spec() {
        let diffs = vec![
            "sha256:9db3230d61a47c02fa649d6fe30f094b0f76eb429dc057980dd905eed7ca8694".to_string(),
            "sha256:6b43fa4852f2697942a17e9afb153874ca42155b1ec4a5a7a0c5cb2fe9e12f4a".to_string(),
        ];
        let chains = chain_ids(&diffs);
        assert_eq!(chains[0], diffs[0]);
        let expect = format!(
            "sha256:{}",
            sha256_hex(format!("{} {}", diffs[0], diffs[1]).as_bytes())
        );
        assert_eq!(chains[1], expect);
        assert!(!duplicate_layers(&diffs));
        assert!(duplicate_layers(&[
            diffs[0].clone(),
            diffs[1].clone(),
            diffs[0].clone()
        ]));
    }

    /// An archive of two layers, the lower one the engine's: (the archive, what a load
    /// needs of it, the lower layer's size).
    fn archive() -> (Vec<u8>, Vec<u8>, usize) {
        let lower = vec![7u8; 3000];
        let upper = vec![9u8; 700];
        let top_dir = "2".repeat(64);
        let mut keep = Vec::new();
        keep.extend(entry(&format!("{LOWER_DIR}/"), b'5', b""));
        keep.extend(entry(&format!("{LOWER_DIR}/VERSION"), b'0', b"1.0"));
        keep.extend(entry(
            &format!("{LOWER_DIR}/json"),
            b'0',
            LOWER_JSON.as_bytes(),
        ));
        let dropped = entry(&format!("{LOWER_DIR}/layer.tar"), b'0', &lower);
        let mut tail = Vec::new();
        tail.extend(entry(&format!("{top_dir}/json"), b'0', b"{\"id\":\"x\"}"));
        // The top layer's name comes through a PAX header, as Go writes long or odd names.
        tail.extend(pax(&[("path", &format!("{top_dir}/layer.tar"))]));
        tail.extend(entry("ignored-by-pax", b'0', &upper));
        tail.extend(entry("manifest.json", b'0', b"[]"));
        with_and_without(keep, &dropped, tail, lower.len())
    }

    /// (`keep`, `dropped`, `tail` and the archive's end; the same without `dropped`; the
    /// size of the layer in `dropped`).
    fn with_and_without(
        mut keep: Vec<u8>,
        dropped: &[u8],
        mut tail: Vec<u8>,
        size: usize,
    ) -> (Vec<u8>, Vec<u8>, usize) {
        tail.extend([0u8; 2 * BLOCK]);
        let mut whole = keep.clone();
        whole.extend(dropped);
        whole.extend(&tail);
        keep.extend(tail);
        (whole, keep, size)
    }

    fn run(skip: &mut SkipLayers, bytes: &[u8], piece: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            for b in skip.feed(&Bytes::copy_from_slice(chunk)) {
                out.extend_from_slice(&b);
            }
        }
        if let Some(b) = skip.finish() {
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn the_engines_layers_are_left_out_whatever_the_chunking() {
        let (whole, keep, lower) = archive();
        for piece in [1, 7, 511, 512, 513, 4096, whole.len()] {
            let mut skip = engine_with_lower();
            let counter = skip.skipped();
            assert_eq!(run(&mut skip, &whole, piece), keep, "chunks of {piece}");
            assert_eq!(counter.load(Ordering::Relaxed), lower as u64);
        }
    }

    #[test]
    fn nothing_is_left_out_for_an_engine_without_the_layers() {
        let (whole, _, _) = archive();
        for piece in [1, 513, whole.len()] {
            let other = [format!("sha256:{}", "0".repeat(64))].into();
            let mut skip = SkipLayers::new(&diffs(), other);
            assert_eq!(run(&mut skip, &whole, piece), whole);
            assert_eq!(skip.skipped().load(Ordering::Relaxed), 0);
        }
    }

    /// An archive as Docker 25 and later write it (an OCI image layout, the layers as blobs
    /// named by their diff ids, `archive.Tar`'s order): (the archive, what a load needs of
    /// it, the lower layer's size).
    fn oci_archive() -> (Vec<u8>, Vec<u8>, usize) {
        let lower = vec![7u8; 3000];
        let blob = |hex: &str| format!("blobs/sha256/{hex}");
        let lower_hex = LOWER_CHAIN.trim_start_matches("sha256:");
        let mut keep = Vec::new();
        keep.extend(entry("blobs/", b'5', b""));
        keep.extend(entry("blobs/sha256/", b'5', b""));
        keep.extend(entry(&blob(&"0".repeat(64)), b'0', b"{\"rootfs\":{}}"));
        let dropped = entry(&blob(lower_hex), b'0', &lower);
        let mut tail = Vec::new();
        // The top layer's blob, through a PAX header as in the other layout.
        tail.extend(pax(&[("path", &format!("./{}", blob(&"9".repeat(64))))]));
        tail.extend(entry("ignored-by-pax", b'0', &[9u8; 700]));
        // A blob named like a layer the engine has but not a whole digest: kept.
        tail.extend(entry(&blob(&lower_hex[..63]), b'0', b"x"));
        tail.extend(entry("index.json", b'0', b"{}"));
        tail.extend(entry("manifest.json", b'0', b"[]"));
        tail.extend(entry("oci-layout", b'0', b"{}"));
        with_and_without(keep, &dropped, tail, lower.len())
    }

    #[test]
    fn in_the_oci_layout_the_blobs_of_the_engines_layers_are_left_out() {
        let (whole, keep, lower) = oci_archive();
        for piece in [1, 511, 512, 4096, whole.len()] {
            let mut skip = engine_with_lower();
            assert_eq!(run(&mut skip, &whole, piece), keep, "chunks of {piece}");
            assert_eq!(skip.skipped().load(Ordering::Relaxed), lower as u64);
            // An engine with other layers gets it all.
            let other = [format!("sha256:{}", "0".repeat(64))].into();
            let mut skip = SkipLayers::new(&diffs(), other);
            assert_eq!(run(&mut skip, &whole, piece), whole);
        }
        // An engine holding only the top layer's chain (not a stack it could hold) is not
        // spared the lower one, and the blob of a diff id is left out only where its chain
        // is held.
        let top_chain = chain_ids(&diffs())[1].clone();
        let mut skip = SkipLayers::new(&diffs(), [top_chain].into());
        let got = run(&mut skip, &whole, 512);
        assert_eq!(skip.skipped().load(Ordering::Relaxed), 700);
        // Its PAX header, its header and its data went.
        let top_pax = pax(&[("path", &format!("./blobs/sha256/{}", "9".repeat(64)))]);
        let top = top_pax.len() + BLOCK + 700usize.div_ceil(BLOCK) * BLOCK;
        assert_eq!(got.len(), whole.len() - top);
    }

    #[test]
    fn a_cut_or_odd_archive_passes_as_it_came() {
        let (whole, _, _) = archive();
        // Cut inside the lower layer's json: held bytes are passed at the end.
        let cut = &whole[..3 * BLOCK + 100];
        assert_eq!(run(&mut engine_with_lower(), cut, 64), cut);
        // Not a tar at all.
        let junk = vec![0x41u8; 5000];
        assert_eq!(run(&mut engine_with_lower(), &junk, 100), junk);
        // A malformed PAX header: the rest passes unread.
        let mut odd = entry("PaxHeaders/x", b'x', b"99 path=nope\n");
        odd.extend(&whole);
        assert_eq!(run(&mut engine_with_lower(), &odd, 300), odd);
        // Cut inside the layer being left out: its header ends what is passed on, so the
        // engine sees a cut archive.
        let layer_at = 4 * BLOCK + LOWER_JSON.len().div_ceil(BLOCK) * BLOCK;
        let cut = &whole[..layer_at + BLOCK + 1000];
        let mut skip = engine_with_lower();
        let got = run(&mut skip, cut, 333);
        assert_eq!(
            got,
            whole[..layer_at + BLOCK],
            "everything before the layer, then its header"
        );
        // Extended headers one after another are not held: the rest passes unread.
        let mut chained = Vec::new();
        for _ in 0..3 {
            chained.extend(pax(&[("path", &format!("{LOWER_DIR}/layer.tar"))]));
        }
        chained.extend(&whole);
        let mut skip = engine_with_lower();
        assert_eq!(run(&mut skip, &chained, 512), chained);
        assert_eq!(skip.skipped().load(Ordering::Relaxed), 0);
        // A GNU long name, then a long link name (Go's reader gives the entry after them the
        // long name), or a PAX sparse-file name: the rest passes unread.
        let layer = format!("{LOWER_DIR}/layer.tar");
        let mut long_link = entry("././@LongLink", b'L', format!("{layer}\0").as_bytes());
        long_link.extend(entry("././@LongLink", b'K', b"target\0"));
        let mut sparse = pax(&[("GNU.sparse.name", layer.as_str())]);
        sparse.extend(entry("x", b'0', b"data"));
        for odd in [long_link, sparse] {
            let mut odd = odd;
            odd.extend(&whole);
            let mut skip = engine_with_lower();
            assert_eq!(run(&mut skip, &odd, 512), odd);
        }
        // Two equal layers: nothing is left out, whatever the engine holds.
        let doubled = vec![LOWER_CHAIN.to_string(), LOWER_CHAIN.to_string()];
        let mut skip = SkipLayers::new(&doubled, [LOWER_CHAIN.to_string()].into());
        assert_eq!(run(&mut skip, &whole, 512), whole);
        // Sizes no archive can have (base-256: beyond u64, u64::MAX): passed on, no overflow.
        for high in [0xffu8, 0] {
            let mut huge = entry("x", b'0', b"");
            huge[124] = 0x80;
            huge[125..128].fill(high);
            huge[128..136].fill(0xff);
            huge.extend(&whole);
            assert_eq!(run(&mut engine_with_lower(), &huge, 700), huge);
        }
    }
}
