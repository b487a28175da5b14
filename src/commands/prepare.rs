//! `argus prepare`.

use crate::commands::error::{Context, Result};

use crate::cli::PrepareArgs;
use crate::config::{Layout, LoadedProfile};
use crate::data::{self, Dataset, Prepare};
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
    // --include/--exclude without a model and --from without a dataset were refused by
    // `commands::check_flags` / `check_prepare_flags` before this runs.
    if let Some(from) = &args.from {
        data::check_from(from)?;
    }
    data::download::Filter::new(&args.include, &args.exclude).map_err(data::Error::from)?;
    let prepare = Prepare {
        client: data::hub_client(loaded),
        host,
        mount: Layout::new(&loaded.profile.shared.mount),
    };
    if args.model_from.is_some() && models.len() != 1 {
        return Err(data::Error::Usage(
            "--model-from takes exactly one --model: the name the directory's model gets".into(),
        )
        .into());
    }
    if let Some(dir) = &args.model_from
        && !dir.join("config.json").is_file()
    {
        return Err(data::Error::LocalModel(format!(
            "{} holds no config.json: not a Hugging Face model directory",
            dir.display()
        ))
        .into());
    }
    let models_from_hub = !models.is_empty() && args.model_from.is_none();
    let datasets_from_hub = !datasets.is_empty() && args.from.is_none();
    if models_from_hub || datasets_from_hub {
        prepare.client.check_endpoint().map_err(data::Error::from)?;
    }
    let reporter = printer.reporter();
    let mut reports = Vec::new();
    // Datasets first: their input is checked whole (every row) before a model is fetched.
    for dataset in datasets {
        let report = data::prepare_dataset(&prepare, dataset, args.from.as_deref(), &reporter)
            .await
            .with_context(|| format!("cannot prepare dataset {}", dataset.dir_name()))?;
        if !printer.json {
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
        if !printer.json {
            let what = if report.files_downloaded == 0 {
                "already complete".to_string()
            } else {
                format!(
                    "{} files, {} {}",
                    report.files_downloaded,
                    human_bytes(report.bytes_downloaded),
                    if args.model_from.is_some() {
                        "copied"
                    } else {
                        "downloaded"
                    }
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
        reports.push(serde_json::to_value(&report)?);
    }
    if printer.json {
        printer.json(&serde_json::Value::Array(reports));
    }
    Ok(Exit::Success)
}
