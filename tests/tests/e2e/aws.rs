//! The AWS adapters of the Lambda deployment, on the emulator `make test` starts: component
//! storage in S3 and DynamoDB shared by two registries (as the registry and answer functions
//! share it, each in its own process), settings from Secrets Manager, and usage counted in
//! DynamoDB by many environments at once.

use sluice_testkit::{hit, tenant};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_aws::components::S3Components;
use sluice_contract::cancel::Cancel;
use sluice_contract::components::{ComponentStorage, Components, StoredVersion};
use sluice_contract::stages::Reranker;
use sluice_rerank::{ComponentLimits, ModelHost, Registry, Sandbox};
use sluice_tests::aws;

use sluice_tests::REVERSE;

/// Component storage on a fresh bucket and table.
async fn storage() -> (Arc<S3Components>, String) {
    let bucket = aws::bucket("components").await;
    let table = aws::component_table().await;
    (
        Arc::new(S3Components::connect(&bucket, &table).await.unwrap()),
        bucket,
    )
}

/// Runs `f` where the storage may block: on the blocking pool, as the pipeline does.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// The order `component` gives `hits` (no context), on the blocking pool.
async fn order_of(
    component: Arc<dyn sluice_contract::stages::ActiveComponent>,
    hits: Vec<sluice_contract::stages::Hit>,
) -> Vec<usize> {
    let call = blocking(move || {
        component.rerank(&sluice_contract::stages::RerankInput {
            query: "q",
            query_vector: &[],
            hits: &hits,
            context: &Default::default(),
            request_id: "",
        })
    })
    .await;
    assert!(call.fuel > 0, "{call:?}");
    (call.order.unwrap().iter()).map(|&(i, _)| i).collect()
}

fn registry(storage: Arc<S3Components>, refresh: Duration) -> Arc<Registry> {
    let sandbox = Sandbox::new(
        ComponentLimits::default(),
        Arc::new(ModelHost(sluice_tests::model())),
    )
    .unwrap();
    Arc::new(Registry::new(sandbox, storage, refresh))
}

#[tokio::test]
async fn bytes_versions_and_the_active_pointer_round_trip() {
    sluice_testkit::needs!(Llm, Aws);
    let (s3, _) = storage().await;
    blocking(move || {
        assert_eq!(s3.get("acme/nothing.wasm").unwrap(), None);
        s3.put("acme/a.wasm", b"first").unwrap();
        assert_eq!(
            s3.get("acme/a.wasm").unwrap().as_deref(),
            Some(&b"first"[..])
        );

        assert_eq!(s3.versions(&tenant("acme")).unwrap(), vec![]);
        let record = |version: &str, size, uploaded_ms, label: Option<&str>| StoredVersion {
            version: version.into(),
            size,
            uploaded_ms,
            label: label.map(str::to_string),
        };
        let b = record("b", 20, 2000, Some("first try"));
        s3.add_version(&tenant("acme"), &b).unwrap();
        // Versions are listed in the order of their upload times (the time, not the key).
        let a = record("a", 10, 3000, None);
        s3.add_version(&tenant("acme"), &a).unwrap();
        // Again: a no-op that keeps the first upload's place and label.
        (s3.add_version(&tenant("acme"), &record("b", 20, 4000, Some("again")))).unwrap();
        assert_eq!(
            s3.versions(&tenant("acme")).unwrap(),
            vec![b.clone(), a.clone()],
            "upload order, not key order; the first record stands"
        );
        // A deleted version's record and bytes are gone (and deleting again is no error).
        s3.remove_version(&tenant("acme"), "a").unwrap();
        s3.remove_version(&tenant("acme"), "a").unwrap();
        assert_eq!(s3.versions(&tenant("acme")).unwrap(), vec![b.clone()]);
        s3.remove("acme/a.wasm").unwrap();
        s3.remove("acme/a.wasm").unwrap();
        assert_eq!(s3.get("acme/a.wasm").unwrap(), None);
        s3.add_version(&tenant("acme"), &a).unwrap();
        assert_eq!(s3.versions(&tenant("globex")).unwrap(), vec![]);

        assert_eq!(s3.active(&tenant("acme")).unwrap(), None);
        s3.set_active(&tenant("acme"), Some("a")).unwrap();
        assert_eq!(s3.active(&tenant("acme")).unwrap().as_deref(), Some("a"));
        assert_eq!(s3.active(&tenant("globex")).unwrap(), None);
        s3.set_active(&tenant("acme"), None).unwrap();
        assert_eq!(s3.active(&tenant("acme")).unwrap(), None);
    })
    .await;
}

/// The version `registry` answers for the tenant `name`, waiting for its storage as long as it takes.
async fn active(registry: &Registry, name: &str) -> Option<String> {
    let by = tokio::time::Instant::now() + Duration::from_secs(30);
    registry
        .active(&tenant(name), by)
        .await
        .unwrap()
        .map(|c| c.version().to_string())
}

#[tokio::test]
async fn what_one_registry_compiles_another_loads_and_an_activation_is_seen_after_the_refresh() {
    sluice_testkit::needs!(Llm, Aws, Model);
    let (s3, bucket) = storage().await;
    // The registry function's view (checks the pointer every time) and two answer functions':
    // one trusts what it knows for 400 ms, the other for a minute (longer than this test).
    let writer = registry(s3.clone(), Duration::ZERO);
    let reader = registry(s3.clone(), Duration::from_millis(400));
    let trusting = registry(s3.clone(), Duration::from_secs(60));

    assert_eq!(active(&reader, "acme").await, None);
    assert_eq!(active(&trusting, "acme").await, None);
    let w = writer.clone();
    let version = blocking(move || {
        w.upload(&tenant("acme"), REVERSE.as_bytes(), None, &Cancel::new())
            .unwrap()
            .version
    })
    .await;
    // The upload and its compiled artefact, for this engine, are in the bucket.
    let fingerprint = writer.sandbox().engine_fingerprint();
    assert!(aws::object_exists(&bucket, &format!("acme/{version}.wasm")).await);
    assert!(aws::object_exists(&bucket, &format!("acme/{version}.{fingerprint}.cwasm")).await);

    let (w, v) = (writer.clone(), version.clone());
    blocking(move || w.activate(&tenant("acme"), &v).unwrap()).await;
    assert_eq!(
        active(&writer, "acme").await.as_deref(),
        Some(version.as_str())
    );
    // Within its refresh interval a reader still knows "none" (however long the upload took);
    // after it, it checks again and sees the new version.
    assert_eq!(active(&trusting, "acme").await, None);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        active(&reader, "acme").await.as_deref(),
        Some(version.as_str())
    );
    // And runs it: the reverse component turns the order around.
    let hits = vec![hit("a", 0.3), hit("b", 0.2), hit("c", 0.1)];
    let by = tokio::time::Instant::now() + Duration::from_secs(30);
    let component = reader.active(&tenant("acme"), by).await.unwrap().unwrap();
    // (What the call burnt is reported, what the tenant's usage counts: `order_of` checks.)
    assert_eq!(order_of(component, hits).await, vec![2, 1, 0]);
    // Other tenants are untouched.
    assert_eq!(active(&reader, "globex").await, None);

    let w = writer.clone();
    blocking(move || w.deactivate(&tenant("acme")).unwrap()).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(active(&reader, "acme").await, None);
}

#[tokio::test]
async fn settings_come_from_a_secret_of_sluice_values() {
    sluice_testkit::needs!(Llm, Aws);
    let arn = aws::secret(&json!({"SLUICE_QDRANT_API_KEY": "k-123", "SLUICE_TOP_K": "7"})).await;
    let settings = sluice_aws::secrets::settings(&arn).await.unwrap();
    assert_eq!(settings.len(), 2);
    assert_eq!(settings["SLUICE_QDRANT_API_KEY"], "k-123");

    let arn = aws::secret(&json!({"QDRANT_API_KEY": "k-123"})).await;
    let e = sluice_aws::secrets::settings(&arn)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"QDRANT_API_KEY\" is not a SLUICE_* setting"),
        "{e}"
    );

    let e = sluice_aws::secrets::settings(
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:missing",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("Secrets Manager GetSecretValue"), "{e}");
}

#[tokio::test]
async fn a_tenants_hmac_secret_is_read_as_its_bytes() {
    sluice_testkit::needs!(Llm, Aws);
    use sluice_contract::access::SecretReader;
    let reader = sluice_aws::secrets::Reader::default();
    let text = "a shared secret of the test identity provider, é included";
    let arn = aws::secret_text(text).await;
    assert_eq!(reader.read(&arn).await, Ok(text.as_bytes().to_vec()));
    let e = reader
        .read("arn:aws:secretsmanager:us-east-1:123456789012:secret:missing")
        .await
        .unwrap_err();
    assert!(e.starts_with("Secrets Manager GetSecretValue"), "{e}");
}

#[tokio::test]
async fn usage_from_many_environments_adds_up_in_dynamodb_and_reads_back_by_tenant_and_days() {
    sluice_testkit::needs!(Llm, Aws);
    use sluice_contract::{usage::Counts, usage::UsageStore, usage::day_string, usage::parse_day};
    use sluice_core::{usage::Meter, usage::MeterSettings};
    let dir = tempfile::tempdir().unwrap();
    let table = format!("usage-{}", uuid::Uuid::new_v4().simple());
    let settings = sluice_tests::settings(
        dir.path(),
        &[
            ("SLUICE_USAGE", "dynamodb"),
            ("SLUICE_USAGE_TABLE", table.as_str()),
        ],
    );
    let usage = Arc::new(
        sluice_aws::usage::DynamoUsage::connect(&settings.aws.usage_table)
            .await
            .unwrap(),
    );
    usage.create_table().await.unwrap();
    // Eight environments, each with its own meter, answering for two tenants at once.
    let one = Counts {
        answers: 1,
        prompt_tokens: 100,
        completion_tokens: 20,
        component_calls: 1,
        component_fuel: 5_000,
        ..Counts::default()
    };
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let settings = MeterSettings::from_config(&settings.config.usage);
    // The environments run at once, but their writes reach moto one at a time: DynamoDB's
    // `ADD` is atomic, moto's is a read-modify-write that loses an update now and then when
    // two requests for one item overlap (seen once in CI: 39 of 40). What this test can
    // check against moto is that each meter adds to the rows the others wrote (an
    // overwrite would leave 1, not 40), which interleaved writes show as well.
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    let mut environments = tokio::task::JoinSet::new();
    for e in 0..8 {
        let store: Arc<dyn UsageStore> = usage.clone();
        let (acme, globex, settings) = (acme.clone(), globex.clone(), settings.clone());
        let turn = Arc::clone(&turn);
        environments.spawn(async move {
            let meter = Meter::new(store, settings);
            for i in 0..5 {
                let key = format!("key{}", (e + i) % 2);
                meter.record(&acme, Some(&key), one);
                meter.record(&globex, None, one);
                let _turn = turn.lock().await;
                meter.flush().await.unwrap();
            }
        });
    }
    while let Some(done) = environments.join_next().await {
        done.unwrap();
    }
    let today = sluice_core::usage::today();
    let rows = usage.read(&acme, today, today).await.unwrap();
    let mut total = Counts::default();
    for (key, counts) in &rows {
        assert_eq!(key.tenant, acme);
        assert_eq!(key.day, today);
        total.add(counts);
    }
    // 8 environments × 5 answers, split over two keys: every meter added to the rows the
    // others wrote (an overwrite would leave 5, not 40). The writes took turns (above), so
    // this does not show `ADD` holding under truly concurrent writes: that is DynamoDB's
    // atomicity, which moto does not model.
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(total.answers, 40);
    assert_eq!(total.tokens(), 40 * 120);
    assert_eq!(total.component_fuel, 40 * 5_000);
    let globex_rows = usage.read(&globex, today, today).await.unwrap();
    assert_eq!(globex_rows.len(), 1);
    assert_eq!(
        (globex_rows[0].0.key.as_deref(), globex_rows[0].1.answers),
        (None, 40)
    );
    // Days outside the range are not read; days inside are.
    let yesterday = today.previous_day().unwrap();
    assert!(
        usage
            .read(&acme, yesterday, yesterday)
            .await
            .unwrap()
            .is_empty()
    );
    let from = parse_day(&day_string(yesterday)).unwrap();
    assert_eq!(usage.read(&acme, from, today).await.unwrap().len(), 2);
}

#[tokio::test]
async fn two_regions_adding_to_one_global_usage_table_write_their_own_items_and_read_the_sum() {
    sluice_testkit::needs!(Llm, Aws);
    use aws_sdk_dynamodb::types::AttributeValue;
    use sluice_contract::{usage::Counts, usage::UsageKey, usage::UsageStore};
    use sluice_core::usage::today;
    // A global table settles concurrent writes to one item by last writer wins, so two
    // regions must never add to the same item. The emulator has no replication; what is
    // checked here is the part Sluice owns: each region's writes land in items of its own
    // and a read from either region sums them.
    let table = format!("usage-{}", uuid::Uuid::new_v4().simple());
    let home = sluice_aws::usage::DynamoUsage::connect(&table)
        .await
        .unwrap();
    home.create_table().await.unwrap();
    let home = home.writing_as("us-east-1");
    let other = sluice_aws::usage::DynamoUsage::connect(&table)
        .await
        .unwrap()
        .writing_as("eu-west-1");
    let acme = tenant("acme");
    let row = |answers| {
        let key = UsageKey {
            tenant: acme.clone(),
            key: Some("key0".into()),
            day: today(),
        };
        let counts = Counts {
            answers,
            prompt_tokens: 10 * answers,
            ..Counts::default()
        };
        (key, counts)
    };
    home.add(&[row(3)]).await.unwrap();
    other.add(&[row(4)]).await.unwrap();
    home.add(&[row(1)]).await.unwrap();

    for reader in [&home, &other] {
        let rows = reader.read(&acme, today(), today()).await.unwrap();
        assert_eq!(rows.len(), 1, "one row per day and key: {rows:?}");
        assert_eq!(rows[0].0.key.as_deref(), Some("key0"));
        assert_eq!((rows[0].1.answers, rows[0].1.prompt_tokens), (8, 80));
    }
    // Two items, one per region, each holding only its own region's adds.
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let items = aws_sdk_dynamodb::Client::new(&sdk)
        .query()
        .table_name(&table)
        .key_condition_expression("tenant = :t")
        .expression_attribute_values(":t", AttributeValue::S("acme".into()))
        .send()
        .await
        .unwrap();
    let mut by_region: Vec<(String, String)> = items
        .items()
        .iter()
        .map(|item| {
            let sort = item["day_key"].as_s().unwrap();
            let region = sort.rsplit('#').next().unwrap().to_string();
            (region, item["answers"].as_n().unwrap().clone())
        })
        .collect();
    by_region.sort();
    assert_eq!(
        by_region,
        vec![
            ("eu-west-1".into(), "4".into()),
            ("us-east-1".into(), "4".into())
        ]
    );
}

#[tokio::test]
async fn over_two_regions_an_upload_reaches_both_buckets_before_its_version_is_recorded() {
    sluice_testkit::needs!(Llm, Aws, Model);
    // The home region's registry writes its bucket and the other region's (through a client
    // in that region); the other region's answer function, reading its own bucket and the
    // shared (global) table, runs the version that was activated at home.
    let table = aws::component_table().await;
    let (home_bucket, eu_bucket) = (aws::bucket("home").await, aws::bucket("eu").await);
    let home = S3Components::connect(&home_bucket, &table)
        .await
        .unwrap()
        .with_replicas(&[("eu-west-1".to_string(), eu_bucket.clone())])
        .await
        .unwrap();
    let writer = registry(Arc::new(home), Duration::ZERO);
    let eu = Arc::new(S3Components::connect(&eu_bucket, &table).await.unwrap());
    let reader = registry(eu, Duration::ZERO);

    let w = writer.clone();
    let version = blocking(move || {
        let version = w
            .upload(&tenant("acme"), REVERSE.as_bytes(), None, &Cancel::new())
            .unwrap()
            .version;
        w.activate(&tenant("acme"), &version).unwrap();
        version
    })
    .await;
    let fingerprint = writer.sandbox().engine_fingerprint();
    for bucket in [&home_bucket, &eu_bucket] {
        assert!(aws::object_exists(bucket, &format!("acme/{version}.wasm")).await);
        assert!(
            aws::object_exists(bucket, &format!("acme/{version}.{fingerprint}.cwasm")).await,
            "{bucket}"
        );
    }
    assert_eq!(
        active(&reader, "acme").await.as_deref(),
        Some(version.as_str())
    );
    let by = tokio::time::Instant::now() + Duration::from_secs(30);
    let component = reader.active(&tenant("acme"), by).await.unwrap().unwrap();
    let hits = vec![hit("a", 0.3), hit("b", 0.2)];
    assert_eq!(order_of(component, hits).await, vec![1, 0]);

    // A region that cannot take the bytes fails the upload, which then records nothing: no
    // region's table can name a version whose bytes a region lacks.
    let missing = format!("missing-{}", uuid::Uuid::new_v4().simple());
    let cut_off = S3Components::connect(&home_bucket, &table)
        .await
        .unwrap()
        .with_replicas(&[("ap-southeast-2".to_string(), missing.clone())])
        .await
        .unwrap();
    let cut_off = registry(Arc::new(cut_off), Duration::ZERO);
    let (c, storage) = (
        cut_off.clone(),
        S3Components::connect(&home_bucket, &table).await.unwrap(),
    );
    let (error, versions) = blocking(move || {
        let error = c
            .upload(&tenant("globex"), REVERSE.as_bytes(), None, &Cancel::new())
            .unwrap_err();
        (
            error.to_string(),
            storage.versions(&tenant("globex")).unwrap(),
        )
    })
    .await;
    assert!(
        error.contains("ap-southeast-2") && error.contains(&missing),
        "names the region and bucket: {error}"
    );
    assert_eq!(versions, vec![]);
}

#[tokio::test]
async fn tenant_settings_in_dynamodb_take_one_version_per_write_and_reach_another_process_within_their_freshness()
 {
    sluice_testkit::needs!(Aws);
    use sluice_aws::settings::DynamoSettings;
    use sluice_contract::tenant_settings::{SettingsStore, TenantSettings};
    use sluice_core::tenants::Tenants;
    let table = format!("settings-{}", uuid::Uuid::new_v4().simple());
    let writer = Arc::new(DynamoSettings::connect(&table).await.unwrap());
    writer.create_table().await.unwrap();
    // Another process: its own client, reading through the answer path's kept copy.
    let fresh = Duration::from_millis(500);
    let reader = Tenants::new(
        Arc::new(DynamoSettings::connect(&table).await.unwrap()),
        fresh,
    );
    let acme = tenant("acme");
    let by = || tokio::time::Instant::now() + Duration::from_secs(5);
    assert!(reader.get(&acme, by()).await.is_none());
    let with_k = |k| TenantSettings {
        k: Some(k),
        ..TenantSettings::default()
    };
    assert_eq!(writer.put(&acme, with_k(1)).await.unwrap().version, 1);
    // Writers racing: each takes a version of its own.
    let racing = (2..=5).map(|k| {
        let writer = Arc::clone(&writer);
        let acme = acme.clone();
        tokio::spawn(async move { writer.put(&acme, with_k(k)).await.unwrap().version })
    });
    let mut versions = Vec::new();
    for race in racing {
        versions.push(race.await.unwrap());
    }
    versions.sort();
    assert_eq!(versions, [2, 3, 4, 5]);
    let last = writer.get(&acme).await.unwrap().unwrap();
    assert_eq!(last.version, 5);
    // The reader kept "none" for its freshness; after it, the last version.
    tokio::time::sleep(fresh + Duration::from_millis(100)).await;
    let seen = reader.get(&acme, by()).await.expect("read again");
    assert_eq!((seen.version, &seen.settings), (5, &last.settings));
    assert!(writer.get(&tenant("globex")).await.unwrap().is_none());
}

#[tokio::test]
async fn tenants_records_in_dynamodb_keep_each_tenants_shelves_apart_and_refuse_what_an_item_cannot_hold()
 {
    sluice_testkit::needs!(Aws);
    use sluice_aws::records::{DynamoRecords, MAX_BODY_BYTES};
    use sluice_contract::evals::{Records, Shelf};
    let table = format!("records-{}", uuid::Uuid::new_v4().simple());
    let records = DynamoRecords::connect(&table).await.unwrap();
    records.create_table().await.unwrap();
    sluice_testkit::records_keep_each_tenants_shelves_apart(&records).await;
    // Racing writers of one name each get a version of their own.
    let acme = tenant("acme");
    let writes = (0..8).map(|i| records.put(&acme, Shelf::Gaps, "q", serde_json::json!({"i": i})));
    let mut versions: Vec<u64> = futures::future::join_all(writes)
        .await
        .into_iter()
        .map(|r| r.unwrap().version)
        .collect();
    versions.sort();
    assert_eq!(versions, (1..=8).collect::<Vec<u64>>());
    // An answer kept for rating carries the expiry DynamoDB's TTL removes it at; no other
    // record does.
    assert!(records.shared(), "every environment reads the table");
    let written = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    records
        .put(&acme, Shelf::Answers, "r-1", serde_json::json!({}))
        .await
        .unwrap();
    let items = aws_sdk_dynamodb::Client::new(&sluice_tests::aws::sdk().await)
        .scan()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    for item in items.items() {
        let shelf = item["shelf"].as_s().unwrap();
        let expires = item.get(sluice_aws::records::EXPIRES);
        match shelf.as_str() {
            "acme#answers" => {
                let at: u64 = expires.unwrap().as_n().unwrap().parse().unwrap();
                let kept = sluice_contract::evals::ANSWERS_KEPT_FOR.as_secs();
                assert!((written + kept..written + kept + 60).contains(&at), "{at}");
            }
            _ => assert!(expires.is_none(), "{item:?}"),
        }
    }
    let big = serde_json::json!({"text": "x".repeat(MAX_BODY_BYTES)});
    let refused = records.put(&acme, Shelf::EvalSets, "big", big).await;
    assert!(refused.is_err(), "over what an item holds");
    assert!(
        records
            .get(&acme, Shelf::EvalSets, "big")
            .await
            .unwrap()
            .is_none()
    );
}
