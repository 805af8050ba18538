//! Checking a turn's structured output against its response format: a documented subset of
//! JSON Schema, enough for the workers' result schemas, with no new dependency.
//!
//! Owns: [`validate`] and [`SchemaViolation`]. Does not own: the schemas (the workers define
//! them) or turning a violation into a failed turn (the driver in [`super`] does).
//!
//! Supported keywords: `type` (a name or a list of names: `object`, `array`, `string`,
//! `number`, `integer`, `boolean`, `null`), `properties`, `required`, `additionalProperties`
//! (`false` or a schema), `items` (one schema), `enum`, `const`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum` (numbers), `minLength`, `maxLength`, `minItems`,
//! `maxItems`. Annotations are ignored: `$schema`, `$id`, `title`, `description`, `default`,
//! `examples`. Any other keyword is refused as [`SchemaViolation`] rather than silently
//! ignored, so a schema this subset cannot check never passes by accident.

use serde_json::{Map, Value};

/// Why a value does not satisfy a schema (or why the schema cannot be checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {message}")]
pub struct SchemaViolation {
    /// A JSON Pointer to the offending value (`` for the root, shown as `/`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
];

/// Check `value` against `schema` (the subset in the module doc).
pub fn validate(schema: &Value, value: &Value) -> Result<(), SchemaViolation> {
    check(schema, value, "")
}

/// Whether every keyword of `schema` (its nested schemas included) is in the subset, so that
/// [`validate`] checks all of it: the keyword that is not, otherwise.
pub fn checkable(schema: &Value) -> Result<(), SchemaViolation> {
    checkable_at(schema, "")
}

fn checkable_at(schema: &Value, path: &str) -> Result<(), SchemaViolation> {
    let map = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(map) => map,
        _ => return Err(violation(path, "a schema must be an object or a boolean")),
    };
    for key in map.keys() {
        if !KEYWORDS.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
            return Err(violation(
                path,
                format!("schema keyword \"{key}\" is not in the supported subset"),
            ));
        }
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        for (name, sub) in properties {
            checkable_at(sub, &format!("{path}/{name}"))?;
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = map.get(key) {
            checkable_at(sub, &format!("{path}/{key}"))?;
        }
    }
    Ok(())
}

/// `schema` with every `additionalProperties: false` taken out, so that properties it does not
/// name pass: what the driver checks host tool arguments against, because an extra property is
/// the host's to judge (the GitHub tools overwrite a model's `owner` and `repo`, RFC-31; the
/// repository tools refuse any property naming a repository).
pub fn open_objects(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| {
                    !(k.as_str() == "additionalProperties" && **v == Value::Bool(false))
                })
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" => match v {
                            Value::Object(props) => Value::Object(
                                props
                                    .iter()
                                    .map(|(n, s)| (n.clone(), open_objects(s)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        },
                        "items" | "additionalProperties" => open_objects(v),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
];

fn violation(path: &str, message: impl Into<String>) -> SchemaViolation {
    SchemaViolation {
        path: if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        },
        message: message.into(),
    }
}

fn type_matches(name: &str, value: &Value) -> Option<bool> {
    Some(match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => return None,
    })
}

fn number(
    schema: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, SchemaViolation> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| violation(path, format!("schema keyword \"{key}\" must be a number"))),
    }
}

fn count(
    schema: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u64>, SchemaViolation> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            violation(
                path,
                format!("schema keyword \"{key}\" must be a non-negative integer"),
            )
        }),
    }
}

fn check(schema: &Value, value: &Value, path: &str) -> Result<(), SchemaViolation> {
    let schema = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(violation(path, "no value is allowed here")),
        Value::Object(map) => map,
        _ => return Err(violation(path, "a schema must be an object or a boolean")),
    };
    for key in schema.keys() {
        if !KEYWORDS.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
            return Err(violation(
                path,
                format!("schema keyword \"{key}\" is not in the supported subset"),
            ));
        }
    }

    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(s) => vec![s.as_str()],
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => {
                return Err(violation(
                    path,
                    "\"type\" must be a string or a list of strings",
                ))
            }
        };
        let mut any = false;
        for name in &names {
            match type_matches(name, value) {
                None => return Err(violation(path, format!("unknown type \"{name}\""))),
                Some(true) => any = true,
                Some(false) => {}
            }
        }
        if !any {
            return Err(violation(path, format!("expected {}", names.join(" or "))));
        }
    }
    if let Some(allowed) = schema.get("enum") {
        let list = allowed
            .as_array()
            .ok_or_else(|| violation(path, "\"enum\" must be a list"))?;
        if !list.contains(value) {
            return Err(violation(path, "not one of the allowed values"));
        }
    }
    if let Some(expected) = schema.get("const") {
        if expected != value {
            return Err(violation(path, "not the required constant"));
        }
    }

    if let Some(n) = value.as_f64() {
        if let Some(min) = number(schema, "minimum", path)? {
            if n < min {
                return Err(violation(path, format!("{n} is below the minimum {min}")));
            }
        }
        if let Some(max) = number(schema, "maximum", path)? {
            if n > max {
                return Err(violation(path, format!("{n} is above the maximum {max}")));
            }
        }
        if let Some(min) = number(schema, "exclusiveMinimum", path)? {
            if n <= min {
                return Err(violation(path, format!("{n} is not above {min}")));
            }
        }
        if let Some(max) = number(schema, "exclusiveMaximum", path)? {
            if n >= max {
                return Err(violation(path, format!("{n} is not below {max}")));
            }
        }
    }

    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as u64;
        if let Some(min) = count(schema, "minLength", path)? {
            if chars < min {
                return Err(violation(path, format!("shorter than {min} characters")));
            }
        }
        if let Some(max) = count(schema, "maxLength", path)? {
            if chars > max {
                return Err(violation(path, format!("longer than {max} characters")));
            }
        }
    }

    if let Some(items) = value.as_array() {
        let len = items.len() as u64;
        if let Some(min) = count(schema, "minItems", path)? {
            if len < min {
                return Err(violation(path, format!("fewer than {min} items")));
            }
        }
        if let Some(max) = count(schema, "maxItems", path)? {
            if len > max {
                return Err(violation(path, format!("more than {max} items")));
            }
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(item_schema, item, &format!("{path}/{i}"))?;
            }
        }
    }

    if let Some(object) = value.as_object() {
        let properties = match schema.get("properties") {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err(violation(path, "\"properties\" must be an object")),
        };
        if let Some(required) = schema.get("required") {
            let names = required
                .as_array()
                .ok_or_else(|| violation(path, "\"required\" must be a list"))?;
            for name in names.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    return Err(violation(
                        path,
                        format!("missing required property \"{name}\""),
                    ));
                }
            }
        }
        for (key, member) in object {
            let member_path = format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"));
            match properties.and_then(|p| p.get(key)) {
                Some(member_schema) => check(member_schema, member, &member_path)?,
                None => match schema.get("additionalProperties") {
                    None | Some(Value::Bool(true)) => {}
                    Some(Value::Bool(false)) => {
                        return Err(violation(path, format!("unexpected property \"{key}\"")))
                    }
                    Some(extra) => check(extra, member, &member_path)?,
                },
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "title": "Description",
            "required": ["summary"],
            "additionalProperties": false,
            "properties": {
                "summary": { "type": "string", "minLength": 1, "maxLength": 20 },
                "confidence": { "type": "number", "minimum": 0, "maximum": 1 },
                "tags": { "type": "array", "items": { "enum": ["a", "b"] }, "maxItems": 2 },
                "count": { "type": ["integer", "null"] }
            }
        })
    }

    #[test]
    fn rfc_09_valid_output_passes() {
        let ok = json!({"summary": "fine", "confidence": 0.5, "tags": ["a"], "count": 3});
        assert_eq!(validate(&schema(), &ok), Ok(()));
        assert_eq!(
            validate(&schema(), &json!({"summary": "x", "count": null})),
            Ok(())
        );
    }

    #[test]
    fn rfc_09_each_violation_is_named_with_its_path() {
        let cases = [
            (json!("not an object"), "/", "expected object"),
            (json!({}), "/", "missing required property \"summary\""),
            (
                json!({"summary": ""}),
                "/summary",
                "shorter than 1 characters",
            ),
            (
                json!({"summary": "x", "confidence": 2}),
                "/confidence",
                "above the maximum",
            ),
            (
                json!({"summary": "x", "tags": ["c"]}),
                "/tags/0",
                "not one of the allowed values",
            ),
            (
                json!({"summary": "x", "tags": ["a", "a", "b"]}),
                "/tags",
                "more than 2 items",
            ),
            (
                json!({"summary": "x", "count": 1.5}),
                "/count",
                "expected integer or null",
            ),
            (
                json!({"summary": "x", "extra": 1}),
                "/",
                "unexpected property \"extra\"",
            ),
        ];
        for (value, path, words) in cases {
            let err = validate(&schema(), &value).expect_err("should be refused");
            assert_eq!(err.path, path, "{value}");
            assert!(err.message.contains(words), "{value}: {}", err.message);
        }
    }

    #[test]
    fn unsupported_keyword_is_refused_not_ignored() {
        let err = validate(&json!({"type": "string", "pattern": "^a"}), &json!("b"))
            .expect_err("pattern is outside the subset");
        assert!(err.message.contains("\"pattern\""));
    }

    #[test]
    fn checkable_finds_an_unsupported_keyword_wherever_it_is() {
        let nested =
            json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "^a"}}});
        let err = checkable(&nested).expect_err("pattern under a property");
        assert_eq!(err.path, "/id");
        let items = json!({"type": "array", "items": {"oneOf": []}});
        assert!(checkable(&items).is_err());
        let fine = json!({"type": "object", "description": "d", "properties": {"n": {"type": "integer", "minimum": 1}}, "additionalProperties": false});
        assert_eq!(checkable(&fine), Ok(()));
    }

    #[test]
    fn open_objects_lets_unnamed_properties_pass_and_keeps_every_other_rule() {
        let closed = json!({"type": "object", "required": ["n"], "additionalProperties": false,
            "properties": {"n": {"type": "integer"}, "o": {"type": "object", "additionalProperties": false}}});
        let open = open_objects(&closed);
        assert!(validate(&closed, &json!({"n": 1, "owner": "x"})).is_err());
        assert_eq!(
            validate(&open, &json!({"n": 1, "owner": "x", "o": {"p": 1}})),
            Ok(())
        );
        assert!(validate(&open, &json!({"n": "one"})).is_err());
        assert!(validate(&open, &json!({})).is_err());
    }
}
