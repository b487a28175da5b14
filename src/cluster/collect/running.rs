//! A running container's files, read through the exec API: `nvidia-smi`, the logs
//! directory's listing, and the tails chosen from it, each read by a fixed script run in the
//! container with the file names and sizes as its arguments (never put into a shell string).

use bollard::Docker;
use bollard::container::LogOutput;
use futures_util::StreamExt;

use super::{Container, LogFile, RAY_LOGS, Request, Tail, Wanted, last_line, plain_name};

/// The most one exec's output is read (a listing, `nvidia-smi`).
const SMALL_OUTPUT: usize = 1 << 20;

/// Lists the logs directory: a JSON list of [name, size, mtime] of its regular files.
const LIST_PY: &str = r#"
import json, os, stat, sys
d = sys.argv[1]
out = []
for name in sorted(os.listdir(d)):
    try:
        st = os.stat(os.path.join(d, name), follow_symlinks=False)
    except OSError:
        continue
    if stat.S_ISREG(st.st_mode):
        out.append([name, st.st_size, st.st_mtime])
sys.stdout.write(json.dumps(out))
"#;

/// Writes the last `keep` bytes of each named file (argv: dir, then name keep pairs), each
/// after a JSON header line {"name", "size", "kept"} (or {"name", "error"}).
const TAIL_PY: &str = r#"
import json, os, sys
d = sys.argv[1]
args = sys.argv[2:]
out = sys.stdout.buffer
for i in range(0, len(args) - 1, 2):
    name, keep = args[i], int(args[i + 1])
    try:
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - keep)
            os.lseek(fd, start, 0)
            data = b""
            while len(data) < size - start:
                chunk = os.read(fd, size - start - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        out.write(json.dumps({"name": name, "size": size, "kept": len(data)}).encode() + b"\n")
        out.write(data)
    except OSError as e:
        out.write(json.dumps({"name": name, "error": str(e)}).encode() + b"\n")
out.flush()
"#;

/// The files of a running container, read through the exec API: `nvidia-smi` (when it has
/// NVIDIA GPUs), the logs directory's listing, then the tails [`Request::choose`] asks for.
pub(super) async fn read_running(
    docker: &Docker,
    id: &str,
    nvidia: bool,
    request: &Request<'_>,
    out: &mut Container,
) {
    if nvidia {
        // A GPU fallen off the bus can hang nvidia-smi: at most 5 s of the bundle's time.
        let smi = ["timeout", "-s", "KILL", "5", "nvidia-smi"];
        match exec(docker, id, &smi, SMALL_OUTPUT).await {
            Ok((text, _, Some(0))) => out.nvidia_smi = Some(String::from_utf8_lossy(&text).into()),
            Ok((text, err, code)) => out.missed.push((
                "nvidia-smi".into(),
                format!(
                    "exit {}: {}{}",
                    code.map_or("?".into(), |c| c.to_string()),
                    String::from_utf8_lossy(&text).trim(),
                    err.trim()
                ),
            )),
            Err(e) => out.missed.push(("nvidia-smi".into(), e)),
        }
    }
    let listing = match exec(
        docker,
        id,
        &["python3", "-c", LIST_PY, RAY_LOGS],
        SMALL_OUTPUT,
    )
    .await
    {
        Ok((text, err, Some(0))) => {
            match serde_json::from_slice::<Vec<(String, u64, f64)>>(&text) {
                Ok(files) => files,
                Err(e) => {
                    out.missed.push((
                        RAY_LOGS.into(),
                        format!("cannot read its listing ({e}): {}", err.trim()),
                    ));
                    return;
                }
            }
        }
        Ok((_, err, _)) => {
            out.missed.push((
                RAY_LOGS.into(),
                format!("cannot list it: {}", last_line(&err)),
            ));
            return;
        }
        Err(e) => {
            out.missed.push((RAY_LOGS.into(), e));
            return;
        }
    };
    out.listing = listing
        .into_iter()
        .map(|(name, size, mtime)| LogFile { name, size, mtime })
        .collect();
    let wanted: Vec<Wanted> = (request.choose)(out.head, &out.listing)
        .into_iter()
        .filter(|w| plain_name(&w.name) && w.keep > 0)
        .collect();
    if wanted.is_empty() {
        return;
    }
    let total: u64 = wanted.iter().map(|w| w.keep).sum();
    let mut argv: Vec<String> = vec![
        "python3".into(),
        "-c".into(),
        TAIL_PY.into(),
        RAY_LOGS.into(),
    ];
    for w in &wanted {
        argv.push(w.name.clone());
        argv.push(w.keep.to_string());
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    // Headers on top of the bytes kept.
    let cap = usize::try_from(total)
        .unwrap_or(usize::MAX)
        .saturating_add(wanted.len() * 512);
    match exec(docker, id, &argv, cap).await {
        Ok((bytes, err, _)) => {
            let (tails, problems) = split_tails(&bytes);
            // Only the files asked for, each once: the reader's output is the container's
            // word, and a name it made up is no file of the bundle.
            let mut seen = std::collections::BTreeSet::new();
            out.files = tails
                .into_iter()
                .filter(|t| wanted.iter().any(|w| w.name == t.name) && seen.insert(t.name.clone()))
                .collect();
            out.missed.extend(problems);
            if !err.trim().is_empty() && out.files.len() < wanted.len() {
                out.missed
                    .push(("Ray's logs".into(), last_line(&err).to_string()));
            }
        }
        Err(e) => out.missed.push(("Ray's logs".into(), e)),
    }
}

/// Runs `cmd` in the container: (stdout up to `cap` bytes, stderr up to 64 KiB, the exit
/// code when the engine says). An error when it cannot be run.
async fn exec(
    docker: &Docker,
    id: &str,
    cmd: &[&str],
    cap: usize,
) -> Result<(Vec<u8>, String, Option<i64>), String> {
    use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions {
                cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("cannot run {} in it: {e}", cmd[0]))?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(1 << 20),
    };
    let started = docker
        .start_exec(&exec.id, Some(options))
        .await
        .map_err(|e| format!("cannot run {} in it: {e}", cmd[0]))?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(chunk) = output.next().await {
            match chunk {
                Ok(LogOutput::StdOut { message }) => {
                    let room = cap.saturating_sub(stdout.len());
                    stdout.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(LogOutput::StdErr { message }) => {
                    let room = (64usize << 10).saturating_sub(stderr.len());
                    stderr.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(_) => {}
                Err(e) => return Err(format!("{} stopped answering: {e}", cmd[0])),
            }
        }
    }
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .ok()
        .and_then(|i| i.exit_code);
    Ok((stdout, String::from_utf8_lossy(&stderr).into_owned(), code))
}

/// Splits [`TAIL_PY`]'s output into the tails it holds and the files it could not read.
fn split_tails(mut bytes: &[u8]) -> (Vec<Tail>, Vec<(String, String)>) {
    #[derive(serde::Deserialize)]
    struct Header {
        name: String,
        #[serde(default)]
        size: u64,
        #[serde(default)]
        kept: usize,
        #[serde(default)]
        error: Option<String>,
    }
    let mut tails = Vec::new();
    let mut problems = Vec::new();
    while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
        let Ok(header) = serde_json::from_slice::<Header>(&bytes[..end]) else {
            problems.push(("Ray's logs".into(), "the reader's output was cut".into()));
            break;
        };
        bytes = &bytes[end + 1..];
        if let Some(error) = header.error {
            problems.push((header.name, error));
            continue;
        }
        let kept = header.kept.min(bytes.len());
        tails.push(Tail {
            name: header.name,
            size: header.size,
            bytes: bytes[..kept].to_vec(),
        });
        bytes = &bytes[kept..];
    }
    (tails, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readers_output_is_split_into_its_files() {
        let mut out = b"{\"name\": \"a.out\", \"size\": 10, \"kept\": 3}\nxyz".to_vec();
        out.extend_from_slice(b"{\"name\": \"b.err\", \"error\": \"[Errno 2] gone\"}\n");
        out.extend_from_slice(b"{\"name\": \"c.log\", \"size\": 2, \"kept\": 2}\n\n\n");
        let (tails, problems) = split_tails(&out);
        assert_eq!(tails.len(), 2);
        assert_eq!((tails[0].name.as_str(), tails[0].size), ("a.out", 10));
        assert_eq!(tails[0].bytes, b"xyz");
        assert_eq!(tails[1].bytes, b"\n\n");
        assert_eq!(
            problems,
            [("b.err".to_string(), "[Errno 2] gone".to_string())]
        );
        // Cut short: what is there is kept.
        let (tails, _) = split_tails(b"{\"name\": \"a\", \"size\": 9, \"kept\": 9}\nabc");
        assert_eq!(tails[0].bytes, b"abc");
    }
}
