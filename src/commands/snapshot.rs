//! `argus snapshot SRC`, `snapshot list`, `snapshot verify ID`, `snapshot rm ID`.

use crate::commands::error::{Context, Result};

use crate::cli::{SnapshotArgs, SnapshotCommand};
use crate::config::{Layout, LoadedProfile};
use crate::exit::Exit;
use crate::snapshot::{self, SnapshotOptions, verify};
use crate::ui::{Printer, human_bytes, table};

pub fn run(loaded: &LoadedProfile, args: &SnapshotArgs, printer: &Printer) -> Result<Exit> {
    let layout = loaded.host_layout()?;
    match &args.command {
        None => create(&layout, args, printer),
        Some(SnapshotCommand::List) => list(&layout, printer),
        Some(SnapshotCommand::Verify { id }) => check(&layout, id, printer),
        Some(SnapshotCommand::Rm { id, force }) => {
            let removed = snapshot::remove(&layout.code(), &layout.jobs(), id, *force)
                .with_context(|| format!("cannot remove snapshot {id}"))?;
            for skipped in &removed.skipped {
                printer.warn(skipped);
            }
            let path = removed.path;
            if printer.json {
                printer.json(&serde_json::json!({"removed": path}));
            } else {
                printer.info(format!("removed {}", path.display()));
            }
            Ok(Exit::Success)
        }
    }
}

fn create(layout: &Layout, args: &SnapshotArgs, printer: &Printer) -> Result<Exit> {
    let Some(source) = &args.source else {
        // clap requires SRC when no subcommand is given.
        return Ok(Exit::Usage);
    };
    let options = SnapshotOptions {
        source: source.clone(),
        name: args.name.clone(),
        code_id: args.code_id.clone(),
        excludes: args.excludes.clone(),
        follow_links: args.follow_links,
    };
    let reporter = printer.reporter();
    let report = snapshot::snapshot(&layout.code(), &options, &reporter)
        .with_context(|| format!("cannot snapshot {}", source.display()))?;
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
        return Ok(Exit::Success);
    }
    if report.created {
        printer.info(format!(
            "snapshot {} created: {} files, {} at {}",
            report.code_id,
            report.files,
            human_bytes(report.bytes),
            report.path.display()
        ));
    } else {
        printer.info(format!(
            "snapshot {} already exists with this content: nothing copied",
            report.code_id
        ));
    }
    printer.data(&report.code_id);
    Ok(Exit::Success)
}

fn list(layout: &Layout, printer: &Printer) -> Result<Exit> {
    let snapshots = snapshot::list(&layout.code())?;
    // Listed, not dropped: the entry exists; the warning says why it cannot be read.
    for s in &snapshots {
        if let Some(why) = &s.unreadable {
            let what = match s.code_id.as_str() {
                "-" => s.name.clone(),
                id => format!("{}/{id}", s.name),
            };
            printer.warn(format!("{what} is unreadable: {why}"));
        }
    }
    if printer.json {
        printer.json(&serde_json::to_value(&snapshots)?);
        return Ok(Exit::Success);
    }
    let mut rows = vec![
        ["CODE_ID", "NAME", "CREATED", "FILES", "SIZE", "COMMIT"]
            .map(String::from)
            .to_vec(),
    ];
    for s in &snapshots {
        if s.unreadable.is_some() {
            rows.push(vec![
                s.code_id.clone(),
                s.name.clone(),
                "UNREADABLE".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        let commit = match (&s.git_commit, s.git_dirty) {
            (Some(c), true) => format!("{c} (dirty)"),
            (Some(c), false) => c.clone(),
            (None, _) => "-".to_string(),
        };
        rows.push(vec![
            s.code_id.clone(),
            s.name.clone(),
            s.created.clone(),
            s.files.to_string(),
            human_bytes(s.bytes),
            commit,
        ]);
    }
    printer.data(table(&rows));
    Ok(Exit::Success)
}

fn check(layout: &Layout, id: &str, printer: &Printer) -> Result<Exit> {
    let found = snapshot::locate(&layout.code(), id)?;
    for skipped in &found.skipped {
        printer.warn(skipped);
    }
    let report = found
        .open()
        .and_then(|dir| verify::verify_in(&dir))
        .with_context(|| format!("cannot verify snapshot {id}"))?;
    if printer.json {
        printer.json(&serde_json::to_value(&report)?);
    } else {
        for (what, files) in [
            ("changed", &report.changed),
            ("missing", &report.missing),
            ("added", &report.added),
        ] {
            for file in files {
                printer.data(format!("{what:<8} {file}"));
            }
        }
        for problem in &report.manifest {
            printer.data(format!("manifest {problem}"));
        }
        if report.ok() {
            printer.info(format!(
                "snapshot {id} is intact: {} entries match its manifest",
                report.checked
            ));
        }
    }
    if report.ok() {
        Ok(Exit::Success)
    } else {
        printer.warn(format!(
            "snapshot {id} differs from its manifest: {}",
            report.summary()
        ));
        Ok(Exit::Failed)
    }
}
