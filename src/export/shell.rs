//! What KubeRay's submitter does to an entrypoint, and whether the job still gets the same
//! words. Pure.
//!
//! In `K8sJobMode` the submitter pod runs one bash command line with the RayJob's
//! `entrypoint` pasted after `ray job submit ... --`. Bash splits it into words; `ray job
//! submit` joins them again with Python's `subprocess.list2cmdline` (quotes only around
//! words with blanks); Ray runs that string in a shell on the driver's node. The job is the
//! one `argus submit` runs only when that second shell sees the same words as the first,
//! and when neither shell expands or interprets anything (a `$`, a `;`).

/// Splits a command line into the words a POSIX shell makes of it, for what argus writes:
/// plain words, '…' and "…" quoting, backslash escapes. Anything a shell would expand or
/// treat as syntax (`$`, backquotes, operators, braces, a leading `#` or `~`) is an error
/// naming it. Glob characters (`*`, `?`, `[`) are kept: they only change a word when a file
/// of that exact pattern exists in the job's working directory.
pub fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\n' => return Err("a line break ends the shell command there".into()),
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a ' is never closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c @ ('$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a \" is never closed".into()),
                        },
                        Some(c @ ('$' | '`')) => {
                            return Err(format!("`{c}` inside \"…\" is expanded by the shell"));
                        }
                        Some(c) => word.push(c),
                        None => return Err("a \" is never closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(c) => word.push(c),
                    None => return Err("a trailing \\ escapes nothing".into()),
                }
            }
            '$' | '`' => return Err(format!("an unquoted `{c}` is expanded by the shell")),
            ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                return Err(format!("an unquoted `{c}` is shell syntax"));
            }
            '{' | '}' => return Err(format!("an unquoted `{c}` is brace expansion")),
            '#' | '~' if !in_word => {
                return Err(format!(
                    "a word starting with an unquoted `{c}` is shell syntax"
                ));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

/// Python's `subprocess.list2cmdline`, as `ray job submit` applies it to the words after
/// `--`: words with a blank (or empty) are wrapped in "…", a `"` becomes `\"` and the
/// backslashes before it are doubled; everything else is left as it is.
pub fn list2cmdline(words: &[String]) -> String {
    let mut out = String::new();
    for word in words {
        if !out.is_empty() {
            out.push(' ');
        }
        let quote = word.is_empty() || word.contains([' ', '\t']);
        if quote {
            out.push('"');
        }
        let mut backslashes = 0usize;
        for c in word.chars() {
            match c {
                '\\' => backslashes += 1,
                '"' => {
                    out.push_str(&"\\".repeat(backslashes * 2));
                    backslashes = 0;
                    out.push_str("\\\"");
                }
                c => {
                    out.push_str(&"\\".repeat(backslashes));
                    backslashes = 0;
                    out.push(c);
                }
            }
        }
        out.push_str(&"\\".repeat(backslashes));
        if quote {
            out.push_str(&"\\".repeat(backslashes));
            out.push('"');
        }
    }
    out
}

/// Why an entrypoint would not reach Ray unchanged through KubeRay's submitter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The word (as `argus submit` passes it) that is lost or altered.
    pub word: String,
    pub why: String,
}

/// Ok when the job KubeRay's submitter starts runs exactly the words `entrypoint` stands
/// for; otherwise the first word that changes, and why. `list2cmdline` treats each word on
/// its own and joins them with blanks, so each word is checked on its own.
pub fn survives_submitter(entrypoint: &str) -> Result<(), Changed> {
    let first = words(entrypoint.trim()).map_err(|why| Changed {
        word: entrypoint.trim().to_string(),
        why: format!("the submitter's bash reads the entrypoint first, and {why}"),
    })?;
    for word in first {
        let passed_on = list2cmdline(std::slice::from_ref(&word));
        let why = match words(&passed_on) {
            Ok(read) if read.len() == 1 && read[0] == word => continue,
            Ok(read) => format!(
                "`ray job submit` passes it on as `{passed_on}`, which the driver's shell reads as {}",
                match read.as_slice() {
                    [] => "nothing".to_string(),
                    [one] => format!("`{one}`"),
                    many => format!("{} words", many.len()),
                }
            ),
            Err(why) => format!("`ray job submit` passes it on as `{passed_on}`, where {why}"),
        };
        return Err(Changed { word, why });
    }
    Ok(())
}

/// The RayJob `entrypoint` for what `argus submit` sends: the same text, except that the
/// two `&&` of argus's working-directory prefix (`mkdir -p DIR && cd DIR && COMMAND`, see
/// `submit::entrypoint::in_work_dir`) are written `'&&'`, so that the submitter's bash
/// passes them on as words and the driver's shell reads them as the operators they are.
/// COMMAND itself must survive the submitter unchanged ([`survives_submitter`]).
pub fn for_submitter(entrypoint: &str) -> Result<String, Changed> {
    let wrapped = entrypoint.strip_prefix("mkdir -p ").and_then(|rest| {
        let (dir, rest) = rest.split_once(" && cd ")?;
        let rest = rest.strip_prefix(dir)?.strip_prefix(" && ")?;
        Some((dir, rest))
    });
    let Some((dir, command)) = wrapped else {
        survives_submitter(entrypoint)?;
        return Ok(entrypoint.to_string());
    };
    let plain = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./:=,+@%".contains(c))
    };
    if !plain(dir) {
        return Err(Changed {
            word: dir.to_string(),
            why: "the job's working directory is not a plain word".into(),
        });
    }
    survives_submitter(command)?;
    Ok(format!("mkdir -p {dir} '&&' cd {dir} '&&' {command}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_dir_prefix_reaches_the_driver_as_operators() {
        let e = "mkdir -p /mnt/shared/jobs/j1/work && cd /mnt/shared/jobs/j1/work && python3 -m m 'trainer.logger=[console]'";
        let out = for_submitter(e).unwrap();
        assert_eq!(
            out,
            "mkdir -p /mnt/shared/jobs/j1/work '&&' cd /mnt/shared/jobs/j1/work '&&' python3 -m m 'trainer.logger=[console]'"
        );
        // The submitter's bash, then `ray job submit`'s list2cmdline: the driver's shell
        // gets back the command argus submit sends (quotes of the plain word aside).
        let passed_on = list2cmdline(&words(&out).unwrap());
        assert_eq!(
            passed_on,
            "mkdir -p /mnt/shared/jobs/j1/work && cd /mnt/shared/jobs/j1/work && python3 -m m trainer.logger=[console]"
        );
        assert!(for_submitter("python3 -c 'x' && rm -rf /").is_err());
        assert!(for_submitter("mkdir -p /a && cd /b && x").is_err());
    }

    fn w(line: &str) -> Vec<String> {
        words(line).unwrap()
    }

    #[test]
    fn words_follow_shell_quoting() {
        assert_eq!(w("a  'b c' \"d\\\"e\" f\\ g"), ["a", "b c", "d\"e", "f g"]);
        assert_eq!(w("'it'\\''s'"), ["it's"]);
        assert_eq!(w("x=[a,b] ''"), ["x=[a,b]", ""]);
        assert!(words("echo $HOME").is_err());
        assert!(words("a && b").is_err());
        assert!(words("\"$x\"").is_err());
        assert!(words("'unclosed").is_err());
        assert!(words("k={a,b}").is_err());
        assert!(words("#c").is_err());
        assert_eq!(w("a#b"), ["a#b"]);
    }

    #[test]
    fn list2cmdline_quotes_like_python() {
        let s = |v: &[&str]| list2cmdline(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&["a", "b c", ""]), r#"a "b c" """#);
        assert_eq!(s(&[r#"a"b"#]), r#"a\"b"#);
        assert_eq!(s(&[r#"a\"b"#]), r#"a\\\"b"#);
        assert_eq!(s(&[r"a\b"]), r"a\b");
        assert_eq!(s(&[r"a b\"]), r#""a b\\""#);
    }

    #[test]
    fn argus_entrypoints_survive() {
        let e = "python3 -m verl.trainer.main_ppo data.train_files=/mnt/shared/common/datasets/gsm8k/train.parquet 'trainer.logger=[console]' \"trainer.experiment_name='qwen2.5-0.5b ppo'\" actor_rollout_ref.actor.optim.lr=1e-6 'data.tags=[a,'\"'\"'b c'\"'\"']'";
        assert_eq!(survives_submitter(e), Ok(()));
        assert_eq!(survives_submitter("python3 -m quickstart"), Ok(()));
    }

    #[test]
    fn what_the_submitter_would_change_is_named() {
        // Quotes that Hydra needs, in a word without blanks: the second shell strips them.
        let c = survives_submitter("python3 -m m \"trainer.flag='true'\"").unwrap_err();
        assert_eq!(c.word, "trainer.flag='true'");
        assert!(c.why.contains("`trainer.flag=true`"), "{}", c.why);
        // A `$` protected once is expanded the second time.
        let c = survives_submitter("python3 -m m 'x=it is $HOME'").unwrap_err();
        assert_eq!(c.word, "x=it is $HOME");
        // Shell syntax in the entrypoint itself runs in the submitter, not in the job.
        let c = survives_submitter("cd /x && python3 run.py").unwrap_err();
        assert!(c.why.contains("submitter's bash"), "{}", c.why);
    }
}
