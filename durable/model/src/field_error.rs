//! The one error type for refusing caller-supplied input.

/// A refusal of caller input that names the offending field (API: 400 INVALID_ARGUMENT naming the field).
///
/// `field` is a path such as `command[1].admission.max_in_flight` or `input.offer`, so a caller
/// can find the exact spot to fix; `message` says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the offending field.
    pub field: String,
    /// Human-readable reason the field was refused.
    pub message: String,
}

impl FieldError {
    /// Builds an error for `field` with the given `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FieldError;

    #[test]
    fn display_names_field_then_message() {
        let error = FieldError::new("command[0].code", "is required");
        assert_eq!(error.to_string(), "command[0].code: is required");
    }
}
