//! A directory held open, and everything below it reached through that handle: the one way
//! argus touches a path on storage that others write into.
//!
//! A check of a path followed by an operation on the same path is a race: between the two,
//! anyone who can write a directory on the way can swap it for a link (`renameat2` with
//! `RENAME_EXCHANGE` does it atomically), and argus, running as root, then writes or reads
//! wherever the link points. So nothing is checked and then used by name. Each directory
//! is opened from its parent's handle with `O_NOFOLLOW | O_DIRECTORY` (the open *is* the
//! check: a link is refused by the kernel at that moment), and files are opened, made,
//! renamed and removed relative to the handle of the directory that holds them
//! (`openat`, `mkdirat`, `renameat`, `unlinkat`). A directory swapped after it was
//! opened does not matter: the handle still names the directory that was checked.
//!
//! Only the root of a [`Dir`] chain is opened by path, following links: it is the
//! caller's (a profile's mount, or a user's own state directory).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::Unsafe;

/// A directory held open. `path` is what messages show; every operation goes through the
/// handle.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What is at a name in a directory, not following a link there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Link,
    /// A FIFO, socket or device node.
    Special,
}

fn kind_of(file_type: FileType) -> Kind {
    match file_type {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Link,
        _ => Kind::Special,
    }
}

/// The deepest tree [`Dir::remove_all`] walks (argus's own trees are a few levels deep; a
/// snapshot of a deep source tree stays far below this).
pub const MAX_DEPTH: usize = 512;

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// Opens the caller's own root directory by path (links followed: a mount may be one).
    pub fn root(path: &Path) -> std::io::Result<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// [`Dir::root`], making the root (and its parents) first when missing.
    pub fn create_root(path: &Path) -> std::io::Result<Dir> {
        std::fs::create_dir_all(path)?;
        Dir::root(path)
    }

    /// What messages show for this directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What messages show for `rel` below this directory (never opened by this path).
    pub fn display(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        if rel.as_os_str().is_empty() {
            self.path.clone()
        } else {
            self.path.join(rel)
        }
    }

    /// A path that names this very directory whatever happens to its name
    /// (`/proc/self/fd/<n>`), for code that needs a path below a directory only this
    /// process writes (a private staging tree). Valid while `self` is alive.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Another handle on the same directory.
    pub fn try_clone(&self) -> std::io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens the directory `name` (one plain name) of this one, refusing a link.
    fn child(&self, name: &OsStr) -> std::io::Result<Dir> {
        let path = self.path.join(name);
        match rustix::fs::openat(self.fd(), name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(e) if e == rustix::io::Errno::LOOP => Err(Unsafe::Link { path }.into()),
            Err(e) if e == rustix::io::Errno::NOTDIR => Err(match self.kind(name) {
                Ok(Some(Kind::Link)) => Unsafe::Link { path },
                _ => Unsafe::NotDir { path },
            }
            .into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the directory `rel` below this one, one component at a time: a link or a
    /// non-directory anywhere on the way is refused ([`Unsafe`]), a missing one is
    /// `NotFound`. An empty `rel` is this directory again.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> std::io::Result<Dir> {
        let names = super::plain_names(&self.path, rel.as_ref())?;
        let mut dir = self.try_clone()?;
        for name in names {
            dir = dir.child(name)?;
        }
        Ok(dir)
    }

    /// Like `create_dir_all(rel)` below this directory, each component made (mode 0777
    /// less the umask) and then opened as [`Dir::open_dir`] does; `made` hears of each
    /// directory this call made.
    pub fn create_dirs(
        &self,
        rel: impl AsRef<Path>,
        made: &mut dyn FnMut(&Path),
    ) -> std::io::Result<Dir> {
        self.create_dirs_at(rel.as_ref(), &mut |parent, name| {
            made(&parent.path.join(name))
        })
    }

    /// [`Dir::create_dirs`], telling `made` of each directory it made as the handle of its
    /// parent and its name (so that it can be removed again without following a link).
    pub(super) fn create_dirs_at(
        &self,
        rel: &Path,
        made: &mut dyn FnMut(&Dir, &OsStr),
    ) -> std::io::Result<Dir> {
        let names = super::plain_names(&self.path, rel)?;
        let mut dir = self.try_clone()?;
        for name in names {
            dir = match rustix::fs::mkdirat(dir.fd(), name, Mode::from_raw_mode(0o777)) {
                Ok(()) => {
                    made(&dir, name);
                    dir.made_child(name)?
                }
                Err(e) if e == rustix::io::Errno::EXIST => dir.child(name)?,
                Err(e) => return Err(e.into()),
            };
        }
        Ok(dir)
    }

    /// Makes the new directory `name` (an error if anything is there) with `mode` and
    /// opens it.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> std::io::Result<Dir> {
        let name = self.name(name.as_ref())?;
        rustix::fs::mkdirat(self.fd(), name, Mode::from_raw_mode(mode))?;
        self.made_child(name)
    }

    /// Opens the directory `name` this process just made, checking that it is still
    /// ours: one swapped in between the `mkdirat` and the open (by someone who can write
    /// this directory) would be theirs to change under us.
    fn made_child(&self, name: &OsStr) -> std::io::Result<Dir> {
        let dir = self.child(name)?;
        let owner = rustix::fs::fstat(&dir.fd)?.st_uid;
        // An NFS export with root_squash gives root's files to `nobody`: what counts is the
        // uid this filesystem gives what we make, asked of it when it is not our own.
        if owner != super::effective_uid() && owner != dir.creator_uid()? {
            return Err(Unsafe::Foreign {
                path: dir.path,
                owner,
            }
            .into());
        }
        Ok(dir)
    }

    /// The owner this filesystem gives a file this process makes in this directory (our
    /// uid, or `nobody` on an NFS export that squashes root): a probe file is made,
    /// looked at and removed.
    pub fn creator_uid(&self) -> std::io::Result<u32> {
        let probe = super::temp_name("owner-probe");
        let file = self.create_new(&probe, 0o600)?;
        let uid = rustix::fs::fstat(&file).map(|stat| stat.st_uid);
        drop(file);
        let _ = rustix::fs::unlinkat(self.fd(), probe.as_str(), AtFlags::empty());
        Ok(uid?)
    }

    /// `name` checked to be one plain name.
    fn name<'a>(&self, name: &'a OsStr) -> std::io::Result<&'a OsStr> {
        match super::plain_names(&self.path, Path::new(name))?.as_slice() {
            [one] => Ok(one),
            _ => Err(Unsafe::Escapes {
                root: self.path.clone(),
                rel: PathBuf::from(name),
            }
            .into()),
        }
    }

    /// The directory holding `rel` and the last name of `rel`.
    fn parent_of<'a>(&self, rel: &'a Path) -> std::io::Result<(Dir, &'a OsStr)> {
        let names = super::plain_names(&self.path, rel)?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(Unsafe::Escapes {
                root: self.path.clone(),
                rel: rel.to_path_buf(),
            }
            .into());
        };
        let mut dir = self.try_clone()?;
        for name in dirs {
            dir = dir.child(name)?;
        }
        Ok((dir, last))
    }

    /// What is at `name` in this directory (a link is reported, not followed); None when
    /// nothing is.
    pub fn kind(&self, name: impl AsRef<OsStr>) -> std::io::Result<Option<Kind>> {
        match rustix::fs::statat(self.fd(), name.as_ref(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(kind_of(FileType::from_raw_mode(stat.st_mode)))),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the regular file `rel` below this directory for reading: no link anywhere
    /// (the last name included), no FIFO or device (opened without blocking, then
    /// refused), and no file with a second hard link (it could be anyone's file, linked
    /// in by someone who cannot read it).
    pub fn open_file(&self, rel: impl AsRef<Path>) -> std::io::Result<std::fs::File> {
        self.open_checked(rel.as_ref(), OFlags::RDONLY)
    }

    /// Opens the existing regular file `rel` to append to, checked as [`Dir::open_file`].
    pub fn open_append(&self, rel: impl AsRef<Path>) -> std::io::Result<std::fs::File> {
        self.open_checked(rel.as_ref(), OFlags::WRONLY | OFlags::APPEND)
    }

    fn open_checked(&self, rel: &Path, access: OFlags) -> std::io::Result<std::fs::File> {
        let (dir, name) = self.parent_of(rel)?;
        let path = self.display(rel);
        // First a handle that opens nothing (`O_PATH`: no device's open routine runs, no
        // FIFO is waited on), checked; only then the file itself, through that handle's
        // own `/proc/self/fd` entry, which names this very inode.
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let handle = match rustix::fs::openat(dir.fd(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e == rustix::io::Errno::LOOP => return Err(Unsafe::Link { path }.into()),
            Err(e) => return Err(e.into()),
        };
        let stat = rustix::fs::fstat(&handle)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            // O_PATH with O_NOFOLLOW opens a link itself rather than failing.
            FileType::Symlink => return Err(Unsafe::Link { path }.into()),
            _ => return Err(Unsafe::NotFile { path }.into()),
        }
        if stat.st_nlink > 1 {
            return Err(Unsafe::HardLink { path }.into());
        }
        let reopen = format!("/proc/self/fd/{}", handle.as_raw_fd());
        let flags = access | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::open(reopen.as_str(), flags, Mode::empty())?;
        // The same inode as checked (a /proc entry cannot be redirected, but say so).
        let reopened = rustix::fs::fstat(&fd)?;
        if (reopened.st_dev, reopened.st_ino) != (stat.st_dev, stat.st_ino) {
            return Err(Unsafe::NotFile { path }.into());
        }
        Ok(std::fs::File::from(fd))
    }

    /// Reads the regular file `rel` whole, opened as [`Dir::open_file`], refusing one
    /// longer than `cap` bytes (a file others can write must not eat the memory).
    pub fn read(&self, rel: impl AsRef<Path>, cap: u64) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let rel = rel.as_ref();
        let file = self.open_file(rel)?;
        // A planted giant (a sparse file costs its owner nothing) is refused unread.
        if file.metadata()?.len() > cap {
            let path = self.display(rel);
            return Err(Unsafe::TooLarge { path, cap }.into());
        }
        let mut bytes = Vec::new();
        file.take(cap + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > cap {
            let path = self.display(rel);
            return Err(Unsafe::TooLarge { path, cap }.into());
        }
        Ok(bytes)
    }

    /// Creates the new file `name` (`O_EXCL`: whatever is there, a planted link included,
    /// is an error, never written through) with `mode` (less the umask), for writing.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> std::io::Result<std::fs::File> {
        let name = self.name(name.as_ref())?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(self.fd(), name, flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => Ok(std::fs::File::from(fd)),
            // A link planted at the name is named as one (exit 2), not "file exists".
            Err(e) if e == rustix::io::Errno::EXIST && self.kind(name)? == Some(Kind::Link) => {
                Err(Unsafe::Link {
                    path: self.display(name),
                }
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the new file `name` holding `bytes`, synced (see [`Dir::create_new`]).
    pub fn write_new(&self, name: impl AsRef<OsStr>, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = self.create_new(name, 0o666)?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    /// Writes `name` atomically and durably (a temporary name in this directory, fsync,
    /// rename over `name`, fsync of the directory): readers see the old content or the
    /// new, never a part, and a link at `name` is replaced, never followed.
    pub fn write_atomic(&self, name: impl AsRef<OsStr>, bytes: &[u8]) -> std::io::Result<()> {
        let name = self.name(name.as_ref())?;
        let tmp = super::temp_name(&name.to_string_lossy());
        let result = self
            .write_new(&tmp, bytes)
            .and_then(|()| self.rename(&tmp, self, name))
            .and_then(|()| self.sync());
        if result.is_err() {
            let _ = rustix::fs::unlinkat(self.fd(), tmp.as_str(), AtFlags::empty());
        }
        result
    }

    /// Renames `from` in this directory to `to` in `to_dir` (`renameat`: neither name is
    /// followed).
    pub fn rename(
        &self,
        from: impl AsRef<OsStr>,
        to_dir: &Dir,
        to: impl AsRef<OsStr>,
    ) -> std::io::Result<()> {
        let from = self.name(from.as_ref())?;
        let to = to_dir.name(to.as_ref())?;
        Ok(rustix::fs::renameat(self.fd(), from, to_dir.fd(), to)?)
    }

    /// Renames `from` in this directory to `to` in `to_dir` only if nothing is at `to`
    /// (`RENAME_NOREPLACE`: an empty directory made there meanwhile is not replaced).
    /// Where the filesystem has no such flag (older NFS), the check and the rename are two
    /// steps, and a directory can only replace an empty one.
    pub fn rename_new(
        &self,
        from: impl AsRef<OsStr>,
        to_dir: &Dir,
        to: impl AsRef<OsStr>,
    ) -> std::io::Result<()> {
        let from = self.name(from.as_ref())?;
        let to = to_dir.name(to.as_ref())?;
        let exists = || {
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists", to_dir.display(to).display()),
            )
        };
        match rustix::fs::renameat_with(
            self.fd(),
            from,
            to_dir.fd(),
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::EXIST => Err(exists()),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
                if to_dir.kind(to)?.is_some() {
                    return Err(exists());
                }
                self.rename(from, to_dir, to)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the link `name` to `target` (a snapshot's own links; never followed here).
    pub fn symlink(&self, target: &Path, name: impl AsRef<OsStr>) -> std::io::Result<()> {
        let name = self.name(name.as_ref())?;
        Ok(rustix::fs::symlinkat(target, self.fd(), name)?)
    }

    /// The target of the link `name` (`readlinkat`: read, not followed).
    pub fn read_link(&self, name: impl AsRef<OsStr>) -> std::io::Result<PathBuf> {
        let name = self.name(name.as_ref())?;
        let target = rustix::fs::readlinkat(self.fd(), name, Vec::new())?;
        Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }

    /// Removes the file or link `name`.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> std::io::Result<()> {
        let name = self.name(name.as_ref())?;
        Ok(rustix::fs::unlinkat(self.fd(), name, AtFlags::empty())?)
    }

    /// Removes `name` whatever it is: a file, a link (not what it points to) or a whole
    /// tree, walked through handles (read-only directories made writable first). A tree
    /// deeper than [`MAX_DEPTH`] is refused ([`Unsafe::TooDeep`]: built to exhaust the
    /// walk, not by argus); what vanishes meanwhile counts as removed.
    pub fn remove_all(&self, name: impl AsRef<OsStr>) -> std::io::Result<()> {
        let name = self.name(name.as_ref())?;
        match self.remove_tree(name, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn remove_tree(&self, name: &OsStr, depth: usize) -> std::io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(Unsafe::TooDeep {
                path: self.display(name),
            }
            .into());
        }
        let gone = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        };
        match self.kind(name)? {
            None => return Ok(()),
            Some(Kind::Dir) => {}
            Some(_) => return self.remove_file(name).or_else(gone),
        }
        let dir = match self.child(name) {
            Ok(dir) => dir,
            Err(e) => return gone(e),
        };
        let stat = rustix::fs::fstat(&dir.fd)?;
        if stat.st_mode & 0o700 != 0o700 {
            rustix::fs::fchmod(
                &dir.fd,
                Mode::from_raw_mode((stat.st_mode | 0o700) & 0o7777),
            )?;
        }
        for (entry, _) in dir.entries()? {
            dir.remove_tree(&entry, depth + 1)?;
        }
        match rustix::fs::unlinkat(self.fd(), name, AtFlags::REMOVEDIR) {
            Err(e) if e == rustix::io::Errno::NOENT => Ok(()),
            other => Ok(other?),
        }
    }

    /// The owner (uid) of `name` in this directory, not following a link.
    pub fn owner(&self, name: impl AsRef<OsStr>) -> std::io::Result<u32> {
        let name = self.name(name.as_ref())?;
        Ok(rustix::fs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW)?.st_uid)
    }

    /// Removes the directory `name` if it is empty.
    pub fn remove_dir(&self, name: impl AsRef<OsStr>) -> std::io::Result<()> {
        let name = self.name(name.as_ref())?;
        Ok(rustix::fs::unlinkat(self.fd(), name, AtFlags::REMOVEDIR)?)
    }

    /// The names in this directory with what each is (links not followed), in no order.
    pub fn entries(&self) -> std::io::Result<Vec<(OsString, Kind)>> {
        let mut out = Vec::new();
        let mut iter = rustix::fs::Dir::read_from(self.fd())?;
        while let Some(entry) = iter.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let kind = match entry.file_type() {
                FileType::Unknown => self.kind(&name)?.unwrap_or(Kind::Special),
                t => kind_of(t),
            };
            out.push((name, kind));
        }
        Ok(out)
    }

    /// fsync of this directory: makes a rename or a new entry in it durable.
    pub fn sync(&self) -> std::io::Result<()> {
        Ok(rustix::fs::fsync(self.fd())?)
    }

    /// fsyncs every file below this directory, then every directory, deepest first:
    /// before the tree is renamed where readers take it for whole.
    pub fn sync_tree(&self) -> std::io::Result<()> {
        for (name, kind) in self.entries()? {
            match kind {
                Kind::Dir => self.child(&name)?.sync_tree()?,
                Kind::File => {
                    let fd = rustix::fs::openat(
                        self.fd(),
                        &name,
                        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                    rustix::fs::fsync(&fd)?;
                }
                Kind::Link | Kind::Special => {}
            }
        }
        self.sync()
    }

    /// The permission bits of this directory (`fstat` of the handle).
    pub fn mode(&self) -> std::io::Result<u32> {
        Ok(rustix::fs::fstat(self.fd())?.st_mode & 0o7777)
    }

    /// Sets the mode of this directory.
    pub fn set_mode(&self, mode: u32) -> std::io::Result<()> {
        Ok(rustix::fs::fchmod(self.fd(), Mode::from_raw_mode(mode))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("shared");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("jobs/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        (dir, root, outside)
    }

    fn refused_as_link(e: &std::io::Error) -> bool {
        matches!(Unsafe::of(e), Some(Unsafe::Link { .. }))
    }

    #[test]
    fn links_are_refused_at_every_component_and_nothing_is_made_through_them() {
        let (_dir, root, outside) = world();
        std::os::unix::fs::symlink(&outside, root.join("runs")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("jobs/a/job.json")).unwrap();
        let top = Dir::root(&root).unwrap();
        assert!(refused_as_link(&top.open_dir("runs/x").unwrap_err()));
        assert!(refused_as_link(
            &top.create_dirs("runs/new", &mut |_| {}).unwrap_err()
        ));
        assert!(refused_as_link(
            &top.open_file("jobs/a/job.json").unwrap_err()
        ));
        assert!(refused_as_link(&top.open_file("runs/secret").unwrap_err()));
        let jobs_a = top.open_dir("jobs/a").unwrap();
        // A new file at a planted link's name is refused as a link; an atomic write
        // replaces the link.
        assert!(refused_as_link(
            &jobs_a.create_new("job.json", 0o644).unwrap_err()
        ));
        jobs_a.write_atomic("job.json", b"mine").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"s");
        for rel in ["../outside", "/etc", "jobs/../../outside"] {
            let err = top.open_dir(rel).unwrap_err();
            assert!(
                matches!(Unsafe::of(&err), Some(Unsafe::Escapes { .. })),
                "{rel}: {err}"
            );
        }
        assert!(jobs_a.create_new("../x", 0o644).is_err());
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            1,
            "nothing made outside"
        );
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_it_was_opened_is_not_followed() {
        let (dir, root, outside) = world();
        let top = Dir::root(&root).unwrap();
        let jobs = top.open_dir("jobs").unwrap();
        // The swap a hostile writer of the storage can make at any moment.
        std::fs::rename(root.join("jobs"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("jobs")).unwrap();
        jobs.write_atomic("job.json", b"x").unwrap();
        jobs.create_dirs("b/logs", &mut |_| {}).unwrap();
        assert!(dir.path().join("moved/job.json").is_file());
        assert!(dir.path().join("moved/b/logs").is_dir());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn files_read_are_regular_capped_and_not_hard_linked() {
        let (_dir, root, _outside) = world();
        let top = Dir::root(&root).unwrap();
        std::fs::write(root.join("jobs/big"), vec![b'x'; 2048]).unwrap();
        assert!(top.read("jobs/big", 1024).is_err());
        assert_eq!(top.read("jobs/big", 4096).unwrap().len(), 2048);
        std::fs::hard_link(root.join("jobs/big"), root.join("jobs/a/linked")).unwrap();
        let err = top.open_file("jobs/a/linked").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::HardLink { .. })),
            "{err}"
        );
        let fifo = root.join("jobs/fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = top.open_file("jobs/fifo").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::NotFile { .. })),
            "{err}"
        );
        // A socket (which open(2) answers with ENXIO) is refused as one, not an I/O error.
        let _socket = std::os::unix::net::UnixListener::bind(root.join("jobs/sock")).unwrap();
        let err = top.open_file("jobs/sock").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::NotFile { .. })),
            "{err}"
        );
        assert_eq!(
            top.open_file("jobs/none").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn a_directory_swapped_in_for_one_just_made_is_refused_when_it_is_not_ours() {
        let (_dir, root, _outside) = world();
        let top = Dir::root(&root).unwrap();
        // What a swap between mkdirat and the open leaves: someone else's directory.
        std::fs::create_dir(root.join("theirs")).unwrap();
        let other = if super::super::effective_uid() == 65534 {
            65533
        } else {
            65534
        };
        std::os::unix::fs::lchown(root.join("theirs"), Some(other), None).unwrap();
        let err = top.made_child(OsStr::new("theirs")).unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::Foreign { .. })),
            "{err}"
        );
        top.create_dir("mine", 0o700).unwrap();
    }

    #[test]
    fn a_tree_built_to_exhaust_the_walk_is_refused_and_a_vanished_one_is_removed() {
        let (_dir, root, _outside) = world();
        let top = Dir::root(&root).unwrap();
        let deep = "d/".repeat(MAX_DEPTH + 2);
        top.create_dirs(deep.trim_end_matches('/'), &mut |_| {})
            .unwrap();
        let err = top.remove_all("d").unwrap_err();
        assert!(
            matches!(Unsafe::of(&err), Some(Unsafe::TooDeep { .. })),
            "{err}"
        );
        top.remove_all("never-there").unwrap();
    }

    #[test]
    fn remove_all_takes_a_read_only_tree_and_never_what_a_link_points_to() {
        let (_dir, root, outside) = world();
        let top = Dir::root(&root).unwrap();
        let t = top.create_dirs("jobs/t/x", &mut |_| {}).unwrap();
        t.write_new("f", b"1").unwrap();
        t.symlink(&outside, "out").unwrap();
        t.set_mode(0o555).unwrap();
        let jobs = top.open_dir("jobs").unwrap();
        jobs.remove_all("t").unwrap();
        assert_eq!(jobs.kind("t").unwrap(), None);
        assert!(outside.join("secret").is_file());
        let mut made = Vec::new();
        top.create_dirs("jobs/n/m", &mut |p| made.push(p.to_path_buf()))
            .unwrap();
        assert_eq!(made, [root.join("jobs/n"), root.join("jobs/n/m")]);
        let names: Vec<_> = top.open_dir("jobs/n").unwrap().entries().unwrap();
        assert_eq!(names, [(OsString::from("m"), Kind::Dir)]);
    }
}
