//! Snapshots of what a human reviews: the help text and the plans of the shipped profiles.

use argus::cluster::plan::{PlanInputs, plan};
use argus::config::LoadedProfile;

use crate::harness::TestContext;

#[test]
fn help_texts() {
    let ctx = TestContext::new("help");
    for args in [
        vec!["--help"],
        vec!["up", "--help"],
        vec!["image", "build", "--help"],
    ] {
        let run = ctx.argus().args(&args).run().code(0);
        insta::assert_snapshot!(
            format!("help-{}", args.join("-").replace("--", "")),
            run.stdout
        );
    }
}

#[test]
fn plans_of_the_gpu_profiles() {
    for file in ["h20-8gpu", "multi-host"] {
        let loaded =
            LoadedProfile::load(Some(std::path::Path::new(&format!("profiles/{file}.yaml"))))
                .expect("profile");
        let plan = plan(
            &loaded,
            &PlanInputs {
                image_id: "sha256:image".into(),
                ..Default::default()
            },
        );
        insta::assert_yaml_snapshot!(format!("plan-{file}"), plan);
    }
}
