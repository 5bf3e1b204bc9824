//! Directories the runner keeps its state in: created readable by this user
//! only, and refused when they exist but belong to another user, who could
//! otherwise plant or read a store (e.g. under a predictable /tmp path).
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Creates `dir` (and missing parents) with mode 0700, or checks that an
/// existing one belongs to this user.
pub fn create(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    check_owner(dir)
}

/// Fails when `dir` belongs to another user.
pub fn check_owner(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to uid {}, not to this user (uid {me}); choose another directory", dir.display(), meta.uid()),
        ));
    }
    if !meta.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a directory", dir.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_directories_are_private_and_owned() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        create(&dir).unwrap();
        let file = root.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(check_owner(&file).is_err());
    }
}
