//! Parquet in and out: raw GSM8K splits read (question, answer), verl's datasets written
//! with exactly verl's Arrow schema and column order (published by the caller, whole).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::{Array, ArrayRef, LargeStringArray, RecordBatch, StringArray, StringViewArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::gsm8k::{DATA_SOURCE, RawRow, RlRow, SftRow};

#[derive(Debug, thiserror::Error)]
#[error("{path}: {detail}")]
pub struct ParquetError {
    pub path: String,
    pub detail: String,
}

fn err(path: &Path, detail: impl ToString) -> ParquetError {
    ParquetError {
        path: path.display().to_string(),
        detail: detail.to_string(),
    }
}

/// The string values of a column, whichever string type it was written with.
fn strings(column: &ArrayRef) -> Option<Vec<Option<String>>> {
    let any = column.as_any();
    if let Some(a) = any.downcast_ref::<StringArray>() {
        return Some(a.iter().map(|v| v.map(str::to_string)).collect());
    }
    if let Some(a) = any.downcast_ref::<LargeStringArray>() {
        return Some(a.iter().map(|v| v.map(str::to_string)).collect());
    }
    any.downcast_ref::<StringViewArray>()
        .map(|a| a.iter().map(|v| v.map(str::to_string)).collect())
}

/// Reads `question` and `answer` from a raw split file, opened by the caller (only
/// regular files are); `path` is for messages.
pub fn read_raw_file(file: File, path: &Path) -> Result<Vec<RawRow>, ParquetError> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| err(path, e))?
        .build()
        .map_err(|e| err(path, e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| err(path, e))?;
        let column = |name: &str| -> Result<Vec<Option<String>>, ParquetError> {
            let array = batch.column_by_name(name).ok_or_else(|| {
                err(
                    path,
                    format!("no `{name}` column (a GSM8K split has question and answer)"),
                )
            })?;
            strings(array).ok_or_else(|| {
                err(
                    path,
                    format!("column `{name}` is {}, not a string", array.data_type()),
                )
            })
        };
        let (questions, answers) = (column("question")?, column("answer")?);
        for (q, a) in questions.into_iter().zip(answers) {
            rows.push(RawRow {
                question: q.unwrap_or_default(),
                answer: a.unwrap_or_default(),
            });
        }
    }
    Ok(rows)
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

/// `struct<role: string, content: string>`, the message type of prompts and messages
/// (fields in verl's dict order, as `datasets` writes them).
fn message_fields() -> Fields {
    Fields::from(vec![utf8("role"), utf8("content")])
}

fn message_list(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new(
            "element",
            DataType::Struct(message_fields()),
            true,
        ))),
        true,
    )
}

/// verl's RL schema: data_source, prompt, ability, reward_model, extra_info.
pub fn rl_schema() -> Schema {
    Schema::new(vec![
        utf8("data_source"),
        message_list("prompt"),
        utf8("ability"),
        Field::new(
            "reward_model",
            DataType::Struct(Fields::from(vec![utf8("style"), utf8("ground_truth")])),
            true,
        ),
        Field::new(
            "extra_info",
            DataType::Struct(Fields::from(vec![
                utf8("split"),
                Field::new("index", DataType::Int64, true),
                utf8("answer"),
                utf8("question"),
            ])),
            true,
        ),
    ])
}

pub fn sft_schema() -> Schema {
    Schema::new(vec![message_list("messages")])
}

fn messages_builder() -> ListBuilder<StructBuilder> {
    let fields = message_fields();
    let item = Field::new("element", DataType::Struct(fields.clone()), true);
    ListBuilder::new(StructBuilder::from_fields(fields, 0)).with_field(Arc::new(item))
}

/// Appends one message to the current list entry.
fn push_message(list: &mut ListBuilder<StructBuilder>, role: &str, content: &str) {
    let message = list.values();
    string_field(message, 0, role);
    string_field(message, 1, content);
    message.append(true);
}

fn string_field(builder: &mut StructBuilder, index: usize, value: &str) {
    if let Some(b) = builder.field_builder::<StringBuilder>(index) {
        b.append_value(value);
    }
}

pub fn rl_batch(rows: &[RlRow]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = Arc::new(rl_schema());
    let constant = |value: &str| Arc::new(StringArray::from(vec![value; rows.len()])) as ArrayRef;
    let mut prompt = messages_builder();
    let reward_fields = match schema.field(3).data_type() {
        DataType::Struct(f) => f.clone(),
        _ => unreachable!(),
    };
    let extra_fields = match schema.field(4).data_type() {
        DataType::Struct(f) => f.clone(),
        _ => unreachable!(),
    };
    let mut reward = StructBuilder::from_fields(reward_fields, rows.len());
    let mut extra = StructBuilder::from_fields(extra_fields, rows.len());
    for row in rows {
        push_message(&mut prompt, "user", &row.prompt);
        prompt.append(true);
        string_field(&mut reward, 0, "rule");
        string_field(&mut reward, 1, &row.ground_truth);
        reward.append(true);
        string_field(&mut extra, 0, &row.split);
        if let Some(b) = extra.field_builder::<Int64Builder>(1) {
            b.append_value(row.index);
        }
        string_field(&mut extra, 2, &row.answer);
        string_field(&mut extra, 3, &row.question);
        extra.append(true);
    }
    RecordBatch::try_new(
        schema,
        vec![
            constant(DATA_SOURCE),
            Arc::new(prompt.finish()),
            constant("math"),
            Arc::new(reward.finish()),
            Arc::new(extra.finish()),
        ],
    )
}

pub fn sft_batch(rows: &[SftRow]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut messages = messages_builder();
    for row in rows {
        push_message(&mut messages, "user", &row.user);
        push_message(&mut messages, "assistant", &row.assistant);
        messages.append(true);
    }
    RecordBatch::try_new(Arc::new(sft_schema()), vec![Arc::new(messages.finish())])
}

/// Writes `batch` into `file` (new, made by the caller in the directory it holds) and
/// syncs it (the caller publishes it); `path` is for messages.
pub fn write_to(file: File, path: &Path, batch: &RecordBatch) -> Result<(), ParquetError> {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer =
        ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(|e| err(path, e))?;
    writer.write(batch).map_err(|e| err(path, e))?;
    let file = writer.into_inner().map_err(|e| err(path, e))?;
    file.sync_all().map_err(|e| err(path, e))
}

/// Row count of an array, for reports.
pub fn rows(batch: &RecordBatch) -> usize {
    batch.column(0).len()
}
