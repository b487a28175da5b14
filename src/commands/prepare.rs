//! `argus prepare`.

use crate::commands::error::{Context, Result};

use crate::cli::PrepareArgs;
use crate::config::LoadedProfile;
use crate::data::{self, Dataset, DatasetReport, Prepare, Request};
use crate::exit::Exit;
use crate::ui::{Printer, human_bytes};

pub async fn run(loaded: &LoadedProfile, args: &PrepareArgs, printer: &Printer) -> Result<Exit> {
    let host = loaded.host_layout()?;
    let (mut models, mut datasets) = (args.model.clone(), args.dataset.clone());
    if models.is_empty() && datasets.is_empty() {
        models = loaded.profile.prepare.models.clone();
        datasets = loaded.profile.prepare.datasets.clone();
        if models.is_empty() && datasets.is_empty() {
            printer.info("nothing to prepare: pass --dataset / --model, or list them in the profile's `prepare:` section");
            return Ok(Exit::Success);
        }
    }
    // Everything the command needs is checked before anything is sent or written.
    let datasets = datasets
        .iter()
        .map(|d| Dataset::parse(d))
        .collect::<Result<Vec<_>, _>>()?;
    for model in &models {
        data::parse_model(model).with_context(|| format!("cannot prepare model {model:?}"))?;
    }
    let prepare = Prepare {
        client: data::hub_client(loaded),
        host,
        mount: loaded.profile.container_layout(),
    };
    prepare.check_request(&Request {
        models: &models,
        any_dataset: !datasets.is_empty(),
        from: args.from.as_deref(),
        model_from: args.model_from.as_deref(),
        include: &args.include,
        exclude: &args.exclude,
    })?;
    let reporter = printer.reporter();
    let mut reports = Vec::new();
    // Datasets first: their input is checked whole (every row) before a model is fetched.
    for dataset in datasets {
        let report = data::prepare_dataset(&prepare, dataset, args.from.as_deref(), &reporter)
            .await
            .with_context(|| format!("cannot prepare dataset {}", dataset.dir_name()))?;
        print_dataset(printer, &report);
        reports.push(serde_json::to_value(&report)?);
    }
    for model in &models {
        let report = match &args.model_from {
            Some(dir) => data::local_model::import(&prepare, model, dir, &reporter),
            None => {
                data::prepare_model(&prepare, model, &args.include, &args.exclude, &reporter).await
            }
        }
        .with_context(|| format!("cannot prepare model {model}"))?;
        print_model(printer, &report, args.model_from.is_some());
        reports.push(serde_json::to_value(&report)?);
    }
    if printer.json {
        printer.json(&serde_json::Value::Array(reports));
    }
    Ok(Exit::Success)
}

fn print_dataset(printer: &Printer, report: &DatasetReport) {
    if printer.json {
        return;
    }
    let rows: Vec<String> = report
        .outputs
        .iter()
        .map(|o| format!("{} ({} rows)", o.file, o.rows))
        .collect();
    let what = if report.written {
        "written"
    } else {
        "already up to date"
    };
    printer.info(format!(
        "dataset {} from {}: {what}: {}",
        report.dataset.dir_name(),
        report.source,
        rows.join(", ")
    ));
    printer.data(&report.path);
}

fn print_model(printer: &Printer, report: &data::ModelReport, copied: bool) {
    if printer.json {
        return;
    }
    let what = if report.files_downloaded == 0 {
        "already complete".to_string()
    } else {
        format!(
            "{} files, {} {}",
            report.files_downloaded,
            human_bytes(report.bytes_downloaded),
            if copied { "copied" } else { "downloaded" }
        )
    };
    printer.info(format!(
        "model {}@{} ({}): {what}",
        report.repo,
        report.revision,
        &report.commit[..report.commit.len().min(10)]
    ));
    printer.data(&report.path);
}
