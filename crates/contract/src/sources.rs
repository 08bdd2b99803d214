//! A tenant's sources: a website or an S3 prefix whose documents Sluice keeps in step with
//! it. What a source is ([`Source`], checked whole by [`Source::parse`]), what a sync of one
//! did ([`SyncReport`]), and what reading a bucket needs ([`Objects`], implemented over S3 by
//! `sluice-aws`).
//!
//! Every document a sync writes carries two metadata keys beside the source's own:
//! [`SOURCE_KEY`] (the source's name: a filter finds its documents) and [`VERSION_KEY`] (what
//! the source said identifies the version it was read from: a page's `ETag` or
//! `Last-Modified`, an object's ETag and access tag), so that the next sync knows what it
//! holds without fetching it again.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::evals::check_name;

/// The metadata key that names the source a document was synced from.
pub const SOURCE_KEY: &str = "sluice_source";

/// The metadata key that holds the version of the page or object a document was read from.
pub const VERSION_KEY: &str = "sluice_version";

/// The most sources a tenant may keep.
pub const MAX_SOURCES: usize = 50;

/// The reports of its last syncs kept per source.
pub const REPORTS_KEPT: usize = 20;

/// The most start URLs (and path prefixes) a website source may name.
pub const MAX_START: usize = 100;

/// The default page cap of a website or object cap of a prefix.
pub const DEFAULT_MAX_PAGES: usize = 1_000;

/// The default link depth from a start URL (from a sitemap's pages: 0).
pub const DEFAULT_MAX_DEPTH: usize = 5;

/// The most links deep a source may ask to be followed.
pub const MAX_DEPTH: usize = 20;

/// The default byte cap of one sync (every page or object read).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// The shortest schedule, in minutes.
pub const MIN_EVERY_MINUTES: u32 = 1;

/// The longest schedule, in minutes (30 days).
pub const MAX_EVERY_MINUTES: u32 = 43_200;

/// A tenant's source, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A website (set this or `s3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website: Option<Website>,
    /// An S3 prefix (set this or `website`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Prefix>,
    /// Synced every this many minutes; absent: only when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_minutes: Option<u32>,
    /// Metadata every document of the source gets (a key a document sets itself, in a
    /// Markdown file's front matter say, keeps the document's value).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// The access list of its documents (principals separated by commas), unless the source
    /// says one itself (an object's `sluice-access` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// The most pages or objects one sync reads.
    #[serde(default = "default_max_pages")]
    pub max_pages: usize,
    /// The most bytes one sync reads.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
}

fn default_max_pages() -> usize {
    DEFAULT_MAX_PAGES
}

fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

/// A website: the pages its sitemap lists, or those its start URLs link to, inside its path
/// prefixes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Website {
    /// Its sitemap (a `<urlset>`, or an index of them; gzipped or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sitemap: Option<String>,
    /// Pages to start from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub start: Vec<String>,
    /// Path prefixes pages must start with (on the hosts of `sitemap` and `start`); empty:
    /// the folders of the start URLs ([`Website::scope`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    /// Links followed this deep from a listed page (default 5 from start URLs, 0 from a
    /// sitemap's pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<usize>,
}

impl Website {
    /// The path prefixes pages must start with: those given, else the folder of each start
    /// URL (`https://e.com/docs/intro` → `/docs/`); with neither (a sitemap alone), none:
    /// the whole of the sitemap's host.
    pub fn scope(&self) -> Vec<String> {
        if !self.scope.is_empty() {
            return self.scope.clone();
        }
        let folder = |url: &String| {
            let path = url::Url::parse(url).ok()?.path().to_string();
            Some(path[..=path.rfind('/')?].to_string())
        };
        self.start.iter().filter_map(folder).collect()
    }

    /// The depth links are followed to.
    pub fn depth(&self) -> usize {
        (self.max_depth).unwrap_or(match self.sitemap {
            Some(_) => 0,
            None => DEFAULT_MAX_DEPTH,
        })
    }
}

/// The objects of an S3 bucket under a prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Prefix {
    /// The bucket.
    pub bucket: String,
    /// The prefix of the keys (empty: the whole bucket).
    #[serde(default)]
    pub prefix: String,
}

/// A source that is not valid: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSource {
    /// The field, as a path (`website.start[1]`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidSource {
    InvalidSource {
        field: field.into(),
        message: message.into(),
    }
}

impl Source {
    /// `body` read as a source, checked whole; `max_pages` and `max_bytes` are the operator's
    /// caps.
    pub fn parse(body: &Value, max_pages: usize, max_bytes: u64) -> Result<Self, InvalidSource> {
        let source: Source =
            serde_json::from_value(body.clone()).map_err(|e| invalid("source", e.to_string()))?;
        match (&source.website, &source.s3) {
            (Some(site), None) => site.check()?,
            (None, Some(s3)) => s3.check()?,
            _ => return Err(invalid("source", "give one of website and s3")),
        }
        if let Some(every) = source.every_minutes
            && !(MIN_EVERY_MINUTES..=MAX_EVERY_MINUTES).contains(&every)
        {
            return Err(invalid(
                "every_minutes",
                format!("must be from {MIN_EVERY_MINUTES} to {MAX_EVERY_MINUTES}, not {every}"),
            ));
        }
        crate::metadata::Metadata::from_json(&source.metadata)
            .map_err(|e| invalid("metadata", e))?;
        for key in [SOURCE_KEY, VERSION_KEY, crate::access::ACCESS_KEY] {
            if source.metadata.contains_key(key) {
                return Err(invalid(
                    "metadata",
                    format!("{key:?} is set by Sluice (use \"access\" for an access list)"),
                ));
            }
        }
        if let Some(access) = &source.access {
            for principal in access.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                crate::access::check_principal(principal).map_err(|e| invalid("access", e))?;
            }
        }
        if !(1..=max_pages).contains(&source.max_pages) {
            return Err(invalid(
                "max_pages",
                format!("must be from 1 to {max_pages} (SLUICE_SYNC_MAX_PAGES)"),
            ));
        }
        if !(1..=max_bytes).contains(&source.max_bytes) {
            return Err(invalid(
                "max_bytes",
                format!("must be from 1 to {max_bytes} (SLUICE_SYNC_MAX_BYTES)"),
            ));
        }
        Ok(source)
    }

    /// What it reads, in a few words (`website https://…`, `s3://bucket/prefix`).
    pub fn describe(&self) -> String {
        match (&self.website, &self.s3) {
            (Some(site), _) => {
                let first = site.sitemap.as_ref().or(site.start.first());
                format!("website {}", first.map_or("", String::as_str))
            }
            (_, Some(s3)) => format!("s3://{}/{}", s3.bucket, s3.prefix),
            _ => String::new(),
        }
    }
}

impl Website {
    fn check(&self) -> Result<(), InvalidSource> {
        if self.sitemap.is_none() && self.start.is_empty() {
            return Err(invalid("website", "give a sitemap, or start URLs"));
        }
        if self.start.len() > MAX_START || self.scope.len() > MAX_START {
            return Err(invalid(
                "website",
                format!("at most {MAX_START} start URLs and {MAX_START} path prefixes"),
            ));
        }
        if let Some(sitemap) = &self.sitemap {
            crate::net::site_url(sitemap).map_err(|e| invalid("website.sitemap", e))?;
        }
        for (i, url) in self.start.iter().enumerate() {
            crate::net::site_url(url).map_err(|e| invalid(format!("website.start[{i}]"), e))?;
        }
        for (i, prefix) in self.scope.iter().enumerate() {
            if !prefix.starts_with('/') || prefix.len() > crate::net::MAX_URL_BYTES {
                return Err(invalid(
                    format!("website.scope[{i}]"),
                    "a path prefix starts with / (\"/docs/\")",
                ));
            }
        }
        if self.depth() > MAX_DEPTH {
            return Err(invalid("website.max_depth", format!("at most {MAX_DEPTH}")));
        }
        Ok(())
    }
}

impl S3Prefix {
    fn check(&self) -> Result<(), InvalidSource> {
        // S3's rule for bucket names (the general purpose buckets').
        let b = self.bucket.as_bytes();
        let named = (3..=63).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric();
        if !named {
            return Err(invalid(
                "s3.bucket",
                format!("{:?} is not an S3 bucket name", self.bucket),
            ));
        }
        if self.prefix.len() > 1_024 {
            return Err(invalid("s3.prefix", "at most 1,024 bytes"));
        }
        Ok(())
    }
}

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncStatus {
    /// Going.
    Running,
    /// Listed and reconciled (some items may have failed: see `failed`).
    Done,
    /// The source could not be listed, or the store failed: nothing was taken for gone.
    Failed,
    /// Canceled, or its client left, or its time ran out: what it did stays, nothing unlisted
    /// was deleted.
    Stopped,
}

/// What one sync did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The sync's id (`sync-<ms>-<n>`: ids sort as syncs started).
    pub id: String,
    /// The source's name.
    pub source: String,
    /// `manual` or `schedule`.
    pub trigger: String,
    /// How it ended.
    pub status: SyncStatus,
    /// When it started and ended (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Milliseconds it took.
    pub ms: u64,
    /// Pages or objects the source listed in scope (each one of the four below, or failed).
    pub listed: usize,
    /// New documents' pages or objects written.
    pub added: usize,
    /// Pages or objects written again because they changed.
    pub changed: usize,
    /// Pages or objects found as they were (nothing embedded).
    pub unchanged: usize,
    /// Pages or objects gone from the source whose documents were deleted.
    pub deleted: usize,
    /// Pages or objects that could not be read or written, each with why (the first 100).
    pub failed: Vec<Failure>,
    /// How many failed in all.
    pub failures: usize,
    /// What was not read, by why.
    pub skipped: Skipped,
    /// Bytes read of pages and objects.
    pub bytes: u64,
    /// Why the sync stopped before it had seen the whole source (a cap, a cancel), if it did:
    /// nothing it did not see was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last page or object it came to, when it stopped before the end of its listing: the
    /// next sync starts after it (and comes round to the start), so that a source larger than
    /// one sync's caps and time is read whole over several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_after: Option<String>,
    /// When its pages or objects were handed out in batches to be read elsewhere (on AWS):
    /// how many were sent, and how many have been read. The sync is `running` until the last
    /// is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<Batched>,
}

/// A sync's batches: sent, and read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batched {
    /// How many the sync sent.
    pub sent: usize,
    /// How many have been read.
    pub read: usize,
}

/// A page or object that could not be read or written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Its URL or key.
    pub item: String,
    /// Why.
    pub reason: String,
}

/// What a sync did not read, counted by why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// Disallowed by the site's `robots.txt`.
    pub robots: usize,
    /// Pages that ask not to be indexed (`noindex`).
    pub noindex: usize,
    /// Pages or objects a cap left unread.
    pub caps: usize,
    /// Pages linked deeper than the source's depth.
    pub depth: usize,
    /// Pages that redirect elsewhere (their target is read in its own right).
    pub redirects: usize,
}

/// The most failures a report lists (all are counted).
pub const MAX_FAILURES_LISTED: usize = 100;

impl SyncReport {
    /// Counts `listed` from the outcomes: every page or object listed was added, changed,
    /// unchanged or failed.
    pub fn count_listed(&mut self) {
        self.listed = self.added + self.changed + self.unchanged + self.failures;
    }

    /// Notes that `item` failed, for `reason`.
    pub fn fail(&mut self, item: &str, reason: impl Into<String>) {
        self.failures += 1;
        if self.failed.len() < MAX_FAILURES_LISTED {
            self.failed.push(Failure {
                item: item.to_string(),
                reason: reason.into(),
            });
        }
    }
}

/// One object under a prefix, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// Its ETag.
    pub etag: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its `sluice-access` tag, when it has one.
    pub access: Option<String>,
}

/// A page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectPage {
    /// Its objects.
    pub objects: Vec<Listed>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// An object, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its `Content-Type`.
    pub content_type: Option<String>,
}

/// A bucket that could not be listed or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectsError {
    /// The object is over the cap.
    #[error("{0}")]
    TooLarge(String),
    /// The object is not there (deleted since it was listed).
    #[error("the object is gone")]
    Gone,
    /// S3 failed or refused (access denied, no such bucket): what it said.
    #[error("{0}")]
    Unavailable(String),
}

/// The buckets a deployment may read for its tenants' S3 sources.
#[async_trait::async_trait]
pub trait Objects: Send + Sync {
    /// A page of the objects under `prefix` (with their access tags), from `after` (a page's
    /// `next`).
    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<String>,
    ) -> Result<ObjectPage, ObjectsError>;
    /// The object `key`, at most `max_bytes` of it.
    async fn read(&self, bucket: &str, key: &str, max_bytes: usize)
    -> Result<Object, ObjectsError>;
}

/// The most pages or objects in one [`SyncBatch`]: read in well under a minute at the default
/// rate of one request a second, so that a batch is never cut by its invocation's time.
pub const BATCH_ITEMS: usize = 10;

/// What the sync queue ([`Batches`]) carries, read by the ingest function on AWS, one message
/// at a time per source (its group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMessage {
    /// A due source's sync, to start: the schedule sends one per due source, so that each is
    /// listed (or, a walk by links, read whole) by an invocation of its own.
    Start {
        /// The tenant (a tenant id, checked again when read).
        tenant: String,
        /// The source's name.
        source: String,
    },
    /// A part of a sync to read.
    Batch(SyncBatch),
}

/// A part of a sync handed to another process to read ([`SyncMessage::Batch`]): on AWS, the
/// invocation that starts a sync lists a sitemap or a prefix whole, deletes what is gone, and
/// sends what is new or changed in batches through a queue to the ingest function; the last
/// batch writes the sync's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncBatch {
    /// The tenant (a tenant id, checked again when read).
    pub tenant: String,
    /// The source's name.
    pub source: String,
    /// The sync's id.
    pub sync: String,
    /// This batch's place, from 0, and how many the sync sent.
    pub index: usize,
    /// How many batches the sync sent.
    pub of: usize,
    /// What to read.
    pub items: Vec<BatchItem>,
}

/// A page or object of a [`SyncBatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchItem {
    /// The page's URL, or the object's `s3://bucket/key`.
    pub origin: String,
    /// Whether the tenant holds documents of it.
    pub held: bool,
    /// The version they were read at, when they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The object as listed (an S3 source's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Listed>,
}

/// A queue that could not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueueError(pub String);

/// Where syncs' messages go to be read ([`SyncMessage`]): SQS FIFO on AWS.
#[async_trait::async_trait]
pub trait Batches: Send + Sync {
    /// Sends `message`, in order behind the earlier messages of `group` (one read at a time per
    /// group: a source's site is asked politely), and once only per `dedup`.
    async fn send(&self, group: &str, dedup: &str, message: &SyncMessage)
    -> Result<(), QueueError>;
}

/// The [`VERSION_KEY`] of an object: its ETag and its access tag (a tag changes no ETag).
pub fn object_version(listed: &Listed) -> String {
    format!(
        "s3:{}|{}",
        listed.etag,
        listed.access.as_deref().unwrap_or("")
    )
}

/// `name` checked as a source's name.
pub fn check_source_name(name: &str) -> Result<(), InvalidSource> {
    check_name(name).map_err(|e| invalid("name", e))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<Source, InvalidSource> {
        Source::parse(&body, 10_000, 1 << 30)
    }

    #[test]
    fn a_source_is_one_website_or_one_prefix_checked_whole() {
        let site = parse(json!({"website": {"start": ["https://docs.example.com/"]}})).unwrap();
        assert_eq!(site.max_pages, DEFAULT_MAX_PAGES);
        assert_eq!(site.website.as_ref().unwrap().depth(), DEFAULT_MAX_DEPTH);
        let mapped = parse(json!({"website": {"sitemap": "https://e.com/sitemap.xml"}})).unwrap();
        assert_eq!(mapped.website.as_ref().unwrap().depth(), 0);
        assert!(
            mapped.website.unwrap().scope().is_empty(),
            "the sitemap's whole host"
        );
        let started =
            parse(json!({"website": {"start": ["https://e.com/docs/intro", "https://e.com/"]}}));
        assert_eq!(started.unwrap().website.unwrap().scope(), ["/docs/", "/"]);
        assert!(parse(json!({"s3": {"bucket": "docs-bucket", "prefix": "kb/"}})).is_ok());
        for (body, field) in [
            (json!({}), "source"),
            (
                json!({"website": {"start": ["https://e.com/"]}, "s3": {"bucket": "abc"}}),
                "source",
            ),
            (json!({"website": {}}), "website"),
            (
                json!({"website": {"start": ["ftp://e.com/"]}}),
                "website.start[0]",
            ),
            (
                json!({"website": {"start": ["https://u:p@e.com/"]}}),
                "website.start[0]",
            ),
            (
                json!({"website": {"sitemap": "file:///etc/passwd"}}),
                "website.sitemap",
            ),
            (
                json!({"website": {"start": ["https://e.com/"], "scope": ["docs"]}}),
                "website.scope[0]",
            ),
            (
                json!({"website": {"start": ["https://e.com/"], "max_depth": 99}}),
                "website.max_depth",
            ),
            (json!({"s3": {"bucket": "Bad_Bucket"}}), "s3.bucket"),
            (
                json!({"s3": {"bucket": "abc"}, "every_minutes": 0}),
                "every_minutes",
            ),
            (
                json!({"s3": {"bucket": "abc"}, "max_pages": 10_001}),
                "max_pages",
            ),
            (
                json!({"s3": {"bucket": "abc"}, "max_bytes": 0}),
                "max_bytes",
            ),
            (
                json!({"s3": {"bucket": "abc"}, "access": "nobody-like-this"}),
                "access",
            ),
            (
                json!({"s3": {"bucket": "abc"}, "metadata": {"sluice_source": "x"}}),
                "metadata",
            ),
            (
                json!({"s3": {"bucket": "abc"}, "metadata": {"a": {"b": 1}}}),
                "metadata",
            ),
            (json!({"s3": {"bucket": "abc"}, "surprise": 1}), "source"),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.field, field, "{body}: {e}");
        }
    }

    #[test]
    fn an_objects_version_changes_with_its_access_tag() {
        let mut listed = Listed {
            key: "kb/a.md".into(),
            etag: "\"e1\"".into(),
            size: 3,
            access: None,
        };
        let before = object_version(&listed);
        listed.access = Some("group:hr".into());
        assert_ne!(object_version(&listed), before);
    }
}
