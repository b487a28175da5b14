//! Hostile driver logs through `argus job metrics` and `job plot`, from saved records
//! alone (no cluster): steps in descending order, a log whose every step logs new names,
//! names a terminal or a spreadsheet would act on, values near the largest f64. Each is
//! read whole or within the table's bounds (what was left out said in one warning), and
//! every command ends.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::harness::{Run, TestContext, free_port, test_profile};

fn argus(ctx: &TestContext, profile: &Path, args: &[&str]) -> Run {
    ctx.argus().profile(profile).args(args).run()
}

/// A finished job's record with this driver log.
fn saved_job(shared: &Path, id: &str, log: &str) {
    let dir = shared.join("jobs").join(id);
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    std::fs::write(dir.join("logs/driver.log"), log).expect("log");
    let record = serde_json::json!({
        "submission_id": id, "workload": "ppo", "code_id": "c", "code_path": "/mnt/shared/common/code/verl/c",
        "entrypoint": "python3 -m verl.trainer.main_ppo", "cluster": "gone", "dashboard": "",
        "submitted_at": "2026-01-01T00:00:00Z", "status": "SUCCEEDED",
        "start_time": 1_000_000, "end_time": 1_090_000,
    });
    std::fs::write(dir.join("job.json"), record.to_string()).expect("record");
}

fn setup(test: &str) -> (TestContext, std::path::PathBuf, std::path::PathBuf) {
    let mut ctx = TestContext::new(test);
    let name = ctx.cluster("c");
    let shared = ctx.path("shared");
    let profile = ctx.write("p.yaml", &test_profile(&name, &shared, free_port(), 1, ""));
    (ctx, shared, profile)
}

fn step_line(step: u64, metrics: &[(String, f64)]) -> String {
    let mut line = format!("\x1b[36m(TaskRunner pid=7)\x1b[0m step:{step}");
    for (key, value) in metrics {
        write!(line, " - {key}:{value:?}").expect("write");
    }
    line + "\n"
}

#[test]
fn descending_steps_and_ever_new_names_are_read_in_full_or_within_bounds() {
    let (ctx, shared, profile) = setup("hlogs");
    let metrics = |step: u64| vec![("a".to_string(), step as f64 / 8.0), ("b".to_string(), 1.5)];
    let up: String = (1..=20_000).map(|s| step_line(s, &metrics(s))).collect();
    let down: String = (1..=20_000)
        .rev()
        .map(|s| step_line(s, &metrics(s)))
        .collect();
    saved_job(&shared, "up", &up);
    saved_job(&shared, "down", &down);
    let csv = argus(&ctx, &profile, &["job", "metrics", "down", "--csv"]).code(0);
    assert_eq!(
        csv.stdout,
        argus(&ctx, &profile, &["job", "metrics", "up", "--csv"])
            .code(0)
            .stdout
    );
    assert_eq!(csv.stdout.lines().count(), 20_001);

    // Every step logs ten names never seen before: the first 4096 are kept, the values of
    // the others counted in one warning.
    let log: String = (0..1000)
        .map(|s| {
            step_line(
                s,
                &(0..10)
                    .map(|i| (format!("s{s}/k{i}"), 1.0))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    saved_job(&shared, "new-names", &log);
    let run = argus(&ctx, &profile, &["job", "metrics", "new-names", "--csv"]).code(0);
    let header = run.stdout.lines().next().expect("header");
    assert_eq!(header.split(',').count(), 1 + 4096, "{}", &header[..80]);
    assert_eq!(
        run.stdout.lines().count(),
        1 + 410,
        "steps with a kept name"
    );
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: the log of new-names: left out 5904 value(s) of metrics named after the first 4096 names"
        ],
        "{}",
        run.stderr
    );
}

#[test]
fn json_holds_what_csv_prints() {
    let (ctx, shared, profile) = setup("hlogsjson");
    let log: String = (0..3000)
        .map(|s| {
            let mut m = vec![
                ("critic/score/mean".to_string(), s as f64 / 1024.0),
                ("actor/lr".to_string(), 1e-6),
            ];
            if s % 7 == 0 {
                m.push(("val-core/x/reward/mean@1".to_string(), f64::NAN));
            }
            step_line(s, &m)
        })
        .collect();
    saved_job(&shared, "j", &log);
    let csv = argus(&ctx, &profile, &["job", "metrics", "j", "--csv"]).code(0);
    let json = argus(&ctx, &profile, &["job", "metrics", "j", "--json"])
        .code(0)
        .json();
    let keys: Vec<&str> = json["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k.as_str().expect("key"))
        .collect();
    let mut lines = csv.stdout.lines();
    assert_eq!(
        lines.next().expect("header"),
        format!("step,{}", keys.join(","))
    );
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3000);
    for (line, row) in lines.zip(rows) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[0], row["step"].to_string());
        for (key, cell) in keys.iter().zip(&cells[1..]) {
            let value = &row["metrics"][*key];
            match *cell {
                "" => assert!(value.is_null(), "{line}: {key}"),
                "nan" => assert_eq!(value, "nan"),
                number => assert_eq!(
                    value.as_f64(),
                    Some(number.parse::<f64>().expect("number")),
                    "{line}: {key}"
                ),
            }
        }
    }
}

#[test]
fn names_a_terminal_or_a_spreadsheet_would_act_on_never_reach_them() {
    let (ctx, shared, profile) = setup("hlogsnames");
    let log = "\
step:1 - =HYPERLINK(\"http://x\",\"y\"):1 - +1:2 - @SUM(A1):3 - plain:4
step:2 - plain:5 - \x1b]0;owned\x07:6
step:3 - a\u{202e}b:7 - plain:8
step:4 - c\u{9b}2J:9
";
    saved_job(&shared, "names", log);
    let csv = argus(&ctx, &profile, &["job", "metrics", "names", "--csv"]).code(0);
    assert_eq!(
        csv.stdout,
        "step,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",\"'+1\",\"'@SUM(A1)\",plain\n1,1,2,3,4\n"
    );
    for args in [&["--csv"][..], &["--json"], &[]] {
        let run = argus(
            &ctx,
            &profile,
            &[&["job", "metrics", "names"][..], args].concat(),
        )
        .code(0);
        for text in [&run.stdout, &run.stderr] {
            assert!(
                !text.contains(|c: char| (c.is_control() && c != '\n')
                    || ('\u{202a}'..='\u{202e}').contains(&c)),
                "{args:?}: {text:?}"
            );
        }
    }
}

#[test]
fn plots_of_extreme_values_and_of_many_names_end_and_stay_small() {
    let (ctx, shared, profile) = setup("hlogsplot");
    let log: String = [f64::MAX, -f64::MAX, 1.0, f64::NAN, f64::MAX / 3.0]
        .iter()
        .enumerate()
        .map(|(s, &v)| step_line(s as u64, &[("critic/score/mean".to_string(), v)]))
        .collect();
    saved_job(&shared, "huge", &log);
    let out = ctx.path("huge.svg");
    let out_arg = out.to_str().expect("path");
    argus(&ctx, &profile, &["job", "plot", "huge", "-o", out_arg]).code(0);
    let svg = std::fs::read_to_string(&out).expect("svg");
    assert!(
        svg.contains("\u{d7}1e308"),
        "the scale is named on the axis"
    );

    // Forty names matching --keys: the figure keeps to its panel limit, and says so.
    let names: Vec<(String, f64)> = (0..40).map(|i| (format!("m/{i}"), i as f64)).collect();
    saved_job(
        &shared,
        "many",
        &(step_line(1, &names) + &step_line(2, &names)),
    );
    let out = ctx.path("many.png");
    let run = argus(
        &ctx,
        &profile,
        &[
            "job",
            "plot",
            "many",
            "--keys",
            "m/*",
            "-o",
            out.to_str().expect("path"),
            "--json",
        ],
    )
    .code(0);
    assert!(
        run.stderr
            .contains("40 metrics match; plotting the first 24"),
        "{}",
        run.stderr
    );
    let report: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(
        report["figure"]["panels"].as_array().map(Vec::len),
        Some(24)
    );
}
