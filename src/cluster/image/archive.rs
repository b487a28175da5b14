//! An image archive on a file (`docker save`, as a Slurm run keeps it on the shared
//! storage): the image's layers (diff ids), read from its config without reading the layers.
//!
//! The config of image `sha256:<hex>` is the entry `<hex>.json` (`docker save` up to Docker
//! 24) or the blob `blobs/sha256/<hex>` (from Docker 25, an OCI image layout); only the
//! headers before it are read, each layer's data is seeked over. What is found counts only
//! if it hashes to the image's id: the archive is a file on storage others may write.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bollard::Docker;
use bytes::Bytes;
use futures_util::Stream;
use serde::Deserialize;

use super::skip_layers::{self, SkipLayers, blob_name, without_layers};
use super::tar_header::{BLOCK, Located, locate, long_name, not_followed, pax_records};
use crate::digest::sha256_hex;

/// The largest config or extended header read (a config is a few KiB; its history grows it).
const MAX_READ: u64 = 4 << 20;
/// Entries looked at before giving up: an archive holds at most four per layer (its
/// directory, `VERSION`, `json`, `layer.tar`, each perhaps after an extended header) and a
/// few more.
const MAX_ENTRIES: usize = 10_000;

#[derive(Deserialize)]
struct Config {
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

/// Bytes read from the archive at a time (tokio's default is 4 KiB, each a trip through its
/// blocking pool).
const READ_CHUNK: usize = 1 << 20;

/// The archive of image `id` at `path` as a load's body for `docker` (`host` in logs),
/// without the layers that engine has when `skip` (their bytes are read, not sent); with
/// the bytes left out so far.
pub async fn load_body(
    docker: &Docker,
    host: &str,
    path: &Path,
    id: &str,
    skip: bool,
) -> std::io::Result<(
    impl Stream<Item = std::io::Result<Bytes>> + use<>,
    Arc<AtomicU64>,
)> {
    let (path, owned) = (path.to_path_buf(), id.to_string());
    let (file, layers) = tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(path)?;
        let layers = if skip {
            diff_ids(&mut file, &owned)
        } else {
            None
        };
        file.rewind().map(|()| (file, layers))
    })
    .await
    .map_err(std::io::Error::other)??;
    let skip = match layers {
        Some(layers) => skip_layers::for_engine(docker, host, &layers).await,
        None if skip => {
            tracing::info!(
                host,
                id,
                "the archive holds no config named by the image id (not written by `docker \
                 save`?): all of it is loaded"
            );
            None
        }
        None => None,
    };
    let skipped = skip.as_ref().map(SkipLayers::skipped).unwrap_or_default();
    let file = tokio::fs::File::from_std(file);
    let body = tokio_util::io::ReaderStream::with_capacity(file, READ_CHUNK);
    Ok((without_layers(body, skip), skipped))
}

/// The diff ids of image `id` (`sha256:<hex>`), bottom first, from its config in `archive`;
/// None when the archive holds no config of that id (another layout, cut short, or not
/// that image) or cannot be read. Leaves `archive` wherever it stopped.
pub fn diff_ids(archive: &mut (impl Read + Seek), id: &str) -> Option<Vec<String>> {
    let hex = id.strip_prefix("sha256:")?;
    let config = format!("{hex}.json");
    let (mut next_path, mut next_size) = (None, None);
    for _ in 0..MAX_ENTRIES {
        let mut header = [0u8; BLOCK];
        archive.read_exact(&mut header).ok()?;
        if header.iter().all(|&b| b == 0) {
            return None;
        }
        let Located { name, size, padded } = locate(&header, next_path.take(), next_size.take())?;
        let read = |archive: &mut _| -> Option<Vec<u8>> {
            if size > MAX_READ {
                return None;
            }
            let mut data = vec![0u8; padded as usize];
            Read::read_exact(archive, &mut data).ok()?;
            data.truncate(size as usize);
            Some(data)
        };
        match header[156] {
            b'x' => {
                let (path, size) = pax_records(&read(archive)?)?;
                (next_path, next_size) = (path, size);
            }
            b'L' => next_path = Some(long_name(&read(archive)?)),
            _ if not_followed(&header) => return None,
            b'0' | 0
                if name.trim_start_matches("./") == config || blob_name(&name) == Some(hex) =>
            {
                let data = read(archive)?;
                if sha256_hex(&data) != hex {
                    return None;
                }
                return serde_json::from_slice::<Config>(&data)
                    .ok()
                    .map(|c| c.rootfs.diff_ids);
            }
            _ => {
                archive
                    .seek(SeekFrom::Current(i64::try_from(padded).ok()?))
                    .ok()?;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::super::tar_header::{entry, pax};
    use super::*;

    const CONFIG: &str = r#"{"architecture":"amd64","rootfs":{"type":"layers","diff_ids":["sha256:aa","sha256:bb"]}}"#;

    fn id() -> String {
        format!("sha256:{}", sha256_hex(CONFIG.as_bytes()))
    }

    /// A layer (its data large, as the scan must seek over it), a PAX-named entry, the
    /// config, then manifest.json.
    fn archive(config: &str) -> Vec<u8> {
        let dir = "1".repeat(64);
        let mut out = entry(&format!("{dir}/json"), b'0', b"{}");
        out.extend(entry(
            &format!("{dir}/layer.tar"),
            b'0',
            &vec![7u8; 3 << 20],
        ));
        out.extend(pax(&[("path", &format!("{}/VERSION", "2".repeat(64)))]));
        out.extend(entry("ignored", b'0', b"1.0"));
        out.extend(entry(
            &format!("{}.json", id().trim_start_matches("sha256:")),
            b'0',
            config.as_bytes(),
        ));
        out.extend(entry("manifest.json", b'0', b"[]"));
        out.extend([0u8; 2 * BLOCK]);
        out
    }

    #[test]
    fn the_config_of_the_id_gives_the_layers() {
        let layers = diff_ids(&mut Cursor::new(archive(CONFIG)), &id());
        assert_eq!(
            layers,
            Some(vec!["sha256:aa".to_string(), "sha256:bb".to_string()])
        );
    }

    #[test]
    fn sizes_from_pax_and_entries_without_data_are_read_as_go_does() {
        let dir = "1".repeat(64);
        // A layer whose size is only in its PAX header (as Go writes one from 8 GiB on).
        let mut out = pax(&[("size", &(3u64 << 20).to_string())]);
        let mut layer = entry(&format!("{dir}/layer.tar"), b'0', &vec![7u8; 3 << 20]);
        layer[124..136].copy_from_slice(&[0; 12]);
        out.extend(layer);
        // A directory whose size field claims data it does not have.
        let mut directory = entry(&format!("{dir}/"), b'5', b"");
        directory[124..135].copy_from_slice(b"00000002000");
        out.extend(directory);
        let config = id();
        let hex = config.trim_start_matches("sha256:");
        out.extend(entry(&format!("{hex}.json"), b'0', CONFIG.as_bytes()));
        out.extend([0u8; 2 * BLOCK]);
        assert_eq!(
            diff_ids(&mut Cursor::new(out), &config),
            Some(vec!["sha256:aa".to_string(), "sha256:bb".to_string()])
        );
    }

    #[test]
    fn in_the_oci_layout_the_config_is_the_blob_of_the_id() {
        // As Docker 25 and later write it: the layer blob (seeked over), the config blob.
        let config = id();
        let hex = config.trim_start_matches("sha256:");
        let mut out = entry("blobs/", b'5', b"");
        out.extend(entry("blobs/sha256/", b'5', b""));
        out.extend(entry(
            &format!("blobs/sha256/{}", "1".repeat(64)),
            b'0',
            &vec![7u8; 3 << 20],
        ));
        out.extend(entry(
            &format!("blobs/sha256/{hex}"),
            b'0',
            CONFIG.as_bytes(),
        ));
        out.extend(entry("index.json", b'0', b"{}"));
        out.extend([0u8; 2 * BLOCK]);
        assert_eq!(
            diff_ids(&mut Cursor::new(&out), &config),
            Some(vec!["sha256:aa".to_string(), "sha256:bb".to_string()])
        );
        // A blob named by the id whose content is not that config counts for nothing.
        let forged = out
            .windows(3)
            .position(|w| w == b"aa\"")
            .expect("the config's first diff id");
        out[forged] = b'c';
        assert_eq!(diff_ids(&mut Cursor::new(&out), &config), None);
    }

    #[test]
    fn anything_else_gives_none() {
        // A config that is not the image's (its hash differs from the id).
        let forged = CONFIG.replace("aa", "cc");
        assert_eq!(diff_ids(&mut Cursor::new(archive(&forged)), &id()), None);
        // Another image's id, a cut archive, an empty one, not a digest.
        let other = format!("sha256:{}", "3".repeat(64));
        assert_eq!(diff_ids(&mut Cursor::new(archive(CONFIG)), &other), None);
        let whole = archive(CONFIG);
        assert_eq!(
            diff_ids(&mut Cursor::new(&whole[..(3 << 20) + 2048]), &id()),
            None
        );
        assert_eq!(diff_ids(&mut Cursor::new(Vec::new()), &id()), None);
        assert_eq!(diff_ids(&mut Cursor::new(archive(CONFIG)), "latest"), None);
    }
}
