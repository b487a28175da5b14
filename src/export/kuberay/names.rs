//! Kubernetes' name rules (DNS-1035 and DNS-1123 names, label values). The Ray version an
//! image's tag carries is [`crate::ids::RayVersion`].

use sha2::{Digest, Sha256};

/// A DNS-1035 label of at most `max` characters for `raw`: itself when it already is one;
/// otherwise lower-cased, other characters as `-`, `prefix` in front when it does not
/// start with a letter, and a short hash of `raw` at the end, so that two ids never map to
/// one name.
pub fn dns1035(raw: &str, max: usize, prefix: &str) -> String {
    if dns1035_label(raw) && raw.len() <= max {
        return raw.to_string();
    }
    let mut name = String::new();
    for c in raw.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("{prefix}{name}");
    }
    let hash: String = Sha256::digest(raw.as_bytes())
        .iter()
        .take(3)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = max.saturating_sub(hash.len() + 1);
    let base: String = name.chars().take(keep).collect();
    format!("{}-{hash}", base.trim_end_matches('-'))
}

pub(super) fn dns1035_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(super) fn dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(super) fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns1123_label)
}

/// A label value: at most 63 of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
pub(super) fn label_value(raw: &str) -> String {
    let kept: String = raw
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

pub(super) fn label_value_ok(s: &str) -> bool {
    !s.is_empty() && label_value(s) == s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_1035_and_distinct() {
        assert_eq!(dns1035("ppo-1a2b3c", 47, "job-"), "ppo-1a2b3c");
        let a = dns1035("My_Run.1", 47, "job-");
        let b = dns1035("my-run-1x", 47, "job-");
        assert!(
            a.starts_with("my-run-1-") && a.len() == "my-run-1-".len() + 6,
            "{a}"
        );
        assert_ne!(a, dns1035("my_run.1", 47, "job-"));
        assert!(dns1035_label(&a) && dns1035_label(&b));
        let digits = dns1035("2024.run", 47, "job-");
        assert!(digits.starts_with("job-2024-run-"), "{digits}");
        let long = dns1035(&"a".repeat(100), 47, "job-");
        assert_eq!(long.len(), 47);
        assert!(dns1035_label(&long));
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("h20"), "h20");
        assert_eq!(label_value("a-"), "a");
        assert_eq!(label_value(&"x".repeat(70)).len(), 63);
        assert!(label_value_ok("team-a.q1") && !label_value_ok("-a") && !label_value_ok("a b"));
    }
}
