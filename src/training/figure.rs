//! Which metrics of which jobs `argus job plot` draws, and the figure of them: the keys
//! the patterns (or the defaults) choose over the jobs' tables, one panel per key, one
//! line per job. Pure.

use super::Error;
use super::metrics::{KeyPattern, Table};
use super::plot::{Figure, MAX_PANELS, Panel, Series};

/// What `job plot` draws without --keys: the reward/score mean (the first present) and
/// the validation scores; for SFT, the losses.
const DEFAULT_PLOT_KEYS: &[&[&str]] = &[
    &["critic/score/mean", "critic/rewards/mean"],
    &["val-core/*"],
    &["train/loss"],
    &["val/loss"],
];

/// The columns to plot of one table: per pattern group, the first pattern with matches.
fn default_columns(table: &Table) -> Vec<String> {
    let mut out = Vec::new();
    for group in DEFAULT_PLOT_KEYS {
        for pattern in group.iter().filter_map(|p| KeyPattern::parse(p).ok()) {
            let found: Vec<&String> = table
                .keys()
                .iter()
                .filter(|k| pattern.is_match(k))
                .collect();
            if !found.is_empty() {
                out.extend(found.into_iter().cloned());
                break;
            }
        }
    }
    out
}

/// The metrics a plot draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// In --keys order, the union over the jobs; at most [`MAX_PANELS`].
    pub keys: Vec<String>,
    /// How many matched before the cut to [`MAX_PANELS`] (a figure's size follows its
    /// panels: a log naming thousands of metrics that all match must not make a picture
    /// of gigabytes).
    pub matched: usize,
}

/// The keys `patterns` (none: the defaults) choose in `tables` (job id, table); an error
/// when no job has a step line, or when a pattern matches nothing.
pub fn choose(
    tables: &[(String, Table)],
    patterns: &[KeyPattern],
    ids: &[String],
) -> Result<Chosen, Error> {
    if tables.iter().all(|(_, t)| t.is_empty()) {
        return Err(Error::NothingToPlot(ids.join(", ")));
    }
    // The metrics: in --keys order, the union over the jobs.
    let mut chosen: Vec<String> = Vec::new();
    if patterns.is_empty() {
        for (_, table) in tables {
            for key in default_columns(table) {
                if !chosen.contains(&key) {
                    chosen.push(key);
                }
            }
        }
        if chosen.is_empty() {
            return Err(Error::NoMatch {
                pattern: "(the default: critic/score/mean, val-core/*, train/loss, val/loss)"
                    .into(),
                jobs: ids.join(", "),
                available: tables[0].1.keys().to_vec(),
            });
        }
    } else {
        for pattern in patterns {
            let mut matched = false;
            for (_, table) in tables {
                for key in table.keys().iter().filter(|k| pattern.is_match(k)) {
                    matched = true;
                    if !chosen.contains(key) {
                        chosen.push(key.clone());
                    }
                }
            }
            if !matched {
                let available = tables
                    .iter()
                    .find(|(_, t)| !t.is_empty())
                    .map(|(_, t)| t.keys().to_vec())
                    .unwrap_or_default();
                return Err(Error::NoMatch {
                    pattern: pattern.text.clone(),
                    jobs: ids.join(", "),
                    available,
                });
            }
        }
    }
    let matched = chosen.len();
    chosen.truncate(MAX_PANELS);
    Ok(Chosen {
        keys: chosen,
        matched,
    })
}

/// The figure of `keys` over `tables` (job id, table): a job continuing others is named so.
pub fn figure(tables: &[(String, Table)], keys: &[String], ids: &[String]) -> Figure {
    let panels: Vec<Panel> = keys
        .iter()
        .map(|key| Panel {
            key: key.clone(),
            series: tables
                .iter()
                .filter_map(|(id, table)| {
                    let column = table.column_of(key)?;
                    let label = match table.jobs.as_slice() {
                        [.., _] if table.jobs.len() > 1 => format!(
                            "{id} (continues {})",
                            table.jobs[..table.jobs.len() - 1].join(", ")
                        ),
                        _ => id.clone(),
                    };
                    Some(Series {
                        job: id.clone(),
                        label,
                        points: table.series(column),
                    })
                })
                .collect(),
        })
        .collect();
    let title = match tables {
        [(id, t)] if t.jobs.len() > 1 => format!(
            "job {id} (continues {})",
            t.jobs[..t.jobs.len() - 1].join(", ")
        ),
        [(id, _)] => format!("job {id}"),
        _ => format!("jobs {}", ids.join(" vs ")),
    };
    Figure::new(title, panels)
}
