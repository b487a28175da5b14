//! Which of a node's Ray log files a bundle takes, and how many of each one's last bytes:
//! the job's own logs first, within the per-file and per-node caps.

use crate::cluster::collect::{LogFile, Wanted};

/// Which of a container's log files a bundle takes, most telling first, each as its last
/// `file_cap` bytes, all within `node_cap`: the job's workers' `.err` and `.out` (named by
/// the Ray job id when known, else written since the job started), their
/// python-core-worker logs, the job's driver core log and runtime-env setup log, raylet
/// and gcs_server, and (on the head, when argus saved no driver log) the driver's own.
pub fn choose(
    listing: &[LogFile],
    job_hex: Option<&str>,
    since_s: f64,
    driver_of: Option<&str>,
    file_cap: u64,
    node_cap: u64,
) -> Vec<Wanted> {
    let picks = Picks {
        job_hex,
        since_s,
        driver_of,
    };
    let worker_ids: Vec<&str> = listing
        .iter()
        .filter(|f| matches!(picks.class(f, None), Some(0 | 1)))
        .filter_map(|f| f.name.strip_prefix("worker-")?.split('-').next())
        .collect();
    let mut classed: Vec<(usize, &LogFile)> = listing
        .iter()
        .filter_map(|f| Some((picks.class(f, Some(&worker_ids))?, f)))
        .collect();
    classed.sort_by_key(|(class, _)| *class);
    let mut left = node_cap;
    let mut out = Vec::new();
    for (_, f) in classed {
        let keep = f.size.min(file_cap).min(left);
        if keep == 0 {
            continue;
        }
        left -= keep;
        out.push(Wanted {
            name: f.name.clone(),
            keep,
        });
    }
    out
}

/// Which of a node's log files belong in the bundle of a job.
struct Picks<'a> {
    job_hex: Option<&'a str>,
    since_s: f64,
    driver_of: Option<&'a str>,
}

impl Picks<'_> {
    fn of_job(&self, f: &LogFile) -> bool {
        match self.job_hex {
            Some(hex) => f.name.contains(hex),
            None => f.mtime >= self.since_s,
        }
    }

    /// The file's class (its rank in a bundle, most telling first), None when it is not
    /// wanted. `worker_ids`: the job's workers, whose core-worker logs are wanted (None:
    /// not known, those written since the job started).
    fn class(&self, f: &LogFile, worker_ids: Option<&[&str]>) -> Option<usize> {
        let name = f.name.as_str();
        let worker = name.starts_with("worker-") && self.of_job(f);
        let core_worker = name
            .strip_prefix("python-core-worker-")
            .and_then(|rest| rest.split('_').next())
            .is_some_and(|wid| match worker_ids {
                Some(ids) => ids.contains(&wid),
                None => f.mtime >= self.since_s,
            });
        let checks = [
            worker && name.ends_with(".err"),
            worker && name.ends_with(".out"),
            name.starts_with("python-core-driver-") && self.of_job(f),
            core_worker,
            name.starts_with("runtime_env_setup-") && self.of_job(f),
            name == "raylet.err",
            name == "raylet.out",
            name == "gcs_server.err",
            name == "gcs_server.out",
            self.driver_of
                .is_some_and(|id| name == format!("job-driver-{id}.log")),
        ];
        checks.iter().position(|c| *c)
    }
}

/// For a node that is not running (its files come one after the other): how many of a
/// file's last bytes to keep, by the rules of [`choose`] (a core-worker log by its time).
pub fn pick_one(
    f: &LogFile,
    job_hex: Option<&str>,
    since_s: f64,
    driver_of: Option<&str>,
    file_cap: u64,
) -> u64 {
    let picks = Picks {
        job_hex,
        since_s,
        driver_of,
    };
    match picks.class(f, None) {
        Some(_) => f.size.min(file_cap),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, size: u64, mtime: f64) -> LogFile {
        LogFile {
            name: name.into(),
            size,
            mtime,
        }
    }

    #[test]
    fn the_jobs_own_logs_are_chosen_first_within_the_caps() {
        let w1 = "aa11";
        let w2 = "bb22";
        let listing = vec![
            file("gcs_server.out", 5000, 10.0),
            file("raylet.out", 3000, 10.0),
            file("raylet.err", 0, 10.0),
            file(&format!("worker-{w1}-02000000-77.err"), 100, 10.0),
            file(&format!("worker-{w1}-02000000-77.out"), 50, 10.0),
            file(&format!("worker-{w2}-01000000-66.err"), 100, 10.0),
            file(&format!("python-core-worker-{w1}_77.log"), 2000, 10.0),
            file(&format!("python-core-worker-{w2}_66.log"), 2000, 10.0),
            file("python-core-driver-02000000ffff_9.log", 10, 10.0),
            file("job-driver-j1.log", 10, 10.0),
            file("dashboard.log", 10, 10.0),
        ];
        let names = |w: Vec<Wanted>| w.into_iter().map(|w| (w.name, w.keep)).collect::<Vec<_>>();
        let got = names(choose(&listing, Some("02000000"), 0.0, None, 1000, 100_000));
        assert_eq!(
            got,
            [
                (format!("worker-{w1}-02000000-77.err"), 100),
                (format!("worker-{w1}-02000000-77.out"), 50),
                ("python-core-driver-02000000ffff_9.log".into(), 10),
                (format!("python-core-worker-{w1}_77.log"), 1000),
                ("raylet.out".into(), 1000),
                ("gcs_server.out".into(), 1000),
            ]
        );
        // The node's cap cuts the least telling; the driver's file only when asked.
        let got = names(choose(
            &listing,
            Some("02000000"),
            0.0,
            Some("j1"),
            1000,
            1200,
        ));
        assert_eq!(got.iter().map(|(_, k)| k).sum::<u64>(), 1200);
        assert_eq!(got[0].0, format!("worker-{w1}-02000000-77.err"));
        assert_eq!(got.last().unwrap(), &("raylet.out".to_string(), 40));
        let got = names(choose(
            &listing,
            Some("02000000"),
            0.0,
            Some("j1"),
            1000,
            1 << 20,
        ));
        assert_eq!(got.last().unwrap().0, "job-driver-j1.log");
        // Without the Ray job id: the workers' files written since the job started.
        let mut old = listing.clone();
        old[5].mtime = 1.0;
        let got = names(choose(&old, None, 5.0, None, 1000, 1 << 20));
        assert!(got.iter().any(|(n, _)| n.contains(w1)));
        assert!(
            !got.iter()
                .any(|(n, _)| n.contains(w2) && n.starts_with("worker-"))
        );
    }
}
