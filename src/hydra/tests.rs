use serde_yaml::Value as Yaml;

use super::format::format_string;
use super::*;

fn yaml(s: &str) -> Yaml {
    serde_yaml::from_str(s).expect("yaml")
}

#[test]
fn values_are_quoted_only_when_hydra_needs_it() {
    let v = |s: &str| format_value(&yaml(s));
    assert_eq!(v("abc"), "abc");
    assert_eq!(
        v("/mnt/shared/data/train.parquet"),
        "/mnt/shared/data/train.parquet"
    );
    assert_eq!(v("'a b'"), "'a b'");
    assert_eq!(v("\"it's\""), r"'it\'s'");
    assert_eq!(v("'$HOME'"), "'$HOME'");
    assert_eq!(v("'1e-6'"), "'1e-6'");
    assert_eq!(v("1e-6"), "1e-6");
    assert_eq!(v("[console, wandb]"), "[console,wandb]");
    assert_eq!(v("{a: 1, b: 'x y'}"), "{a:1,b:'x y'}");
    assert_eq!(v("'true'"), "'true'");
    assert_eq!(v("~"), "null");
    assert_eq!(v("3.0"), "3.0");
    assert_eq!(v(".inf"), "inf");
    assert_eq!(v("-.inf"), "-inf");
    assert_eq!(v("{'a b': 1}"), r"{a\ b:1}");
}

#[test]
fn backslashes_are_doubled_only_before_quotes() {
    for (s, quoted) in [
        (r"a\b", r"'a\b'"),
        (r"a\", r"'a\\'"),
        (r"a\'b", r"'a\\\'b'"),
        (r"\\", r"'\\\\'"),
        ("it's", r"'it\'s'"),
    ] {
        assert_eq!(format_string(s), quoted, "{s}");
        assert_eq!(
            parse_value(quoted),
            Ok(HydraValue::Str(s.to_string())),
            "{quoted}"
        );
    }
}

#[test]
fn values_round_trip_through_the_parser() {
    for text in [
        "abc",
        "'a b'",
        "\"it's a $HOME test\"",
        "'x,y'",
        "'a=b'",
        "'[x]'",
        "'${trainer.project_name}-x'",
        "'\\\\'",
        "[a, 'b c', [1, 2.5, null, true]]",
        "{a: 1, 'b c': {d: 'e,f'}}",
        "1e-6",
        "-3",
        "0.00001",
        "''",
        "'\u{e9}t\u{e9}'",
        "\"line\\nbreak\"",
        "18446744073709551615",
    ] {
        let v = yaml(text);
        let formatted = try_format_value(&v).unwrap_or_else(|e| panic!("{text}: {e}"));
        let back = parse_value(&formatted).expect("parses");
        assert!(back.same_as(&v), "{text} -> {formatted} -> {back:?}");
    }
}

#[test]
fn values_hydra_cannot_carry_are_refused() {
    for text in ["{\"a'b\": 1}", "{'1': x}", "{'true': x}", "{'a#b': 1}"] {
        assert!(try_format_value(&yaml(text)).is_err(), "{text}");
    }
}

#[test]
fn override_lines_parse_like_hydra() {
    let p = |s: &str| parse_override(s);
    let o = p("+trainer.new=1").unwrap();
    assert_eq!(
        (o.action, o.key.as_str(), o.value),
        (Action::Add, "trainer.new", Some(HydraValue::Int(1)))
    );
    assert_eq!(p("++a.b=x").unwrap().action, Action::ForceAdd);
    let o = p("~a.b").unwrap();
    assert_eq!((o.action, o.value), (Action::Delete, None));
    assert_eq!(
        p("~a=").unwrap().value,
        Some(HydraValue::Str(String::new()))
    );
    let o = p("actor@actor_rollout_ref.actor=megatron_actor").unwrap();
    assert_eq!(o.key_element(), "actor@actor_rollout_ref.actor");
    assert_eq!(
        p("hydra/job_logging=disabled").unwrap().key,
        "hydra/job_logging"
    );
    assert_eq!(p("a.0.b=1").unwrap().key, "a.0.b");
    assert_eq!(
        p("k= a b ").unwrap().value,
        Some(HydraValue::Str("a b".into()))
    );
    assert_eq!(
        p("k=a\\ ").unwrap().value,
        Some(HydraValue::Str("a ".into()))
    );
    assert_eq!(p("k=1_000").unwrap().value, Some(HydraValue::Int(1000)));
    assert_eq!(p("k=00").unwrap().value, Some(HydraValue::Str("00".into())));
    assert_eq!(p("k=.5e3").unwrap().value, Some(HydraValue::Float(500.0)));
    assert_eq!(p("k=NULL").unwrap().value, Some(HydraValue::Null));
    assert_eq!(
        p("k=a: b").unwrap().value,
        Some(HydraValue::Str("a: b".into()))
    );
    assert!(matches!(
        p("k=a,b").unwrap().value,
        Some(HydraValue::Sweep(_))
    ));
    assert!(matches!(
        p("k=choice(1,2)").unwrap().value,
        Some(HydraValue::Sweep(_))
    ));
    assert!(matches!(
        p("k=str(1)").unwrap().value,
        Some(HydraValue::Call { .. })
    ));
    for bad in [
        "k",
        "+k",
        "k=a=b",
        "k=a'b",
        "k='x' ",
        "k={'a':1}",
        "k=[a,b",
        "-a=1",
        "a/b.c=1",
        "a.01=1",
        "+++k=1",
        "k=foo(1)",
        "k=${a",
        "k=\u{e9}",
        "k=a#b",
        "k=''''",
        "a b=1",
    ] {
        assert!(p(bad).is_err(), "{bad} should not parse");
    }
}
