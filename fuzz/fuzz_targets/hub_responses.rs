//! What a Hugging Face mirror answers, as argus parses it: the revision API's JSON, HEAD
//! headers, and every name kind on its own (commit, etag, repo id, revision, file name,
//! `REPO[@REV]`). Whatever the bytes, parsing never panics, and whatever it accepts is a
//! plain relative path below its root and a safe URL part: `properties::check` asserts it
//! (the unit tests run the same check over a seeded generator on stable).

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/hf.rs"]
#[allow(dead_code)]
mod hub_types;

fuzz_target!(|data: &[u8]| {
    hub_types::properties::check(data);
});
