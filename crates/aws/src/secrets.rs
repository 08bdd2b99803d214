//! Secrets Manager: settings read once at start, and tenants' HMAC secrets for their end
//! users' tokens ([`Reader`]).
//!
//! `SLUICE_SECRETS_ARN` names a secret whose value is a JSON object of `SLUICE_*` settings,
//! e.g. `{"SLUICE_QDRANT_API_KEY": "..."}`. Those values take the place of environment
//! variables of the same names, so that keys never sit in the function's configuration.

use std::collections::HashMap;

use crate::AwsError;

/// The settings in the secret `arn`: string values of `SLUICE_*` names only (anything else
/// is refused, so a wrong secret is noticed at start rather than half-used).
pub async fn settings(arn: &str) -> Result<HashMap<String, String>, AwsError> {
    let sdk = crate::sdk_config("SLUICE_SECRETS_ARN").await?;
    let client = aws_sdk_secretsmanager::Client::new(&sdk);
    let value = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| AwsError::call("Secrets Manager GetSecretValue", e))?;
    let text = value.secret_string().ok_or_else(|| {
        AwsError::Malformed(format!(
            "secret {arn} has no string value (put a JSON object)"
        ))
    })?;
    parse(arn, text)
}

/// Reads tenants' HMAC secrets (`identity.secret_arn` of their settings): the value's string
/// as bytes, or its binary. The client is made on first use, so a process whose tenants use
/// none never loads the AWS configuration for it.
#[derive(Default)]
pub struct Reader {
    client: tokio::sync::OnceCell<aws_sdk_secretsmanager::Client>,
}

#[async_trait::async_trait]
impl sluice_contract::access::SecretReader for Reader {
    async fn read(&self, id: &str) -> Result<Vec<u8>, String> {
        let client = (self.client)
            .get_or_try_init(|| async {
                let sdk = crate::sdk_config("identity.secret_arn").await?;
                Ok::<_, AwsError>(aws_sdk_secretsmanager::Client::new(&sdk))
            })
            .await
            .map_err(|e| e.to_string())?;
        let value = (client.get_secret_value().secret_id(id).send().await)
            .map_err(|e| AwsError::call("Secrets Manager GetSecretValue", e).to_string())?;
        match (value.secret_string(), value.secret_binary()) {
            (Some(text), _) => Ok(text.as_bytes().to_vec()),
            (None, Some(blob)) => Ok(blob.as_ref().to_vec()),
            (None, None) => Err(format!("secret {id} has no value")),
        }
    }
}

fn parse(arn: &str, text: &str) -> Result<HashMap<String, String>, AwsError> {
    let bad = |why: String| AwsError::Malformed(format!("secret {arn}: {why}"));
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad("expected a JSON object of SLUICE_* settings".into()))?;
    object
        .iter()
        .map(|(k, v)| {
            if !k.starts_with("SLUICE_") {
                return Err(bad(format!("{k:?} is not a SLUICE_* setting")));
            }
            match v.as_str() {
                Some(s) => Ok((k.clone(), s.to_string())),
                None => Err(bad(format!("the value of {k} is not a string"))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_secret_holds_string_settings_only() {
        let s = parse("arn", r#"{"SLUICE_QDRANT_API_KEY": "k1"}"#).unwrap();
        assert_eq!(s["SLUICE_QDRANT_API_KEY"], "k1");
        for bad in [
            r#"["k"]"#,
            r#"{"QDRANT_KEY": "k"}"#,
            r#"{"SLUICE_TOP_K": 5}"#,
            "k1",
        ] {
            let e = parse("arn", bad).unwrap_err().to_string();
            assert!(e.starts_with("secret arn: "), "{e}");
        }
    }
}
