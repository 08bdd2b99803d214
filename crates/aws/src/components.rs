//! Component storage for the Lambda functions: bytes in S3, records in DynamoDB.
//!
//! | where | what |
//! |---|---|
//! | S3 `<tenant>/<version>.wasm` | the upload |
//! | S3 `<tenant>/<version>.<engine>.cwasm` | its artefact, compiled by the registry function for the functions' architecture (the SAM template's `Architecture`) and engine settings |
//! | DynamoDB `pk = <tenant>`, `sk = v#<version>` | an upload: `size`, `at` (Unix ms, upload order), `label` when given |
//! | S3 `<tenant>/<version>.failures.json`, `.calls.json` | its last failures and its log, written by the functions that run it |
//! | DynamoDB `pk = <tenant>`, `sk = active` | `version`: the active one (absent: the built-in default) |
//!
//! The tenant leads every key, in the bucket and in the table. The registry writes the bytes
//! first and the records after, so a listed or active version always has its bytes.
//!
//! Over several regions the table is a global table and each region has its own bucket
//! (`SLUICE_COMPONENT_REPLICAS`, set on the registry function): bytes are written to this
//! region's bucket and then to every other region's before the call returns, and a write
//! that fails anywhere fails the upload. So the rule holds in every region — a version that
//! replication brings into a region's table already has its bytes there — at the price that
//! an upload needs every region up (answers need only their own).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::ByteStream;
use sluice_contract::Tenant;
use sluice_contract::components::{ComponentError, ComponentStorage as Storage, StoredVersion};

use crate::{AwsError, s};

/// Components in `SLUICE_COMPONENT_BUCKET`, records in `SLUICE_COMPONENT_TABLE`.
pub struct S3Components {
    s3: aws_sdk_s3::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    bucket: String,
    table: String,
    /// Every other region's bucket, with a client in that region.
    replicas: Vec<Replica>,
    /// The runtime the calls run on: [`Storage`] is called on blocking threads, which wait
    /// for the calls here.
    runtime: tokio::runtime::Handle,
}

/// Another region's component bucket.
struct Replica {
    region: String,
    bucket: String,
    s3: aws_sdk_s3::Client,
}

impl S3Components {
    /// Clients from the standard AWS environment for `bucket` (`SLUICE_COMPONENT_BUCKET`)
    /// and `table` (`SLUICE_COMPONENT_TABLE`). Call within the tokio runtime that is to run
    /// the calls.
    pub async fn connect(bucket: &str, table: &str) -> Result<Self, AwsError> {
        let sdk = crate::sdk_config("SLUICE_COMPONENT_BUCKET").await?;
        Ok(Self {
            s3: crate::s3_client(&sdk),
            dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
            bucket: bucket.to_string(),
            table: table.to_string(),
            replicas: Vec::new(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Also writes every object to these buckets (`(region, bucket)`, from
    /// `SLUICE_COMPONENT_REPLICAS`; this storage's own bucket among them is skipped), each
    /// through a client in its region.
    pub async fn with_replicas(mut self, replicas: &[(String, String)]) -> Result<Self, AwsError> {
        let sdk = crate::sdk_config("SLUICE_COMPONENT_REPLICAS").await?;
        self.replicas = replicas
            .iter()
            // Every region's bucket may be listed, this one's too: it is written already.
            .filter(|(_, bucket)| *bucket != self.bucket)
            .map(|(region, bucket)| Replica {
                region: region.clone(),
                bucket: bucket.clone(),
                s3: crate::s3_client_in(&sdk, Some(region)),
            })
            .collect();
        Ok(self)
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    async fn get_object(&self, key: &str) -> Result<Option<Vec<u8>>, AwsError> {
        let object = match self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(o) => o,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(AwsError::call("S3 GetObject", e)),
        };
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|e| AwsError::call("S3 GetObject (body)", e))?;
        Ok(Some(bytes.to_vec()))
    }

    /// Writes `bytes` here, then in every replica at once.
    async fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), AwsError> {
        // A copy of the bytes per region: a component is a few MB at most.
        let put = |s3: &aws_sdk_s3::Client, bucket: &str| {
            let body = ByteStream::from(bytes.to_vec());
            let call = s3.put_object().bucket(bucket).key(key).body(body).send();
            async move { call.await.map(|_| ()) }
        };
        put(&self.s3, &self.bucket)
            .await
            .map_err(|e| AwsError::call("S3 PutObject", e))?;
        let copies = self.replicas.iter().map(|r| async move {
            put(&r.s3, &r.bucket).await.map_err(|e| AwsError::Call {
                service: "S3 PutObject (replica)",
                message: format!(
                    "{}/{key} in {}: {}",
                    r.bucket,
                    r.region,
                    aws_sdk_s3::error::DisplayErrorContext(e)
                ),
            })
        });
        for copied in futures::future::join_all(copies).await {
            copied?;
        }
        Ok(())
    }

    /// Removes `key` here, then in every replica at once (S3 answers a missing key as done).
    async fn delete_object(&self, key: &str) -> Result<(), AwsError> {
        let delete = |s3: &aws_sdk_s3::Client, bucket: &str| {
            let call = s3.delete_object().bucket(bucket).key(key).send();
            async move { call.await.map(|_| ()) }
        };
        delete(&self.s3, &self.bucket)
            .await
            .map_err(|e| AwsError::call("S3 DeleteObject", e))?;
        let copies = self.replicas.iter().map(|r| async move {
            delete(&r.s3, &r.bucket)
                .await
                .map_err(|e| AwsError::call("S3 DeleteObject (replica)", e))
        });
        for deleted in futures::future::join_all(copies).await {
            deleted?;
        }
        Ok(())
    }

    async fn query_versions(&self, tenant: &str) -> Result<Vec<StoredVersion>, AwsError> {
        let pages = self
            .dynamodb
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :t AND begins_with(sk, :v)")
            .expression_attribute_values(":t", s(tenant))
            .expression_attribute_values(":v", s("v#"))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let items: Vec<HashMap<String, AttributeValue>> = pages
            .collect::<Result<_, _>>()
            .await
            .map_err(|e| AwsError::call("DynamoDB Query", e))?;
        let mut rows = Vec::with_capacity(items.len());
        for item in items {
            let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok());
            let number = |name: &str| {
                item.get(name)
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<u64>().ok())
            };
            let (Some(version), Some(size), Some(at)) = (
                text("sk").and_then(|sk| sk.strip_prefix("v#")),
                number("size"),
                number("at"),
            ) else {
                return Err(AwsError::Malformed(format!(
                    "a component record of tenant {tenant:?} in {} lacks sk, size or at",
                    self.table
                )));
            };
            rows.push(StoredVersion {
                version: version.to_string(),
                size: size as usize,
                uploaded_ms: at,
                label: text("label").cloned(),
            });
        }
        rows.sort_by(|a, b| (a.uploaded_ms, &a.version).cmp(&(b.uploaded_ms, &b.version)));
        Ok(rows)
    }

    async fn put_version(&self, tenant: &str, version: &StoredVersion) -> Result<(), AwsError> {
        let mut put = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(tenant))
            .item("sk", s(&format!("v#{}", version.version)))
            .item("size", AttributeValue::N(version.size.to_string()))
            .item("at", AttributeValue::N(version.uploaded_ms.to_string()));
        if let Some(label) = &version.label {
            put = put.item("label", s(label));
        }
        // The first upload's time and label stand: the same bytes again keep their place.
        let put = (put.condition_expression("attribute_not_exists(pk)"))
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(e) if crate::lost_condition(&e) => Ok(()),
            Err(e) => Err(AwsError::call("DynamoDB PutItem", e)),
        }
    }

    async fn delete_version(&self, tenant: &str, version: &str) -> Result<(), AwsError> {
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(tenant))
            .key("sk", s(&format!("v#{version}")))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::call("DynamoDB DeleteItem", e))
    }

    async fn get_active(&self, tenant: &str) -> Result<Option<String>, AwsError> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .key("pk", s(tenant))
            .key("sk", s("active"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::call("DynamoDB GetItem", e))?;
        match item.item() {
            None => Ok(None),
            Some(item) => match item.get("version").and_then(|v| v.as_s().ok()) {
                Some(v) => Ok(Some(v.clone())),
                None => Err(AwsError::Malformed(format!(
                    "the active record of tenant {tenant:?} in {} has no version",
                    self.table
                ))),
            },
        }
    }

    async fn put_active(&self, tenant: &str, version: Option<&str>) -> Result<(), AwsError> {
        match version {
            Some(v) => self
                .dynamodb
                .put_item()
                .table_name(&self.table)
                .item("pk", s(tenant))
                .item("sk", s("active"))
                .item("version", s(v))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| AwsError::call("DynamoDB PutItem", e)),
            None => self
                .dynamodb
                .delete_item()
                .table_name(&self.table)
                .key("pk", s(tenant))
                .key("sk", s("active"))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| AwsError::call("DynamoDB DeleteItem", e)),
        }
    }
}

impl S3Components {
    /// Waits, on the calling (blocking) thread, for `call` to run on the runtime.
    fn wait<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, AwsError>>,
    ) -> Result<T, ComponentError> {
        self.runtime
            .block_on(call)
            .map_err(|e| ComponentError::Storage(e.to_string()))
    }
}

impl Storage for S3Components {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ComponentError> {
        self.wait(self.get_object(key))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), ComponentError> {
        // An S3 object is whole or absent: never half-written.
        self.wait(self.put_object(key, bytes))
    }

    fn remove(&self, key: &str) -> Result<(), ComponentError> {
        self.wait(self.delete_object(key))
    }

    fn versions(&self, tenant: &Tenant) -> Result<Vec<StoredVersion>, ComponentError> {
        self.wait(self.query_versions(tenant))
    }

    fn add_version(&self, tenant: &Tenant, version: &StoredVersion) -> Result<(), ComponentError> {
        self.wait(self.put_version(tenant, version))
    }

    fn remove_version(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError> {
        self.wait(self.delete_version(tenant, version))
    }

    fn active(&self, tenant: &Tenant) -> Result<Option<String>, ComponentError> {
        self.wait(self.get_active(tenant))
    }

    fn set_active(&self, tenant: &Tenant, version: Option<&str>) -> Result<(), ComponentError> {
        self.wait(self.put_active(tenant, version))
    }
}
