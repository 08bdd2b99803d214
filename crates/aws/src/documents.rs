//! Documents in S3: uploads, for the ingest function's S3 trigger, and the objects under a
//! tenant's S3 source's prefix, listed and read by its syncs ([`Objects`]).
//!
//! An upload's key is `<tenant>/<path>`: the first segment names the tenant, the rest is the
//! file's name (its extension picks the format, as `sluice ingest` does with paths). Its
//! [`ACCESS_TAG`] tag, when it has one, says which end users may see its documents.

use futures::{StreamExt, TryStreamExt};
use sluice_contract::sources::{Listed, ObjectPage, Objects, ObjectsError};

use crate::AwsError;

/// Objects whose tags a listing reads at once.
const TAGS_AT_ONCE: usize = 16;

/// The object tag that holds an upload's access list: principals separated by spaces (S3
/// tag values allow no commas), e.g. `group:hr user:alice`; empty for no end user.
pub const ACCESS_TAG: &str = "sluice-access";

/// A document upload as an S3 event names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The tenant: the key's first segment.
    pub tenant: sluice_contract::Tenant,
    /// The rest of the key: the document's name.
    pub name: String,
}

/// Splits `key` (already URL-decoded) into tenant and name; `None` when either is missing or
/// the tenant is not a valid tenant id.
pub fn upload(key: &str) -> Option<Upload> {
    let (tenant, name) = key.split_once('/')?;
    let tenant = sluice_contract::Tenant::new(tenant).ok()?;
    (!name.is_empty()).then(|| Upload {
        tenant,
        name: name.to_string(),
    })
}

/// S3 event notifications encode object keys like form values: `+` for a space, `%XX` for
/// other bytes.
pub fn decode_key(key: &str) -> Result<String, AwsError> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = key
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        AwsError::Malformed(format!("bad escape in object key {key:?}"))
                    })?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out)
        .map_err(|_| AwsError::Malformed(format!("object key {key:?} is not UTF-8")))
}

/// Reads uploads from S3.
pub struct Documents {
    s3: aws_sdk_s3::Client,
}

/// Why an upload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Larger than `SLUICE_MAX_INGEST_BYTES`.
    #[error("{key} is {size} bytes, over the {max}-byte limit (SLUICE_MAX_INGEST_BYTES)")]
    TooLarge {
        /// The object.
        key: String,
        /// Its size.
        size: u64,
        /// The limit.
        max: usize,
    },
    /// S3 failed, or the object is gone.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl Documents {
    /// A client from the standard AWS environment.
    pub async fn connect() -> Result<Self, AwsError> {
        let sdk = crate::sdk_config("the ingest function's S3 trigger").await?;
        Ok(Self {
            s3: crate::s3_client(&sdk),
        })
    }

    /// The object's bytes, media type and access list (its [`ACCESS_TAG`], read beside it),
    /// refused unread when S3 says it is larger than `max`.
    pub async fn read(&self, bucket: &str, key: &str, max: usize) -> Result<Object, ReadError> {
        let get = self.s3.get_object().bucket(bucket).key(key).send();
        let tags = self.s3.get_object_tagging().bucket(bucket).key(key).send();
        let (object, tags) = tokio::join!(get, tags);
        let object = object.map_err(|e| AwsError::call("S3 GetObject", e))?;
        let tags = tags.map_err(|e| AwsError::call("S3 GetObjectTagging", e))?;
        let access = access_of(tags.tag_set());
        let size = object.content_length().unwrap_or(0).max(0) as u64;
        let content_type = object.content_type().map(str::to_string);
        if size > max as u64 {
            return Err(ReadError::TooLarge {
                key: key.to_string(),
                size,
                max,
            });
        }
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|e| AwsError::call("S3 GetObject (body)", e))?;
        Ok(Object {
            bytes: bytes.to_vec(),
            content_type,
            access,
        })
    }
}

/// The access list an object's tags hold (its [`ACCESS_TAG`], as a comma-separated list).
fn access_of(tags: &[aws_sdk_s3::types::Tag]) -> Option<String> {
    (tags.iter())
        .find(|t| t.key() == ACCESS_TAG)
        .map(|t| t.value().split_whitespace().collect::<Vec<_>>().join(","))
}

#[async_trait::async_trait]
impl Objects for Documents {
    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<String>,
    ) -> Result<ObjectPage, ObjectsError> {
        let unavailable = |e: AwsError| ObjectsError::Unavailable(e.to_string());
        let page = (self.s3.list_objects_v2().bucket(bucket).prefix(prefix))
            .set_continuation_token(after)
            .send()
            .await
            .map_err(|e| unavailable(AwsError::call("S3 ListObjectsV2", e)))?;
        // An object's access tag is not in the listing: read beside it, a few at once (a
        // changed tag changes no ETag, and must reach the documents' access lists).
        let objects = futures::stream::iter(page.contents().iter().cloned())
            .map(|object| async move {
                let key = object.key().unwrap_or_default().to_string();
                let tags = (self.s3.get_object_tagging().bucket(bucket).key(&key).send())
                    .await
                    .map_err(|e| unavailable(AwsError::call("S3 GetObjectTagging", e)))?;
                Ok::<_, ObjectsError>(Listed {
                    etag: object.e_tag().unwrap_or_default().to_string(),
                    size: object.size().unwrap_or(0).max(0) as u64,
                    access: access_of(tags.tag_set()),
                    key,
                })
            })
            .buffered(TAGS_AT_ONCE)
            .try_collect()
            .await?;
        let next = match page.is_truncated() {
            Some(true) => page.next_continuation_token().map(str::to_string),
            _ => None,
        };
        Ok(ObjectPage { objects, next })
    }

    async fn read(
        &self,
        bucket: &str,
        key: &str,
        max_bytes: usize,
    ) -> Result<sluice_contract::sources::Object, ObjectsError> {
        match Documents::read(self, bucket, key, max_bytes).await {
            Ok(object) => Ok(sluice_contract::sources::Object {
                bytes: object.bytes,
                content_type: object.content_type,
            }),
            Err(e @ ReadError::TooLarge { .. }) => Err(ObjectsError::TooLarge(e.to_string())),
            Err(ReadError::Aws(e)) if e.to_string().contains("NoSuchKey") => {
                Err(ObjectsError::Gone)
            }
            Err(ReadError::Aws(e)) => Err(ObjectsError::Unavailable(e.to_string())),
        }
    }
}

/// An uploaded object as read.
#[derive(Debug)]
pub struct Object {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its `Content-Type`, when the uploader set one.
    pub content_type: Option<String>,
    /// Its [`ACCESS_TAG`]'s principals, comma-separated (as a file upload's `access`
    /// parameter); `None` without the tag.
    pub access: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_decoded_as_s3_events_encode_them() {
        assert_eq!(
            decode_key("acme/faq+2026%C3%A9.md").unwrap(),
            "acme/faq 2026é.md"
        );
        assert_eq!(decode_key("a%2Bb").unwrap(), "a+b");
        assert!(decode_key("acme/%zz.md").is_err());
        assert!(decode_key("acme/%C3").is_err());
    }

    #[test]
    fn the_first_segment_is_the_tenant() {
        assert_eq!(
            upload("acme/docs/faq.md"),
            Some(Upload {
                tenant: sluice_contract::Tenant::new("acme").unwrap(),
                name: "docs/faq.md".into()
            })
        );
        assert_eq!(upload("faq.md"), None);
        assert_eq!(upload("acme/"), None);
        assert_eq!(upload("a cme/faq.md"), None);
    }
}
