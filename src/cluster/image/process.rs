//! Build steps as subprocesses: run in the rootfs (chroot), their output streamed into
//! the task's status line and kept for the error message.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::ui::Task;

use super::BuildError;

pub(super) fn chroot(rootfs: &Path, env: &[(String, String)]) -> Command {
    let mut command = Command::new("chroot");
    command.arg(rootfs).env("HOME", "/root").env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Runs a build step, showing its output as it goes; keeps the tail for the error.
pub(super) async fn run_step(
    task: &dyn Task,
    step: &str,
    command: &mut Command,
) -> Result<(), BuildError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BuildError::Io {
            path: step.to_string(),
            source,
        })?;
    let stdout = child.stdout.take().map(|s| BufReader::new(s).lines());
    let stderr = child.stderr.take().map(|s| BufReader::new(s).lines());
    let mut tail: Vec<String> = Vec::new();
    let push = |line: String, tail: &mut Vec<String>| {
        task.update(&line);
        tail.push(line);
        if tail.len() > 30 {
            tail.remove(0);
        }
    };
    if let (Some(mut out), Some(mut err)) = (stdout, stderr) {
        let (mut out_done, mut err_done) = (false, false);
        while !(out_done && err_done) {
            tokio::select! {
                line = out.next_line(), if !out_done => match line { Ok(Some(l)) => push(l, &mut tail), _ => out_done = true },
                line = err.next_line(), if !err_done => match line { Ok(Some(l)) => push(l, &mut tail), _ => err_done = true },
            }
        }
    }
    let status = child.wait().await.map_err(|source| BuildError::Io {
        path: step.to_string(),
        source,
    })?;
    if !status.success() {
        task.fail(&format!("{step} failed"));
        return Err(BuildError::Step {
            step: step.to_string(),
            status: status.to_string(),
            output: tail.join("\n"),
        });
    }
    Ok(())
}
