//! GSM8K in verl's format (examples/data_preprocess/gsm8k.py and gsm8k_multiturn_sft.py),
//! reproduced exactly. Pure: raw rows in, verl rows out.

use serde::Serialize;

pub const DATA_SOURCE: &str = "openai/gsm8k";
pub const INSTRUCTION: &str =
    "Let's think step by step and output the final answer after \"####\".";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    pub question: String,
    pub answer: String,
}

/// One row of verl's RL dataset (data_source and ability are constants).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RlRow {
    /// The user message: question + " " + INSTRUCTION.
    pub prompt: String,
    pub ground_truth: String,
    pub split: String,
    pub index: i64,
    pub answer: String,
    pub question: String,
}

/// One row of the SFT dataset: a user and an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SftRow {
    pub user: String,
    pub assistant: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{split} row {row}: the answer has no `#### <number>` line: {excerpt:?}")]
pub struct MissingSolution {
    pub split: String,
    pub row: usize,
    pub excerpt: String,
}

/// verl's rule: the first match of `#### (\-?[0-9\.\,]+)`, commas removed.
pub fn extract_solution(answer: &str) -> Option<String> {
    let mut rest = answer;
    while let Some(at) = rest.find("#### ") {
        let after = &rest[at + 5..];
        let body = after.strip_prefix('-').unwrap_or(after);
        let digits: String = body
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
            .collect();
        if !digits.is_empty() {
            let sign = if body.len() != after.len() { "-" } else { "" };
            return Some(format!("{sign}{digits}").replace(',', ""));
        }
        rest = &rest[at + 5..];
    }
    None
}

fn check(split: &str, rows: &[RawRow]) -> Result<Vec<String>, MissingSolution> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            extract_solution(&r.answer).ok_or_else(|| MissingSolution {
                split: split.to_string(),
                row: i,
                excerpt: r
                    .answer
                    .chars()
                    .rev()
                    .take(60)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect(),
            })
        })
        .collect()
}

pub fn to_rl(split: &str, rows: &[RawRow]) -> Result<Vec<RlRow>, MissingSolution> {
    let solutions = check(split, rows)?;
    Ok(rows
        .iter()
        .zip(solutions)
        .enumerate()
        .map(|(i, (r, ground_truth))| RlRow {
            prompt: format!("{} {INSTRUCTION}", r.question),
            ground_truth,
            split: split.to_string(),
            index: i as i64,
            answer: r.answer.clone(),
            question: r.question.clone(),
        })
        .collect())
}

pub fn to_sft(split: &str, rows: &[RawRow]) -> Result<Vec<SftRow>, MissingSolution> {
    check(split, rows)?;
    Ok(rows
        .iter()
        .map(|r| SftRow {
            user: format!("{} {INSTRUCTION}", r.question),
            assistant: r.answer.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solutions_follow_verls_regex() {
        let cases = [
            ("so\n#### 72", Some("72")),
            ("#### 1,234,567", Some("1234567")),
            ("#### -5", Some("-5")),
            ("#### 3.25", Some("3.25")),
            ("#### 42.", Some("42.")),
            ("#### 7\n#### 8", Some("7")),
            ("#### x then #### 9", Some("9")),
            ("#### -x", None),
            ("no marker 42", None),
            ("####42", None),
            ("ünïcode ✓ #### 12", Some("12")),
            ("#### ,5", Some("5")),
        ];
        for (answer, want) in cases {
            assert_eq!(extract_solution(answer).as_deref(), want, "{answer:?}");
        }
    }

    #[test]
    fn a_row_without_a_solution_names_its_split_and_row() {
        let rows = vec![
            RawRow {
                question: "q".into(),
                answer: "#### 1".into(),
            },
            RawRow {
                question: "q".into(),
                answer: "nothing".into(),
            },
        ];
        let err = to_rl("test", &rows).unwrap_err();
        assert_eq!((err.split.as_str(), err.row), ("test", 1));
        let ok = to_rl("train", &rows[..1]).unwrap();
        assert_eq!(ok[0].prompt, format!("q {INSTRUCTION}"));
        assert_eq!(ok[0].index, 0);
    }
}
