//! Secrets never reach files or logs in clear: values of variables whose names contain
//! TOKEN, KEY, SECRET or PASSWORD are replaced before anything is printed or written.

pub const REDACTED: &str = "<redacted>";

pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["TOKEN", "KEY", "SECRET", "PASSWORD"]
        .iter()
        .any(|word| upper.contains(word))
}

/// Replaces secret values in every object of a JSON document (keys decide).
pub fn redact_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if is_secret_name(&k) && v.is_string() {
                        Value::String(REDACTED.into())
                    } else {
                        redact_json(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redact_json).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_replaced_at_any_depth() {
        let v = serde_json::json!({"env": {"HF_TOKEN": "hf_abc", "HF_HOME": "/x"}, "list": [{"api_key": "k"}]});
        let r = redact_json(v);
        assert_eq!(r["env"]["HF_TOKEN"], REDACTED);
        assert_eq!(r["env"]["HF_HOME"], "/x");
        assert_eq!(r["list"][0]["api_key"], REDACTED);
    }
}
