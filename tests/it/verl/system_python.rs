//! verl on an image argus did not build: verl 0.8.0's CPU dependencies and the shim in the
//! SYSTEM Python beside Ray (`tests/fixtures/system-python-image.sh verl`), as verl's own
//! images have them; the built-in profile otherwise as shipped.

use crate::foreign_image::system_image;
use crate::harness::TestContext;

use super::{builtin_profile, verl_step_lines};

/// On demand (`tests/run.sh --run-ignored only -E 'test(system_python)'`): its 8 GB image
/// and training take 15-20 minutes on this machine kind, which CI's time cannot hold beside
/// the verl 0.9.1 and 0.8.0 images; the system-Python layout itself is in CI
/// (`foreign_image`: up, quickstart, diagnose, Slurm on the Ray-only image).
#[test]
#[ignore = "real verl on a system-Python image: 8 GB and 15-20 min, run on demand"]
fn verl_grpo_trains_on_a_system_python_image() {
    let Some(mut ctx) = TestContext::docker_engine() else {
        return;
    };
    let image = system_image("verl");
    let (profile, shared) = builtin_profile(&mut ctx, "");
    let text = std::fs::read_to_string(&profile).expect("profile");
    assert!(text.contains("\nimage: argus/verl:0.9.1-cpu\n"), "{text}");
    std::fs::write(
        &profile,
        text.replace(
            "\nimage: argus/verl:0.9.1-cpu\n",
            &format!("\nimage: {image}\n"),
        ),
    )
    .expect("profile");

    let report = ctx
        .argus()
        .profile(&profile)
        .args([
            "run",
            "--json",
            // The image holds verl 0.8.0's dependencies (the fixture installs its lock).
            "profiles/jobs/verl-grpo-cpu-0.8.0.yaml",
            "--set",
            "total_training_steps=2",
            "--set",
            "save_freq=2",
        ])
        .run()
        .code(0)
        .json();
    assert_eq!(report["job_status"], "SUCCEEDED", "{report:#}");
    let id = report["submission_id"].as_str().expect("submission_id");
    let log = std::fs::read_to_string(shared.join(format!("jobs/{id}/logs/driver.log")))
        .expect("driver.log");
    assert!(log.contains("Total training steps: 2"), "{log}");
    assert_eq!(
        verl_step_lines(&log).keys().copied().collect::<Vec<_>>(),
        [1, 2],
        "{log}"
    );
    let checkpoints = shared.join(format!("jobs/{id}/checkpoints/global_step_2/actor"));
    for rank in 0..2 {
        let file = checkpoints.join(format!("model_world_size_2_rank_{rank}.pt"));
        assert!(file.is_file(), "{} missing", file.display());
    }
    // The run's lock pins that image; its tools are the system Python's.
    let lock = std::fs::read_to_string(report["lock"].as_str().expect("lock")).expect("lock");
    assert!(lock.contains(&format!("reference: {image}")), "{lock}");
    let doctor = ctx
        .argus()
        .profile(&profile)
        .args(["--json", "doctor"])
        .run()
        .json();
    let tools = doctor["hosts"][0]["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "image_tools").cloned())
        .expect("image_tools");
    assert_eq!(tools["status"], "ok", "{tools:#}");
    assert!(
        tools["seen"]
            .as_str()
            .unwrap_or_default()
            .contains("/usr/local/lib/python3.11/dist-packages"),
        "{tools:#}"
    );

    ctx.argus().profile(&profile).args(["down"]).run().code(0);
}
