//! Why a job failed, in the job's own words: the exception its driver's log names after
//! the last training step. Ray wraps an actor's exception (`RayTaskError(ValueError):
//! ray::TaskRunner.run() ...`) and Python adds noise at shutdown (`RuntimeError: can't
//! register atexit after shutdown`): the first exception line after the last step that
//! is not Ray's wrapper is the one that ended the job. Pure.

/// The exception line that ended the job, if its log names one: after Ray's last
/// wrapper line, the first exception it wraps; without one, the first exception of the
/// first traceback after the last step (a step line can arrive after the traceback: Ray
/// forwards actors' lines late), else of the first traceback.
pub fn job_error(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(strip_prefix).collect();
    let first_exception_from = |from: usize| {
        lines[from..]
            .iter()
            .find(|l| is_exception_line(l) && !is_ray_wrapper(l))
            .map(|l| l.to_string())
    };
    if let Some(wrapper) = lines.iter().rposition(|l| is_ray_wrapper(l)) {
        return first_exception_from(wrapper + 1);
    }
    let last_step = lines
        .iter()
        .rposition(|l| {
            matches!(
                crate::training::log::parse_line(l),
                crate::training::log::Line::Step { .. }
            )
        })
        .map_or(0, |i| i + 1);
    let traceback = |from: usize| {
        lines[from..]
            .iter()
            .position(|l| l.starts_with("Traceback (most recent call last)"))
            .map(|i| from + i)
    };
    traceback(last_step)
        .or_else(|| traceback(0))
        .and_then(first_exception_from)
}

/// A line without Ray's `(Actor pid=N, ip=...)` prefix.
fn strip_prefix(line: &str) -> &str {
    let line = line.trim();
    match line
        .strip_prefix('(')
        .and_then(|rest| rest.split_once(") "))
    {
        Some((inside, rest)) if inside.contains("pid=") => rest.trim(),
        _ => line,
    }
}

/// `Name: message` where Name is a Python exception (`ValueError`, `torch.OutOfMemoryError`,
/// `ray.exceptions.ActorDiedError`).
fn is_exception_line(line: &str) -> bool {
    let Some((name, message)) = line.split_once(": ") else {
        return false;
    };
    let name = name.split('(').next().unwrap_or(name);
    !message.is_empty()
        && (name.ends_with("Error") || name.ends_with("Exception") || name.ends_with("Interrupt"))
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
}

/// Ray's wrapper around an actor's or task's exception: the wrapped one follows.
fn is_ray_wrapper(line: &str) -> bool {
    ["ray.exceptions.RayTaskError", "RayTaskError"]
        .iter()
        .any(|w| line.starts_with(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exception_after_the_last_step_not_rays_wrapper_nor_the_shutdown_noise() {
        let log = "\
(TaskRunner pid=7) step:1 - actor/pg_loss:0.1
(TaskRunner pid=7) ValueError: an earlier warning printed as text
(TaskRunner pid=7) step:2 - actor/pg_loss:0.2
Traceback (most recent call last):
  File \"/x/main_ppo.py\", line 3, in <module>
ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=7, ip=10.0.0.2)
  File \"/x/main_ppo.py\", line 9, in run
ValueError: FAKE_FAIL_AT: the batch of step 3 is bad
Exception ignored in atexit callback
RuntimeError: can't register atexit after shutdown
";
        assert_eq!(
            job_error(log).as_deref(),
            Some("ValueError: FAKE_FAIL_AT: the batch of step 3 is bad")
        );
        assert_eq!(
            job_error(
                "(WorkerDict pid=9) Traceback (most recent call last):\n(WorkerDict pid=9, ip=10.0.0.3) torch.OutOfMemoryError: CUDA out of memory.\n"
            )
            .as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory.")
        );
        assert_eq!(job_error("all good\nstep:3 - a:1\n"), None);
        // The actor's step line forwarded after the driver's traceback; no Ray wrapper.
        let late = "\
Traceback (most recent call last):
omegaconf.errors.ConfigAttributeError: Key 'x' is not in struct
(TaskRunner pid=7) step:1 - a:1
";
        assert_eq!(
            job_error(late).as_deref(),
            Some("omegaconf.errors.ConfigAttributeError: Key 'x' is not in struct")
        );
        assert_eq!(job_error("Note: not an error\n"), None);
    }
}
