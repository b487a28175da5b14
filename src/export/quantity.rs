//! Profile sizes and counts as Kubernetes quantities.
//!
//! Docker reads `3g` as 3 GiB and `512m` as 512 MiB; the API server refuses `3g` and reads
//! `512m` as 0.512 (the `m` suffix is milli). Every size argus knows is a number of bytes
//! ([`ByteSize`]), so it becomes a binary-suffixed quantity (`3Gi`, `512Mi`) or a plain
//! byte count; CPUs become whole numbers or millicores. Pure.

use crate::config::size::ByteSize;

/// Bytes with the largest binary suffix that divides them exactly: `3Gi`, `1536Mi`, `100`.
pub fn bytes(size: ByteSize) -> String {
    const UNITS: [(&str, u64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if size.0 >= unit && size.0.is_multiple_of(unit) {
            return format!("{}{suffix}", size.0 / unit);
        }
    }
    size.0.to_string()
}

/// CPUs: `8`, `1500m`; `None` when finer than a millicore (Kubernetes' resolution) or not > 0.
pub fn cpus(cpus: f64) -> Option<String> {
    if !cpus.is_finite() || cpus <= 0.0 {
        return None;
    }
    if cpus.fract() == 0.0 && cpus < 1e15 {
        return Some(format!("{}", cpus as u64));
    }
    let milli = cpus * 1000.0;
    let rounded = milli.round();
    ((milli - rounded).abs() < 1e-6 && rounded >= 1.0).then(|| format!("{}m", rounded as u64))
}

/// A Ray resource amount as a decimal quantity (`1`, `0.5`, `4`); `None` when it is not
/// finite or negative (KubeRay would skip it silently).
pub fn decimal(value: f64) -> Option<String> {
    // f64's Display never uses an exponent, and the quantity grammar accepts `0.5`.
    (value.is_finite() && value >= 0.0).then(|| format!("{value}"))
}

/// Whether `text` matches the API server's quantity grammar (the CRDs' pattern):
/// a signed decimal number, then a binary suffix (Ki..Ei), a decimal one (n u m k M G T P E)
/// or a decimal exponent.
pub fn is_quantity(text: &str) -> bool {
    let rest = text.strip_prefix(['+', '-']).unwrap_or(text);
    let digits_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(digits_end);
    // Digits with at most one dot, and at least one digit.
    let number_ok = number.chars().any(|c| c.is_ascii_digit()) && number.matches('.').count() <= 1;
    if !number_ok {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        exp if exp.starts_with(['e', 'E']) => {
            let exp = &exp[1..];
            let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            !exp.is_empty() && exp.chars().all(|c| c.is_ascii_digit() || c == '.')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_sizes_become_binary_quantities() {
        let q = |text: &str| bytes(ByteSize::parse(text).unwrap());
        assert_eq!(q("3g"), "3Gi");
        assert_eq!(q("512m"), "512Mi");
        assert_eq!(q("1.5g"), "1536Mi");
        assert_eq!(q("64MiB"), "64Mi");
        assert_eq!(q("1024g"), "1Ti");
        assert_eq!(q("100"), "100");
        assert_eq!(q("1025k"), "1025Ki");
        assert_eq!(bytes(ByteSize((1 << 30) + 1)), "1073741825");
        for text in ["3g", "512m", "1.5g", "100", "1025k", "7t"] {
            assert!(is_quantity(&q(text)), "{text}");
        }
    }

    #[test]
    fn cpus_are_whole_or_millicores() {
        assert_eq!(cpus(8.0).as_deref(), Some("8"));
        assert_eq!(cpus(0.5).as_deref(), Some("500m"));
        assert_eq!(cpus(1.25).as_deref(), Some("1250m"));
        assert_eq!(cpus(0.1).as_deref(), Some("100m"));
        assert_eq!(cpus(0.0001), None);
        assert_eq!(cpus(0.0), None);
    }

    #[test]
    fn resource_amounts_are_decimal_quantities() {
        for (value, text) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (4.0, "4"),
            (0.0, "0"),
            (1e-7, "0.0000001"),
        ] {
            let q = decimal(value).unwrap();
            assert_eq!(q, text);
            assert!(is_quantity(&q), "{q}");
        }
        assert_eq!(decimal(f64::NAN), None);
        assert_eq!(decimal(-1.0), None);
    }

    #[test]
    fn the_quantity_grammar() {
        for ok in [
            "1", "0.5", ".5", "5.", "500m", "3Gi", "1e3", "1E-3", "+2", "-1",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "3g", "512mb", "1.2.3", "Gi", ".", "1e", "abc", "1 Gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
