//! Small files the broker rewrites whole (the SASL credentials, the ACLs): read with a
//! missing file as empty, replaced atomically and durably. Blocking IO: call from a blocking
//! thread or at start-up.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's text, or None when it does not exist.
pub fn read_optional(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `parts` (concatenated): written to a temporary file beside it with
/// permissions `mode`, synced, renamed over `path`, and the directory synced. On failure, the
/// step that failed ("creating the directory of", "writing", ...) and its error.
pub fn replace(
    path: &Path,
    parts: &[&[u8]],
    mode: u32,
) -> Result<(), (&'static str, std::io::Error)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| ("creating the directory of", e))?;
    let name = path
        .file_name()
        .map_or("file".into(), |n| n.to_string_lossy().into_owned());
    let temporary = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)
            .map_err(|e| ("creating a temporary file beside", e))?;
        parts
            .iter()
            .try_for_each(|p| f.write_all(p))
            .and_then(|()| f.sync_all())
            .map_err(|e| ("writing", e))?;
    }
    std::fs::rename(&temporary, path).map_err(|e| ("replacing", e))?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ("syncing the directory of", e))
}
