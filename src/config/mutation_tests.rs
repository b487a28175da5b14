//! A bounded property test of the parsers a user's files reach (profile, JobSpec, run
//! lock): mutated YAML, from a fixed seed, must never panic, never hang, and always end
//! in Ok or in one error that says where (file:line:col; the lock: its file).
//!
//! `cargo fuzz` needs a nightly toolchain, which this project's machines do not have
//! (one stable toolchain, no other can be fetched), so this is a seeded generator instead:
//! no dependency, the same cases on every run, a few seconds in a debug build.
//! `ARGUS_MUTATIONS=<n>` and `ARGUS_MUTATION_SEED=<n>` run more, or others.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use super::jobspec::LoadedJobSpec;
use super::profile::LoadedProfile;
use super::yaml::Source;
use crate::run::lock::RunLock;

/// xorshift64*: small, fast, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What a careless user or a careful attacker types: traversal, NUL, look-alikes, YAML
/// syntax (anchors, tags, merges, flow), huge and odd numbers.
const TOKENS: &[&str] = &[
    "..",
    "../../etc/passwd",
    "/etc",
    "\0",
    "-1",
    "0",
    "1e309",
    ".nan",
    ".inf",
    "-.inf",
    "100000",
    "4294967296",
    "18446744073709551616",
    "10000000t",
    "1.5.3g",
    "!!binary",
    "!ppo",
    "&a",
    "*a",
    "<<: *a",
    "{",
    "}",
    "[",
    "]",
    ":",
    ": ",
    "- ",
    "\n",
    "\t",
    "\"",
    "'",
    "#",
    "%",
    "@",
    "`",
    "|",
    ">",
    "~",
    "?",
    ",",
    "\u{043e}",
    "\u{200b}",
    "\u{feff}",
    "---\n",
    "...",
    "key: value\n",
    "env: {A: 1, A: 2}\n",
    "[ppo]",
    "{ppo: 1}",
    "null",
    "true",
    "tcp://h:99999",
    "garbage",
    "10.0.0.5,nolock",
    "rw,addr=1.2.3.4",
    "$(id)",
    "${HOME}",
    "${UNSET_VAR}",
    "~/x",
    "a/b",
    "-rf",
    "0x10",
    "0o7",
    "+1",
    "1_000",
];

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let len = chars.len();
        match rng.below(7) {
            0 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(8)).min(len);
                chars.drain(at..end);
            }
            1 | 2 => {
                let at = rng.below(len + 1);
                let token = TOKENS[rng.below(TOKENS.len())];
                chars.splice(at..at, token.chars());
            }
            3 => {
                // Replace a value after ": " with a token.
                let s: String = chars.iter().collect();
                let lines: Vec<&str> = s.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let i = rng.below(lines.len());
                let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                if let Some((key, _)) = lines[i].split_once(": ") {
                    out[i] = format!("{key}: {}", TOKENS[rng.below(TOKENS.len())]);
                }
                chars = (out.join("\n") + "\n").chars().collect();
            }
            4 | 5 => {
                // Duplicate or swap lines (duplicate keys, wrong nesting).
                let s: String = chars.iter().collect();
                let mut lines: Vec<String> = s.lines().map(str::to_string).collect();
                if lines.len() < 2 {
                    continue;
                }
                let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                if rng.below(2) == 0 {
                    let line = lines[a].clone();
                    lines.insert(b, line);
                } else {
                    lines.swap(a, b);
                }
                chars = (lines.join("\n") + "\n").chars().collect();
            }
            _ => {
                // Re-indent a line.
                let s: String = chars.iter().collect();
                let mut lines: Vec<String> = s.lines().map(str::to_string).collect();
                if lines.is_empty() {
                    continue;
                }
                let i = rng.below(lines.len());
                let pad = " ".repeat(rng.below(6));
                lines[i] = format!("{pad}{}", lines[i].trim_start());
                chars = (lines.join("\n") + "\n").chars().collect();
            }
        }
    }
    chars.into_iter().collect()
}

const PROFILES: &[&str] = &[
    include_str!("../../profiles/local.yaml"),
    include_str!("../../profiles/h20-8gpu.yaml"),
    include_str!("../../profiles/multi-host.yaml"),
    "name: t\nimage: argus/ray:2.51.1\nnetwork: {mode: host, head_address: 10.0.0.1}\nshared: {nfs: {server: nas, export: /e, options: 'nfsvers=4.1,rw'}}\nenv: {HF_ENDPOINT: x}\nray: {auth: disabled, dashboard_port: 8265}\nsubmit: {entrypoint_resources: {worker_node: 1}, runtime_env: {env_vars: {A: '1'}}}\nworkers:\n  - {name: g, count: 2, gpus: 2, gpu_mode: nvidia, device_ids: [[0, 1], [2, 3]], memory: 2g}\n",
];

const JOBSPECS: &[&str] = &[
    include_str!("../../profiles/jobs/ppo.yaml"),
    include_str!("../../profiles/jobs/grpo.yaml"),
    include_str!("../../profiles/jobs/sft.yaml"),
    include_str!("../../profiles/jobs/quickstart.yaml"),
    "workload: ppo\nsubmission_id: r-1\ncode_path: /mnt/shared/common/code/verl/a\ntrain_file: gsm8k\nval_file: /mnt/shared/x.parquet\noverrides: ['a.b=1', '+c=2', '~d']\nenv_vars: {DB_PASS: xyzzy1}\ntime_limit: 1h\n",
];

const LOCK: &str = "format: 1\nrun_id: run-1\ncreated: t\nargus_version: 0.1.0\nimage: {reference: 'argus/ray:2.51.1', id: 'sha256:a'}\nray_version: 2.51.1\nprofile: {name: x}\njobspec: {workload: ppo}\ncode: {name: verl, code_id: c, tree_hash: t}\ndatasets: [{name: gsm8k, source: s, files: [{file: train.parquet, sha256: s1, rows: 1}]}]\nsubmission_id: j\n";

/// The number of cases per parser and the seed: fixed unless asked otherwise.
fn budget() -> (usize, u64) {
    let n = std::env::var("ARGUS_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let seed = std::env::var("ARGUS_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0a26_5eed_0000_0001);
    (n, seed)
}

/// Runs `parse` on `n` mutations of the seeds; returns (ok, err) counts, panics with the
/// failing document when a case panics, takes too long or errs without a location.
fn check_parser(
    what: &str,
    seeds: &[&str],
    n: usize,
    seed: u64,
    parse: impl Fn(&str) -> Result<(), String>,
) -> (usize, usize) {
    let mut rng = Rng(seed | 1);
    let (mut ok, mut err) = (0, 0);
    for i in 0..n {
        let text = mutate(&mut rng, seeds[i % seeds.len()]);
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| parse(&text)));
        let took = started.elapsed();
        // A hang, not a slow machine: two cores shared with other builds are slow enough.
        assert!(
            took < Duration::from_secs(5),
            "{what}: case {i} took {took:?}:\n{text}"
        );
        match result {
            Ok(Ok(())) => ok += 1,
            Ok(Err(message)) => {
                assert!(
                    !message.is_empty(),
                    "{what}: case {i}: empty error:\n{text}"
                );
                err += 1;
            }
            Err(_) => panic!("{what}: case {i} panicked (seed {seed}):\n{text:?}"),
        }
    }
    (ok, err)
}

/// A config error must say where: `<origin>:<line>:<col>: ...` with both at least 1.
fn located(err: &super::ConfigError) -> Result<(), String> {
    let text = err.to_string();
    if err.line == 0 || err.column == 0 {
        return Err(format!("an error without a location: {text}"));
    }
    let prefix = format!("{}:{}:{}: ", err.origin.display(), err.line, err.column);
    if !text.starts_with(&prefix) {
        return Err(format!(
            "an error that does not start with {prefix:?}: {text}"
        ));
    }
    Err(text)
}

#[test]
fn mutated_profiles_never_panic_and_every_error_is_located() {
    let (n, seed) = budget();
    let (ok, err) =
        check_parser(
            "profile",
            PROFILES,
            n,
            seed,
            |text| match LoadedProfile::from_source(Source::new("p.yaml", text)) {
                Ok(_) => Ok(()),
                Err(e) => match located(&e) {
                    Err(m) if m.starts_with("an error ") => panic!("{m}\n--- document\n{text}"),
                    other => other,
                },
            },
        );
    assert!(
        ok > 0 && err > n / 4,
        "too few of each to mean much: {ok} ok, {err} errors"
    );
}

#[test]
fn mutated_jobspecs_never_panic_and_every_error_is_located() {
    let (n, seed) = budget();
    let (ok, err) = check_parser("jobspec", JOBSPECS, n, seed ^ 0x9e37, |text| {
        match LoadedJobSpec::from_source(Source::new("j.yaml", text), &[]) {
            Ok(j) => {
                // What loads must also survive the shared-storage check and round-trip.
                if let Err(e) = j.check_on_shared("/mnt/shared") {
                    located(&e).ok();
                }
                let record = super::yaml::to_string(&j.spec);
                LoadedJobSpec::from_source(Source::new("again.yaml", &record), &[])
                    .map(|_| ())
                    .map_err(|e| panic!("a loaded JobSpec did not load again: {e}\n{record}"))
            }
            Err(e) => match located(&e) {
                Err(m) if m.starts_with("an error ") => panic!("{m}\n--- document\n{text}"),
                other => other,
            },
        }
    });
    assert!(
        ok > 0 && err > n / 4,
        "too few of each to mean much: {ok} ok, {err} errors"
    );
}

#[test]
fn mutated_run_locks_never_panic_and_every_error_names_the_file() {
    let (n, seed) = budget();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.lock.yaml");
    let (ok, err) = check_parser("lock", &[LOCK], n / 3, seed ^ 0x7f4a, |text| {
        std::fs::write(&path, text).unwrap();
        match RunLock::read(&path) {
            Ok(_) => Ok(()),
            Err(e) if e.contains(&path.display().to_string()) => Err(e),
            Err(e) => panic!("a lock error that does not name its file: {e}"),
        }
    });
    assert!(ok > 0 && err > 0, "{ok} ok, {err} errors");
}

#[test]
fn alias_bombs_are_refused_quickly() {
    // Each level doubles: 2^30 scalars if expanded.
    let mut text = String::from("name: &a0 [x, x]\n");
    for i in 1..30 {
        text.push_str(&format!("l{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
    }
    let started = Instant::now();
    assert!(LoadedProfile::from_source(Source::new("bomb.yaml", &text)).is_err());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
