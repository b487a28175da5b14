//! Small file-system pieces prepare needs to never hang: opening a file of the user's own
//! (a `--from` directory) only when it is a regular file (a FIFO, socket or device node
//! is refused by name, never opened for reading), and hashing an open file.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::fsx::special_kind;

/// A path that is not what it must be (a regular file, or a directory).
#[derive(Debug, thiserror::Error)]
pub enum NotRegular {
    #[error(
        "{} is {kind}: refusing to read it (it could block forever)",
        crate::text::shown(path)
    )]
    Special { path: PathBuf, kind: &'static str },
    #[error("{} is not a regular file", crate::text::shown(path))]
    Other { path: PathBuf },
    #[error("cannot open {}", crate::text::shown(path))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks (following symlinks, without opening) that `path` is a regular file.
pub fn check_regular(path: &Path) -> Result<(), NotRegular> {
    let meta = std::fs::metadata(path).map_err(|source| NotRegular::Io {
        path: path.to_path_buf(),
        source,
    })?;
    kind_of(path, &meta)
}

fn kind_of(path: &Path, meta: &std::fs::Metadata) -> Result<(), NotRegular> {
    if meta.is_file() {
        return Ok(());
    }
    Err(match special_kind(meta.file_type()) {
        Some(kind) => NotRegular::Special {
            path: path.to_path_buf(),
            kind,
        },
        None => NotRegular::Other {
            path: path.to_path_buf(),
        },
    })
}

/// Opens `path` for reading only if it is a regular file. Opened non-blocking and checked
/// on the open descriptor, so a FIFO swapped in after a check does not hang either.
pub fn open_regular(path: &Path) -> Result<File, NotRegular> {
    let io = |source| NotRegular::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    kind_of(path, &file.metadata().map_err(io)?)?;
    Ok(file)
}

/// sha256 of an open file, read in 256 KiB pieces.
pub fn sha256_of(file: &File) -> std::io::Result<String> {
    crate::digest::reader_sha256(file)
}
