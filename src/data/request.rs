//! What `argus prepare` was asked for, checked whole before anything is sent or written:
//! the `--from` directory, the include/exclude patterns, `--model-from` with its one
//! model, and the hub when anything comes from it.

use std::path::Path;

use super::{Error, Prepare, check_from, download::Filter};

/// The parts of a prepare request that are checked together (models and datasets are
/// already parsed by the caller).
pub struct Request<'a> {
    pub models: &'a [String],
    pub any_dataset: bool,
    pub from: Option<&'a Path>,
    pub model_from: Option<&'a Path>,
    pub include: &'a [String],
    pub exclude: &'a [String],
}

impl Prepare {
    /// Checks `request` before anything runs; `--include`/`--exclude` without a model and
    /// `--from` without a dataset are the CLI's to refuse.
    pub fn check_request(&self, request: &Request<'_>) -> Result<(), Error> {
        if let Some(from) = request.from {
            check_from(from)?;
        }
        Filter::new(request.include, request.exclude)?;
        if request.model_from.is_some() && request.models.len() != 1 {
            return Err(Error::Usage(
                "--model-from takes exactly one --model: the name the directory's model gets"
                    .into(),
            ));
        }
        if let Some(dir) = request.model_from
            && !dir.join("config.json").is_file()
        {
            return Err(Error::LocalModel(format!(
                "{} holds no config.json: not a Hugging Face model directory",
                dir.display()
            )));
        }
        let models_from_hub = !request.models.is_empty() && request.model_from.is_none();
        let datasets_from_hub = request.any_dataset && request.from.is_none();
        if models_from_hub || datasets_from_hub {
            self.client.check_endpoint()?;
        }
        Ok(())
    }
}
