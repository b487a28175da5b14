//! The house check (`tools/structure.py`, docs/architecture.md) reads every import form
//! Rust has: each form below makes a circle the check must name, on a small tree of its
//! own; what only a comment or a string spells is no import; `--long` fails on what it
//! lists; and argus's own tree passes it.

use std::path::Path;
use std::process::Command;

/// Runs the check on a tree of `(path, text)` files under `src/`: (exit code, output).
fn check(files: &[(&str, &str)], long: bool) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    structure(&dir.path().join("src"), long)
}

fn structure(src: &Path, long: bool) -> (i32, String) {
    let mut command = Command::new("python3");
    command.arg("tools/structure.py").arg(src);
    if long {
        command.arg("--long");
    }
    let out = command.output().expect("python3");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A tree of `(path, text)` files.
type Tree<'a> = &'a [(&'a str, &'a str)];

#[test]
fn every_import_form_is_read() {
    let cases: [(&str, Tree, &str); 6] = [
        (
            "grouped super",
            &[
                ("lib.rs", "pub mod r;\n"),
                ("r/mod.rs", "mod x;\nmod y;\n"),
                ("r/x.rs", "use super::{y::g, z};\npub fn f() {}\n"),
                ("r/y.rs", "use super::x::f;\npub fn g() {}\n"),
            ],
            "circle of files: r::x r::y",
        ),
        (
            "super::super",
            &[
                ("lib.rs", "pub mod r;\n"),
                ("r/mod.rs", "mod s;\nmod t;\n"),
                ("r/s/mod.rs", "mod u;\n"),
                ("r/s/u.rs", "pub fn g() { super::super::t::f() }\n"),
                ("r/t.rs", "pub fn f() { crate::r::s::u::g() }\n"),
            ],
            "circle of files: r::s::u r::t",
        ),
        (
            "a parent's use of its own child",
            &[
                ("lib.rs", "pub mod q;\npub mod r;\n"),
                ("r/mod.rs", "mod x;\npub use x::g;\n"),
                ("r/x.rs", "pub fn g() { crate::q::h() }\n"),
                ("q.rs", "pub fn h() { crate::r::g() }\n"),
            ],
            "circle of files: q r r::x",
        ),
        (
            "grouped crate paths at depth",
            &[
                ("lib.rs", "pub mod a;\npub mod b;\n"),
                (
                    "a/mod.rs",
                    "pub mod inner;\nuse crate::{b::{self, deep::{f as g}}};\npub fn x() {}\n",
                ),
                ("a/inner.rs", "pub fn i() {}\n"),
                ("b/mod.rs", "pub mod deep;\n"),
                ("b/deep.rs", "pub fn f() { crate::a::x() }\n"),
            ],
            "circle of files: a b::deep",
        ),
        (
            "an exported macro",
            &[
                ("lib.rs", "pub mod m;\npub mod n;\n"),
                (
                    "m.rs",
                    "#[macro_export]\nmacro_rules! mac { () => { 1 } }\npub fn f() { crate::n::g() }\n",
                ),
                ("n.rs", "use crate::mac;\npub fn g() -> i32 { mac!() }\n"),
            ],
            "circle of files: m n",
        ),
        (
            "an exported macro by path",
            &[
                ("lib.rs", "pub mod m;\npub mod n;\n"),
                (
                    "m.rs",
                    "#[macro_export]\nmacro_rules! mac { () => { 1 } }\npub fn f() { crate::n::g() }\n",
                ),
                ("n.rs", "pub fn g() -> i32 { crate::mac!() }\n"),
            ],
            "circle of files: m n",
        ),
    ];
    for (form, files, want) in cases {
        let (code, out) = check(files, false);
        assert_eq!(code, 1, "{form}: {out}");
        assert!(out.contains(want), "{form}: wants {want:?}:\n{out}");
    }

    // What only a comment, a doc link or a string spells is no import; a child's use of
    // its own room's facade (`super::Error`) is no circle.
    let (code, out) = check(
        &[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "a/mod.rs",
                "//! See [`crate::b::f`].\nmod c;\npub struct Error;\npub fn f() -> &'static str { c::g(); \"crate::b::f\" }\n",
            ),
            ("a/c.rs", "use super::Error;\npub fn g() {}\n"),
            ("b.rs", "pub fn f() { crate::a::f(); } // crate::a\n"),
        ],
        false,
    );
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("circle"), "{out}");
}

#[test]
fn long_fails_on_what_it_lists_and_argus_passes() {
    let body = "    let x = 1;\n".repeat(130);
    let text = format!("pub fn long() {{\n{body}}}\n");
    let (code, out) = check(&[("lib.rs", "pub mod a;\n"), ("a.rs", &text)], true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("long: 132 lines"), "{out}");
    let (code, out) = check(&[("lib.rs", "pub mod a;\n"), ("a.rs", &text)], false);
    assert_eq!(code, 0, "without --long: {out}");

    let (code, out) = structure(Path::new("src"), true);
    assert_eq!(code, 0, "argus's own tree: {out}");
}
