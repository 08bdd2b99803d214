//! Infrastructure as code, validated offline: the fleet's CloudFormation (`infra/`) and the
//! functions' SAM template (`sam/template.yaml`) pass `cfn-lint` (AWS's resource
//! specifications: property names, types, allowed values, references) and `checkov
//! --skip-download` (security policies) with no failed check; a check skipped in a template
//! carries its reason there. The SAM template is first translated to the CloudFormation it
//! deploys as, with AWS's translator (`scripts/sam-translate.py`), so that cfn-lint checks
//! every generated resource; `sam validate --lint` runs too. Nothing is deployed: these say
//! the templates are well-formed, follow the policies and wire streaming as designed, not
//! that the stacks come up.
//!
//! The tools come from the validators' venvs that `scripts/setup.sh tools` makes (pinned there).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    sluice_tests::repo()
}

/// The plain CloudFormation templates in `infra/`.
fn templates() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join("infra"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no template in infra/");
    found
}

fn sam_template() -> PathBuf {
    repo().join("sam/template.yaml")
}

/// `template` (SAM) translated to CloudFormation: the file (kept while the value lives) and
/// its parsed JSON.
fn translate(template: &Path) -> (tempfile::NamedTempFile, Value) {
    let out = tempfile::NamedTempFile::with_suffix(".json").unwrap();
    let run = Command::new(sluice_tests::venv_tool("sam", "python"))
        .arg(repo().join("scripts/sam-translate.py"))
        .arg(template)
        .arg(out.path())
        .output()
        .expect("the SAM translator runs");
    assert!(
        run.status.success(),
        "translating {}: {}",
        template.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    let json = serde_json::from_slice(&std::fs::read(out.path()).unwrap()).unwrap();
    (out, json)
}

/// cfn-lint's findings for `template` (empty when clean).
fn cfn_lint(template: &Path) -> String {
    let out = Command::new(sluice_tests::venv_tool("iac", "cfn-lint"))
        .arg(template)
        .output()
        .expect("cfn-lint runs");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn every_template_passes_cfn_lint() {
    sluice_testkit::needs!(Tools);
    let (translated, _) = translate(&sam_template());
    let mut all = templates();
    all.push(translated.path().to_path_buf());
    for template in all {
        let findings = cfn_lint(&template);
        assert!(
            findings.trim().is_empty(),
            "{}:\n{findings}",
            template.display()
        );
    }
}

#[test]
fn cfn_lint_checks_the_translated_streaming_integration() {
    sluice_testkit::needs!(Tools);
    // The control for the SAM side: a wrong transfer mode in the translated template is found.
    let text = std::fs::read_to_string(sam_template()).unwrap();
    assert!(text.contains("ResponseTransferMode: STREAM\n"));
    let broken = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(
        broken.path(),
        text.replacen(
            "ResponseTransferMode: STREAM\n",
            "ResponseTransferMode: STREAMING\n",
            1,
        ),
    )
    .unwrap();
    let (translated, _) = translate(broken.path());
    let findings = cfn_lint(translated.path());
    assert!(findings.contains("'STREAMING' is not one of"), "{findings}");
}

/// `sam validate --lint` on `template`: passes, or panics with what it said.
fn sam_validate(template: &Path) {
    let out = Command::new(sluice_tests::venv_tool("sam", "sam"))
        .args(["validate", "--lint", "-t"])
        .arg(template)
        // Offline: a region for the translator, no metadata-service lookups, no telemetry.
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("SAM_CLI_TELEMETRY", "0")
        .output()
        .expect("sam runs");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {said}", template.display());
    assert!(said.contains("is a valid SAM Template"), "{said}");
}

#[test]
fn sam_validate_lint_passes() {
    sluice_testkit::needs!(Tools);
    sam_validate(&sam_template());
}

/// The resources of `template` of type `kind`, by logical id.
fn of_type<'a>(template: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
    template["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .collect()
}

#[test]
fn answers_stream_through_api_gateway_and_outside_a_vpc_through_a_function_url() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let functions = of_type(&t, "AWS::Lambda::Function");
    let names: Vec<&str> = functions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "AnswerFunction",
            "AnswerManagedFunction",
            "IngestFunction",
            "RegistryFunction"
        ]
    );
    for (name, f) in &functions {
        let p = &f["Properties"];
        assert_eq!(p["Runtime"], "provided.al2023", "{name}");
        // One architecture for all three and the model layer: the registry compiles
        // components for its own, which must be the answer function's.
        assert_eq!(
            p["Architectures"],
            serde_json::json!([{"Ref": "Architecture"}]),
            "{name}"
        );
        // In the VPC only when Network=vpc; the managed form runs in its capacity
        // provider's (below).
        if *name != "AnswerManagedFunction" {
            assert_eq!(p["VpcConfig"]["Fn::If"][0], "InVpc", "{name}");
        }
    }
    let architecture = &t["Parameters"]["Architecture"];
    // x86_64 by default: what cargo-lambda's own toolchain builds (README, Deployment).
    assert_eq!(architecture["Default"], "x86_64");
    assert_eq!(
        architecture["AllowedValues"],
        serde_json::json!(["x86_64", "arm64"])
    );
    for (name, layer) in of_type(&t, "AWS::Lambda::LayerVersion") {
        assert_eq!(
            layer["Properties"]["CompatibleArchitectures"],
            serde_json::json!([{"Ref": "Architecture"}]),
            "{name}"
        );
    }
    let resource = |id: &str| &t["Resources"][id];
    // The answer route: InvokeWithResponseStream, transfer mode STREAM, SigV4 (unless routed
    // between regions, below).
    let answer = &resource("AnswerMethod")["Properties"];
    assert_eq!(answer["AuthorizationType"]["Fn::If"][2], "AWS_IAM");
    let integration = &answer["Integration"];
    assert_eq!(integration["Type"], "AWS_PROXY");
    assert_eq!(integration["ResponseTransferMode"], "STREAM");
    let uri = integration["Uri"]["Fn::Sub"][0].as_str().unwrap();
    assert!(
        uri.contains("/2021-11-15/functions/${Answer}/response-streaming-invocations"),
        "{uri}"
    );
    // `Answer` is the form deployed.
    assert_eq!(
        integration["Uri"]["Fn::Sub"][1]["Answer"],
        serde_json::json!({"Fn::If": ["Managed",
            {"Fn::GetAtt": ["AnswerManagedFunction", "Arn"]},
            {"Fn::GetAtt": ["AnswerFunction", "Arn"]}]})
    );
    // The function URL exists only outside the VPC (URLs do not stream from VPC functions).
    let url = resource("AnswerFunctionUrl");
    assert_eq!(url["Type"], "AWS::Lambda::Url");
    assert_eq!(url["Condition"], "Public");
    assert_eq!(url["Properties"]["InvokeMode"], "RESPONSE_STREAM");
    assert_eq!(url["Properties"]["AuthType"], "AWS_IAM");
    // Uploads to the document bucket reach the ingest function.
    let notifications = &resource("DocumentBucket")["Properties"]["NotificationConfiguration"];
    assert_eq!(
        notifications["LambdaConfigurations"][0]["Event"],
        "s3:ObjectCreated:*"
    );
}

#[test]
fn the_cache_table_is_the_one_the_code_creates() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let table = &t["Resources"]["CacheTable"]["Properties"];
    let keys: Vec<&str> = table["KeySchema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["AttributeName"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["pk", "sk"]);
    let indexes: Vec<(String, String)> = table["GlobalSecondaryIndexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["IndexName"].as_str().unwrap().to_string(),
                i["KeySchema"][0]["AttributeName"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = (0..sluice_contract::cache::BANDS)
        .map(|b| (format!("lsh{b}"), format!("b{b}")))
        .collect();
    assert_eq!(indexes, expected);
    assert_eq!(table["TimeToLiveSpecification"]["AttributeName"], "ttl");
}

#[test]
fn tenants_records_are_kept_in_the_table_the_code_writes_and_the_answer_function_may_reach_it() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let table = &t["Resources"]["RecordsTable"]["Properties"];
    let keys: Vec<&str> = (table["KeySchema"].as_array().unwrap().iter())
        .map(|k| k["AttributeName"].as_str().unwrap())
        .collect();
    assert_eq!(keys, sluice_aws::records::KEYS);
    let ttl = &table["TimeToLiveSpecification"];
    assert_eq!(ttl["AttributeName"], sluice_aws::records::EXPIRES);
    assert_eq!(ttl["Enabled"], true);
    let env = &t["Resources"]["AnswerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["SLUICE_RECORDS_TABLE"]["Ref"], "RecordsTable");
    let policy = t["Resources"]["AnswerPolicy"]["Properties"]["PolicyDocument"].to_string();
    for action in ["GetItem", "Query", "UpdateItem", "DeleteItem"] {
        assert!(
            policy.contains(&format!("dynamodb:{action}")),
            "{action}: {policy}"
        );
    }
    assert!(policy.contains("RecordsTable"), "{policy}");
    // The registry function, which takes activations, reads the tenant's settings (its quality
    // gate) from the settings table every function is given...
    let registry = serde_json::to_string(&statements(&t, "RegistryFunctionRole")).unwrap();
    let reads = |table: &str| {
        statements(&t, "RegistryFunctionRole")
            .into_iter()
            .any(|s| s["Action"] == "dynamodb:GetItem" && s["Resource"].to_string().contains(table))
    };
    // ... and a gate's run, from the records table.
    assert!(reads("settings") && reads("RecordsTable"), "{registry}");
    let globals = &t["Resources"]["RegistryFunction"]["Properties"]["Environment"]["Variables"];
    assert!(globals.get("SLUICE_SETTINGS_TABLE").is_some(), "{globals}");
}

#[test]
fn usage_is_counted_in_the_table_the_code_reads_and_documents_routes_reach_the_ingest_function() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let resource = |id: &str| &t["Resources"][id];
    let table = &resource("UsageTable")["Properties"];
    let keys: Vec<(&str, &str)> = table["KeySchema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["AttributeName"].as_str().unwrap(),
                k["KeyType"].as_str().unwrap(),
            )
        })
        .collect();
    // What sluice-aws's DynamoUsage writes and queries (and creates in the tests).
    assert_eq!(keys, [("tenant", "HASH"), ("day_key", "RANGE")]);
    let env = |f: &str| t["Resources"][f]["Properties"]["Environment"]["Variables"].clone();
    for function in ["AnswerFunction", "IngestFunction"] {
        assert_eq!(env(function)["SLUICE_USAGE"], "dynamodb", "{function}");
        // The stack's own table, or the global one named after the stack.
        let table = &env(function)["SLUICE_USAGE_TABLE"]["Fn::If"];
        assert_eq!(table[0], "Global");
        assert_eq!(table[1]["Fn::Sub"], "${AWS::StackName}-usage");
        assert_eq!(table[2]["Ref"], "UsageTable");
        assert_eq!(
            env(function)["SLUICE_TENANT_TOKEN_BUDGETS"]["Ref"],
            "TenantTokenBudgets"
        );
        assert_eq!(
            env(function)["SLUICE_FUSION_TENANTS"]["Ref"],
            "FusionTenants"
        );
        // Its role may add to the counters and read a tenant's month (the answer function's
        // through the policy both its forms share).
        let role = format!("{function}Role");
        let statements = match function {
            "AnswerFunction" => {
                resource("AnswerPolicy")["Properties"]["PolicyDocument"].to_string()
            }
            _ => resource(&role)["Properties"]["Policies"].to_string(),
        };
        assert!(
            statements.contains("dynamodb:UpdateItem") && statements.contains("UsageTable"),
            "{role}: {statements}"
        );
    }
    assert_eq!(env("RegistryFunction")["SLUICE_USAGE"], "off");
    // Every method of /v1/documents, /v1/documents/{id}, /v1/sources and what is under it goes
    // to the ingest function.
    for method in [
        "DocumentsMethod",
        "DocumentMethod",
        "SourcesMethod",
        "SourceMethod",
    ] {
        let p = &resource(method)["Properties"];
        assert_eq!(p["HttpMethod"], "ANY", "{method}");
        let uri = p["Integration"]["Uri"]["Fn::Sub"].as_str().unwrap();
        assert!(uri.contains("${IngestFunction.Arn}"), "{method}: {uri}");
    }
    assert_eq!(
        resource("DocumentMethod")["Properties"]["ResourceId"]["Ref"],
        "DocumentsProxy"
    );
    assert_eq!(
        resource("SourceMethod")["Properties"]["ResourceId"]["Ref"],
        "SourcesProxy"
    );
}

/// Tenants' sources are synced by the ingest function: a schedule invokes it every minute
/// (the handler reads EventBridge's scheduled event), its role reaches the records table the
/// sources and reports are kept in (the scan that finds the tenants with sources among it)
/// and lists the document bucket, and a sync ends before the function's timeout.
#[test]
fn sources_are_synced_on_a_schedule_by_the_ingest_function() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let rules: Vec<_> = of_type(&t, "AWS::Events::Rule");
    let sync = (rules.iter())
        .find(|(_, r)| r["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0] == "IngestFunction")
        .unwrap_or_else(|| panic!("no rule targets the ingest function: {rules:?}"));
    assert_eq!(sync.1["Properties"]["ScheduleExpression"], "rate(1 minute)");
    let ingest = serde_json::to_string(&statements(&t, "IngestFunctionRole")).unwrap();
    for action in [
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "s3:ListBucket",
    ] {
        assert!(ingest.contains(action), "{action}: {ingest}");
    }
    assert!(ingest.contains("RecordsTable"), "{ingest}");
    let function = &t["Resources"]["IngestFunction"]["Properties"];
    let sync_ms: u64 = function["Environment"]["Variables"]["SLUICE_SYNC_TIMEOUT_MS"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let timeout_ms = function["Timeout"].as_u64().unwrap() * 1_000;
    assert!(
        sync_ms + 10_000 <= timeout_ms,
        "{sync_ms} ms of {timeout_ms}"
    );
    assert_eq!(
        function["Environment"]["Variables"]["SLUICE_RECORDS_TABLE"],
        serde_json::json!({"Ref": "RecordsTable"}),
        "the records table is named to it"
    );
    // A sync's batches: a FIFO queue the function sends to and reads, one message at a time,
    // hidden longer than the function may take to read one, with a FIFO dead-letter queue.
    assert_eq!(
        function["Environment"]["Variables"]["SLUICE_SYNC_QUEUE_URL"],
        serde_json::json!({"Ref": "SyncQueue"})
    );
    let queue = &t["Resources"]["SyncQueue"]["Properties"];
    assert_eq!(queue["FifoQueue"], true, "{queue}");
    assert!(
        queue["VisibilityTimeout"].as_u64().unwrap() >= 6 * function["Timeout"].as_u64().unwrap()
    );
    let dead = &queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0];
    assert_eq!(
        t["Resources"][dead.as_str().unwrap()]["Properties"]["FifoQueue"],
        true
    );
    let mappings = of_type(&t, "AWS::Lambda::EventSourceMapping");
    let batches = (mappings.iter())
        .find(|(_, m)| m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] == "SyncQueue")
        .unwrap_or_else(|| panic!("nothing reads the sync queue: {mappings:?}"));
    let mapping = &batches.1["Properties"];
    assert_eq!(
        mapping["FunctionName"]["Ref"], "IngestFunction",
        "{mapping}"
    );
    assert_eq!(mapping["BatchSize"], 1);
    assert_eq!(
        mapping["FunctionResponseTypes"],
        serde_json::json!(["ReportBatchItemFailures"])
    );
    assert!(
        ingest.contains("sqs:SendMessage") && ingest.contains("SyncQueue"),
        "{ingest}"
    );
}

#[test]
fn cfn_lint_does_find_a_misspelt_property() {
    sluice_testkit::needs!(Tools);
    // The control: the same linter on a copy with one property name wrong must complain.
    let template = &templates()[0];
    let text = std::fs::read_to_string(template).unwrap();
    assert!(text.contains("HealthCheckPath:"));
    let broken = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(
        broken.path(),
        text.replacen("HealthCheckPath:", "HealthCheckPth:", 1),
    )
    .unwrap();
    let findings = cfn_lint(broken.path());
    assert!(findings.contains("HealthCheckPth"), "{findings}");
}

#[test]
fn every_template_passes_checkov_with_no_failed_check() {
    sluice_testkit::needs!(Tools);
    let mut all = templates();
    all.push(sam_template());
    for template in all {
        let skipped = checkov(&template);
        let expected: &[&str] = if template == sam_template() {
            // Dead-letter queues (answer and registry functions), API caching, the access-log
            // bucket's own logging. The managed answer function's skips are not among them:
            // checkov resolves the template's conditions with the parameters' defaults
            // (`AnswerCapacity=classic`), so it never sees that function.
            &["CKV_AWS_116", "CKV_AWS_120", "CKV_AWS_18"]
        } else {
            // NLB access logs (TLS listeners only).
            &["CKV_AWS_91"]
        };
        assert_eq!(skipped, expected, "{}", template.display());
    }
}

/// checkov on `template`: no failed check, no parsing error, a real number of checks passed;
/// the ids of the checks it skipped (each skip carries its reason in the template).
fn checkov(template: &Path) -> Vec<String> {
    let out = Command::new(sluice_tests::venv_tool("iac", "checkov"))
        .args(["--skip-download", "-o", "json", "-f"])
        .arg(template)
        .output()
        .expect("checkov runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "checkov output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let summary = &report["summary"];
    let failed = report["results"]["failed_checks"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|c| format!("{} {}", c["check_id"], c["resource"]))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert_eq!(summary["failed"], 0, "{}: {failed:#?}", template.display());
    assert!(
        summary["passed"].as_u64().unwrap_or(0) >= 20,
        "checkov checked too little: {summary}"
    );
    assert_eq!(summary["parsing_errors"], 0);
    let skipped: std::collections::BTreeSet<String> = report["results"]["skipped_checks"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|c| c["check_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    skipped.into_iter().collect()
}

/// The statements of `role` (a role's inline policies, or a managed policy) in the translated
/// template `t`.
fn statements(t: &Value, role: &str) -> Vec<Value> {
    let properties = &t["Resources"][role]["Properties"];
    match properties["PolicyDocument"]["Statement"].as_array() {
        // A managed policy (the answer function's, shared by its two forms).
        Some(statements) => statements.clone(),
        None => properties["Policies"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
            .collect(),
    }
}

#[test]
fn cache_items_are_reached_only_through_the_tenant_role_and_its_leading_keys() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let statements = |role: &str| statements(&t, role);
    let actions = |s: &Value| -> Vec<String> {
        match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().map(|a| a.as_str().unwrap().to_string()).collect(),
            _ => vec![],
        }
    };
    // The tenant role: item calls on the cache table and its indexes, only for keys that are
    // the session's tenant tag or start with it.
    let tenant = statements("CacheTenantRole");
    let items = tenant
        .iter()
        .find(|s| actions(s).contains(&"dynamodb:GetItem".to_string()))
        .expect("the item statement");
    assert_eq!(
        items["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"],
        serde_json::json!([
            "${aws:PrincipalTag/sluice-tenant}",
            "${aws:PrincipalTag/sluice-tenant}#*"
        ])
    );
    assert_eq!(sluice_cache_dynamodb::TENANT_TAG, "sluice-tenant");
    // The functions' own roles: no item call on the cache table at all.
    for role in ["AnswerPolicy", "IngestFunctionRole", "RegistryFunctionRole"] {
        for s in statements(role) {
            let on_cache = s["Resource"].to_string().contains("CacheTable");
            for a in actions(&s) {
                assert!(
                    !(on_cache && a != "dynamodb:DescribeTable"),
                    "{role} may call {a} on the cache table directly"
                );
            }
        }
    }
    // Both forms of the answer function have the shared policy.
    for role in ["AnswerFunctionRole", "AnswerManagedFunctionRole"] {
        let policies = &t["Resources"][role]["Properties"]["ManagedPolicyArns"];
        assert!(
            policies
                .as_array()
                .unwrap()
                .contains(&serde_json::json!({"Ref": "AnswerPolicy"})),
            "{role}: {policies}"
        );
    }
    let answer = statements("AnswerPolicy");
    assert!(
        answer
            .iter()
            .any(|s| actions(s).contains(&"sts:TagSession".to_string())
                && s["Resource"]["Fn::GetAtt"][0] == "CacheTenantRole")
    );
    // The answer function is told the role; ingest and registry run without a cache.
    let env = |f: &str| t["Resources"][f]["Properties"]["Environment"]["Variables"].clone();
    assert_eq!(
        env("AnswerFunction")["SLUICE_CACHE_TENANT_ROLE_ARN"]["Fn::GetAtt"][0],
        "CacheTenantRole"
    );
    assert_eq!(env("IngestFunction")["SLUICE_CACHE"], "off");
    assert_eq!(env("RegistryFunction")["SLUICE_CACHE"], "off");
}

#[test]
fn the_managed_mode_runs_the_answer_function_on_a_capacity_provider_in_the_fleets_vpc() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let resource = |id: &str| &t["Resources"][id];
    // One form or the other, by AnswerCapacity (classic by default).
    let capacity = &t["Parameters"]["AnswerCapacity"];
    assert_eq!(capacity["Default"], "classic");
    assert_eq!(
        capacity["AllowedValues"],
        serde_json::json!(["classic", "managed"])
    );
    assert_eq!(resource("AnswerFunction")["Condition"], "Classic");
    for id in [
        "AnswerManagedFunction",
        "AnswerCapacityProvider",
        "AnswerCapacityProviderOperatorRole",
    ] {
        assert_eq!(resource(id)["Condition"], "Managed", "{id}");
    }
    // The capacity provider: the fleet's subnets and security group, the functions'
    // architecture, a scaling ceiling, the data key.
    let provider = &resource("AnswerCapacityProvider");
    assert_eq!(provider["Type"], "AWS::Lambda::CapacityProvider");
    let p = &provider["Properties"];
    assert_eq!(p["VpcConfig"]["SubnetIds"]["Ref"], "PrivateSubnetIds");
    assert_eq!(
        p["VpcConfig"]["SecurityGroupIds"],
        serde_json::json!([{"Ref": "FunctionSecurityGroupId"}])
    );
    assert_eq!(
        p["InstanceRequirements"]["Architectures"],
        serde_json::json!([{"Ref": "Architecture"}])
    );
    assert_eq!(
        p["CapacityProviderScalingConfig"]["MaxVCpuCount"]["Ref"],
        "ManagedMaxVCpus"
    );
    assert_eq!(p["KmsKeyArn"]["Fn::GetAtt"][0], "DataKey");
    // The function on it: many answers per environment (what the runtime reads as
    // AWS_LAMBDA_MAX_CONCURRENCY), no VPC or reserved concurrency of its own, published.
    let f = &resource("AnswerManagedFunction")["Properties"];
    let config = &f["CapacityProviderConfig"]["LambdaManagedInstancesCapacityProviderConfig"];
    let arn = config["CapacityProviderArn"]["Fn::Sub"].as_str().unwrap();
    assert!(
        arn.ends_with(":capacity-provider:${AWS::StackName}-answers"),
        "{arn}"
    );
    assert_eq!(
        p["CapacityProviderName"]["Fn::Sub"],
        "${AWS::StackName}-answers"
    );
    assert_eq!(
        config["PerExecutionEnvironmentMaxConcurrency"]["Ref"],
        "AnswerEnvironmentConcurrency"
    );
    let concurrency = &t["Parameters"]["AnswerEnvironmentConcurrency"];
    assert_eq!(
        (&concurrency["MinValue"], &concurrency["MaxValue"]),
        (&serde_json::json!(1), &serde_json::json!(1600))
    );
    assert!(f.get("VpcConfig").is_none() && f.get("ReservedConcurrentExecutions").is_none());
    assert_eq!(f["PublishToLatestPublished"], true);
    // Both forms run the same binary with the same settings.
    let answer = &resource("AnswerFunction")["Properties"];
    assert_eq!(f["Environment"], answer["Environment"]);
    assert_eq!(f["MemorySize"], answer["MemorySize"]);
    assert_eq!(f["Timeout"], answer["Timeout"]);
    // What names the answer function names the form deployed.
    for id in ["AnswerInvokePermission", "AnswerErrorsAlarm", "AnswerLogs"] {
        let text = resource(id).to_string();
        assert!(
            text.contains("AnswerManagedFunction") && text.contains("\"Managed\""),
            "{id}: {text}"
        );
    }
}

/// `sam/template.yaml` with other defaults for some parameters (`(name, value)`): the stack as
/// deployed with those values, for the tools that read defaults (checkov resolves the
/// template's conditions with them). Each parameter must declare a `Default:` right after its
/// `Type:`.
fn with_defaults(values: &[(&str, &str)]) -> tempfile::NamedTempFile {
    let mut text = std::fs::read_to_string(sam_template()).unwrap();
    for (name, value) in values {
        let head = format!("\n  {name}:\n    Type: ");
        let at = text
            .find(&head)
            .unwrap_or_else(|| panic!("no parameter {name}"))
            + head.len();
        let line = at + text[at..].find('\n').unwrap() + 1;
        let rest = &text[line..];
        assert!(
            rest.starts_with("    Default: "),
            "{name} has no Default line"
        );
        let end = line + rest.find('\n').unwrap();
        text.replace_range(line..end, &format!("    Default: '{value}'"));
    }
    let file = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// The edge option as a user turns it on: public network, CloudFront, a custom domain, WAF.
const EDGE: &[(&str, &str)] = &[
    ("Network", "public"),
    ("Edge", "cloudfront"),
    ("Waf", "on"),
    ("DomainName", "answers.example.com"),
    (
        "CertificateArn",
        "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
    ),
];

#[test]
fn the_cloudfront_option_with_waf_validates_clean() {
    sluice_testkit::needs!(Tools);
    let edge = with_defaults(EDGE);
    let (translated, _) = translate(edge.path());
    let findings = cfn_lint(translated.path());
    assert!(findings.trim().is_empty(), "{findings}");
    sam_validate(edge.path());
    // The template's own skips, plus the distribution's two (access logs: the function logs
    // every answer; TLS policy: checkov cannot read it through the domain condition).
    assert_eq!(
        checkov(edge.path()),
        [
            "CKV_AWS_116",
            "CKV_AWS_120",
            "CKV_AWS_174",
            "CKV_AWS_18",
            "CKV_AWS_86"
        ]
    );
}

#[test]
fn cloudfront_signs_every_request_and_only_its_distribution_may_invoke_the_url() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let resource = |id: &str| &t["Resources"][id];
    let edge = &t["Parameters"]["Edge"];
    assert_eq!(edge["Default"], "none", "off unless asked for");
    for id in [
        "AnswerOriginAccessControl",
        "AnswerDistribution",
        "AnswerUrlFromCloudFront",
        "AnswerInvokeFromCloudFront",
    ] {
        assert_eq!(resource(id)["Condition"], "Cdn", "{id}");
    }
    for id in ["AnswerWebAcl", "WafLogs", "WafLogging"] {
        assert_eq!(resource(id)["Condition"], "HasWaf", "{id}");
    }
    // Cdn needs the function URL's network; the rules refuse Edge=cloudfront without it.
    assert!(
        t["Conditions"]["Cdn"].to_string().contains("\"Public\""),
        "{}",
        t["Conditions"]["Cdn"]
    );
    assert!(
        t["Rules"]["CloudFrontNeedsAFunctionUrl"]
            .to_string()
            .contains("\"public\"")
    );

    // The URL keeps IAM auth and streams; the OAC signs every request with SigV4.
    let url = &resource("AnswerFunctionUrl")["Properties"];
    assert_eq!(url["AuthType"], "AWS_IAM");
    assert_eq!(url["InvokeMode"], "RESPONSE_STREAM");
    let oac = &resource("AnswerOriginAccessControl")["Properties"]["OriginAccessControlConfig"];
    assert_eq!(oac["OriginAccessControlOriginType"], "lambda");
    assert_eq!(oac["SigningBehavior"], "always");
    assert_eq!(oac["SigningProtocol"], "sigv4");

    // The distribution's one origin is that URL's host, reached through the OAC.
    let config = &resource("AnswerDistribution")["Properties"]["DistributionConfig"];
    let origins = config["Origins"].as_array().unwrap();
    assert_eq!(origins.len(), 1);
    let origin = &origins[0];
    let host = origin["DomainName"].to_string();
    assert!(
        host.contains("AnswerFunctionUrl") && host.contains("FunctionUrl"),
        "{host}"
    );
    assert_eq!(
        origin["OriginAccessControlId"]["Fn::GetAtt"],
        serde_json::json!(["AnswerOriginAccessControl", "Id"])
    );
    assert_eq!(
        origin["CustomOriginConfig"]["OriginProtocolPolicy"],
        "https-only"
    );

    // Nothing cached, nothing compressed, every method and the viewer's headers passed on.
    let behaviour = &config["DefaultCacheBehavior"];
    assert_eq!(behaviour["TargetOriginId"], origin["Id"]);
    // AWS's managed CachingDisabled and AllViewerExceptHostHeader policies.
    assert_eq!(
        behaviour["CachePolicyId"],
        "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
    );
    assert_eq!(
        behaviour["OriginRequestPolicyId"],
        "b689b0a8-53d0-40ab-baf2-68738e2966ac"
    );
    assert_eq!(behaviour["Compress"], false);
    assert!(
        behaviour["AllowedMethods"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("POST"))
    );
    assert!(behaviour.get("CacheBehaviors").is_none() && config.get("CacheBehaviors").is_none());

    // Only this distribution may invoke the URL: both permissions, conditioned on its ARN.
    let distribution_arn = |p: &Value| p["SourceArn"]["Fn::Sub"].as_str().unwrap_or("").to_string();
    let url_permission = &resource("AnswerUrlFromCloudFront")["Properties"];
    assert_eq!(url_permission["Action"], "lambda:InvokeFunctionUrl");
    assert_eq!(url_permission["FunctionUrlAuthType"], "AWS_IAM");
    let invoke_permission = &resource("AnswerInvokeFromCloudFront")["Properties"];
    assert_eq!(invoke_permission["Action"], "lambda:InvokeFunction");
    assert_eq!(invoke_permission["InvokedViaFunctionUrl"], true);
    for p in [url_permission, invoke_permission] {
        assert_eq!(p["Principal"], "cloudfront.amazonaws.com");
        let arn = distribution_arn(p);
        assert!(
            arn.ends_with(":distribution/${AnswerDistribution}") && arn.contains(":cloudfront::"),
            "{arn}"
        );
        // The function the URL targets, in either capacity mode.
        let target = p["FunctionName"].to_string();
        assert!(
            target.contains("\"Managed\"")
                && target.contains("{\"Ref\":\"AnswerManagedFunction\"}")
                && target.contains("{\"Ref\":\"AnswerFunction\"}"),
            "{target}"
        );
    }

    // WAF: attached when on, scoped to CloudFront, logged to a group WAF accepts.
    assert!(
        config["WebACLId"]
            .to_string()
            .contains("{\"Fn::GetAtt\":[\"AnswerWebAcl\",\"Arn\"]}")
    );
    let acl = &resource("AnswerWebAcl")["Properties"];
    assert_eq!(acl["Scope"], "CLOUDFRONT");
    let rules = acl["Rules"].as_array().unwrap();
    let rule = |name: &str| {
        rules
            .iter()
            .find(|r| r["Name"] == name)
            .unwrap_or_else(|| panic!("no WAF rule {name}"))
    };
    let rate = &rule("rate-per-ip")["Statement"]["RateBasedStatement"];
    assert_eq!(rate["AggregateKeyType"], "IP");
    assert_eq!(rate["Limit"]["Ref"], "WafRateLimit");
    for group in [
        "AWSManagedRulesCommonRuleSet",
        "AWSManagedRulesKnownBadInputsRuleSet",
    ] {
        assert!(
            rules
                .iter()
                .any(|r| r["Statement"]["ManagedRuleGroupStatement"]["Name"] == group),
            "{group}"
        );
    }
    let logging = &resource("WafLogging")["Properties"];
    assert_eq!(logging["ResourceArn"]["Fn::GetAtt"][0], "AnswerWebAcl");
    assert_eq!(
        logging["LogDestinationConfigs"][0]["Fn::GetAtt"][0],
        "WafLogs"
    );
    let group = resource("WafLogs")["Properties"]["LogGroupName"]["Fn::Sub"]
        .as_str()
        .unwrap();
    assert!(group.starts_with("aws-waf-logs-"), "{group}");
}

#[test]
fn waf_blocks_exactly_the_bodies_over_sluices_cap() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let rules = t["Resources"]["AnswerWebAcl"]["Properties"]["Rules"].clone();
    let rule = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Name"] == "body-over-cap")
        .expect("the body-size rule")
        .clone();
    let statement = &rule["Statement"]["RegexMatchStatement"];
    assert_eq!(
        statement["FieldToMatch"]["SingleHeader"]["Name"],
        "content-length"
    );
    assert!(rule["Action"].get("Block").is_some());
    let pattern = regex::Regex::new(statement["RegexString"].as_str().unwrap()).unwrap();
    // The answer function's cap: the default, as the template does not set it.
    let wire = sluice_http::WireConfig::from_lookup(&|_: &str| None, "data".as_ref()).unwrap();
    let cap = wire.limits.max_body_bytes;
    assert!(
        !t["Resources"]["AnswerFunction"]["Properties"]["Environment"]
            .to_string()
            .contains("SLUICE_MAX_BODY_BYTES"),
        "the template sets its own body cap: the rule must follow it"
    );
    let mut lengths: Vec<usize> = (0..=8).map(|digits| 10usize.pow(digits)).collect();
    lengths.extend((cap - 1100..cap + 1100).step_by(7));
    lengths.extend([
        cap - 1,
        cap,
        cap + 1,
        cap * 2,
        cap * 10,
        9_999_999,
        99_999_999,
    ]);
    for n in lengths {
        assert_eq!(
            pattern.is_match(&n.to_string()),
            n > cap,
            "Content-Length {n} (cap {cap})"
        );
        // Leading zeros change nothing.
        assert_eq!(pattern.is_match(&format!("00{n}")), n > cap, "00{n}");
    }
}

#[test]
fn a_stream_is_never_quiet_for_cloudfronts_origin_read_timeout() {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let timeout = &t["Parameters"]["OriginReadTimeout"];
    let least_s = timeout["MinValue"].as_u64().expect("a lower bound");
    let origin = &t["Resources"]["AnswerDistribution"]["Properties"]["DistributionConfig"]["Origins"]
        [0]["CustomOriginConfig"];
    assert_eq!(origin["OriginReadTimeout"]["Ref"], "OriginReadTimeout");
    // The keep-alive interval the answer function runs with (either capacity mode).
    for f in ["AnswerFunction", "AnswerManagedFunction"] {
        let env = &t["Resources"][f]["Properties"]["Environment"]["Variables"];
        let keepalive_ms: u64 = env["SLUICE_SSE_KEEPALIVE_MS"]
            .as_str()
            .unwrap_or_else(|| panic!("{f} sets SLUICE_SSE_KEEPALIVE_MS"))
            .parse()
            .unwrap();
        assert!(
            keepalive_ms > 0 && keepalive_ms < least_s * 1000,
            "{f}: keep-alive {keepalive_ms} ms against an origin read timeout of {least_s} s"
        );
    }
}

/// The home region's stack of a deployment over three regions behind one name.
const GLOBAL: &[(&str, &str)] = &[
    ("HomeRegion", "us-east-1"),
    ("SecondRegion", "eu-west-1"),
    ("ThirdRegion", "ap-southeast-2"),
    ("GlobalDomainName", "api.example.com"),
    ("HostedZoneId", "Z0123456789ABCDEFGHIJ"),
    (
        "RegionalCertificateArn",
        "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
    ),
];

#[test]
fn the_global_option_validates_clean() {
    sluice_testkit::needs!(Tools);
    let global = with_defaults(GLOBAL);
    let (translated, _) = translate(global.path());
    let findings = cfn_lint(translated.path());
    assert!(findings.trim().is_empty(), "{findings}");
    sam_validate(global.path());
    // No skip beyond the template's own.
    assert_eq!(
        checkov(global.path()),
        ["CKV_AWS_116", "CKV_AWS_120", "CKV_AWS_18"]
    );
}

#[test]
fn over_several_regions_keys_components_settings_and_usage_are_global_and_cache_and_corpus_regional()
 {
    sluice_testkit::needs!(Tools);
    let (_file, t) = translate(&sam_template());
    let resource = |id: &str| &t["Resources"][id];
    assert_eq!(
        t["Parameters"]["HomeRegion"]["Default"], "",
        "one region unless asked"
    );
    for rule in [
        "GlobalNeedsAnotherRegion",
        "ThisRegionIsListed",
        "RegionsNeedAHome",
    ] {
        assert!(t["Rules"].get(rule).is_some(), "{rule}");
    }
    // Each global table: made by the home stack only, the same keys as the one-region table
    // the code was written against, streams on (replication needs them), and a replica in
    // every region encrypted with that region's data key, found by its alias.
    let alias = &resource("DataKeyAlias")["Properties"]["AliasName"]["Fn::Sub"];
    assert_eq!(alias, "alias/${AWS::StackName}-data");
    for (global, regional, name, env) in [
        (
            "ComponentGlobalTable",
            "ComponentTable",
            "components",
            "SLUICE_COMPONENT_TABLE",
        ),
        (
            "ApiKeyGlobalTable",
            "ApiKeyTable",
            "api-keys",
            "SLUICE_API_KEYS_TABLE",
        ),
        (
            "UsageGlobalTable",
            "UsageTable",
            "usage",
            "SLUICE_USAGE_TABLE",
        ),
        (
            "SettingsGlobalTable",
            "SettingsTable",
            "settings",
            "SLUICE_SETTINGS_TABLE",
        ),
    ] {
        assert_eq!(resource(global)["Condition"], "IsHome", "{global}");
        assert_eq!(resource(regional)["Condition"], "OneRegion", "{regional}");
        let (g, r) = (
            &resource(global)["Properties"],
            &resource(regional)["Properties"],
        );
        assert_eq!(g["KeySchema"], r["KeySchema"], "{global}");
        assert_eq!(
            g["AttributeDefinitions"], r["AttributeDefinitions"],
            "{global}"
        );
        assert_eq!(g["BillingMode"], "PAY_PER_REQUEST");
        assert_eq!(
            g["StreamSpecification"]["StreamViewType"],
            "NEW_AND_OLD_IMAGES"
        );
        let table_name = format!("${{AWS::StackName}}-{name}");
        assert_eq!(g["TableName"]["Fn::Sub"], table_name.as_str());
        let replicas = g["Replicas"].to_string();
        for region in ["HomeRegion", "SecondRegion", "ThirdRegion"] {
            assert!(
                replicas.contains(&format!("{{\"Ref\":\"{region}\"}}")),
                "{replicas}"
            );
        }
        assert!(replicas.contains("\"HasThirdRegion\""), "{replicas}");
        assert_eq!(
            replicas
                .matches(&format!("{{\"KMSMasterKeyId\":{{\"Fn::Sub\":{alias}}}}}"))
                .count(),
            3,
            "{replicas}"
        );
        // Every function finds it by the same name, in every region's stack.
        for function in ["AnswerFunction", "IngestFunction", "RegistryFunction"] {
            let value = &resource(function)["Properties"]["Environment"]["Variables"][env];
            assert_eq!(value["Fn::If"][0], "Global", "{function} {env}");
            assert_eq!(value["Fn::If"][1]["Fn::Sub"], table_name.as_str());
        }
    }
    // The home stack is the one in HomeRegion.
    let home = t["Conditions"]["IsHome"].to_string();
    assert!(
        home.contains("HomeRegion") && home.contains("AWS::Region"),
        "{home}"
    );
    // The cache stays in each region.
    assert!(resource("CacheTable").get("Condition").is_none());

    // Components: every region's bucket has a name the other regions can derive; the
    // registry lists all of them (its own is skipped) and may write them, with their keys.
    let bucket = resource("ComponentBucket")["Properties"]["BucketName"]["Fn::If"].clone();
    assert_eq!(bucket[0], "Global");
    let pattern = bucket[1]["Fn::Sub"].as_str().unwrap();
    let prefix = pattern.strip_suffix("${AWS::Region}").expect(pattern);
    let registry = &resource("RegistryFunction")["Properties"];
    let replicas = registry["Environment"]["Variables"]["SLUICE_COMPONENT_REPLICAS"].to_string();
    for region in ["HomeRegion", "SecondRegion", "ThirdRegion"] {
        let entry = format!("${{{region}}}={prefix}${{{region}}}");
        assert!(replicas.contains(&entry), "{entry} in {replicas}");
    }
    let registry_statements = statements(&t, "RegistryFunctionRole");
    let granted = serde_json::to_string(&registry_statements).unwrap();
    assert!(
        granted.contains(&format!("arn:${{AWS::Partition}}:s3:::{prefix}*/*")),
        "{granted}"
    );
    assert!(
        granted.contains(&format!("\"kms:ResourceAliases\":{{\"Fn::Sub\":{alias}}}")),
        "{granted}"
    );
    // The config the registry reads accepts what the template writes.
    let example = replicas
        .split('"')
        .find(|s| s.contains("ThirdRegion}="))
        .unwrap()
        .replace("${HomeRegion}", "us-east-1")
        .replace("${SecondRegion}", "eu-west-1")
        .replace("${ThirdRegion}", "ap-southeast-2")
        .replace("${AWS::StackName}", "sluice")
        .replace("${AWS::AccountId}", "123456789012");
    let config = sluice_aws::AwsConfig::from_lookup(&|name: &str| match name {
        "SLUICE_COMPONENT_BUCKET" => Some("sluice-components-123456789012-eu-west-1".into()),
        "SLUICE_COMPONENT_REPLICAS" => Some(example.clone()),
        _ => None,
    })
    .unwrap();
    assert_eq!(config.components.replicas.len(), 3, "{example}");

    // The corpus is regional: each region's document bucket (named per region) feeds its
    // own ingest function and store.
    let documents = resource("DocumentBucket")["Properties"]["BucketName"].to_string();
    assert!(documents.contains("-${AWS::Region}"), "{documents}");

    // Routing: this region's API under the shared name, a latency record for this region
    // answered while its answer-errors alarm is quiet, and Sluice keys in place of SigV4.
    for id in ["ApiDomain", "ApiBasePath", "RegionHealth", "RegionRecord"] {
        assert_eq!(resource(id)["Condition"], "Routed", "{id}");
    }
    let domain = &resource("ApiDomain")["Properties"];
    assert_eq!(domain["EndpointConfiguration"]["Types"][0], "REGIONAL");
    assert_eq!(domain["SecurityPolicy"], "TLS_1_2");
    let record = &resource("RegionRecord")["Properties"];
    assert_eq!(record["Region"]["Ref"], "AWS::Region");
    assert_eq!(record["SetIdentifier"]["Ref"], "AWS::Region");
    assert_eq!(record["HealthCheckId"]["Ref"], "RegionHealth");
    assert_eq!(
        record["AliasTarget"]["DNSName"]["Fn::GetAtt"],
        serde_json::json!(["ApiDomain", "RegionalDomainName"])
    );
    let health = &resource("RegionHealth")["Properties"]["HealthCheckConfig"];
    assert_eq!(health["Type"], "CLOUDWATCH_METRIC");
    assert_eq!(
        health["AlarmIdentifier"]["Name"]["Ref"],
        "AnswerErrorsAlarm"
    );
    for method in [
        "AnswerMethod",
        "DocumentsMethod",
        "DocumentMethod",
        "ComponentsMethod",
    ] {
        assert_eq!(
            resource(method)["Properties"]["AuthorizationType"]["Fn::If"],
            serde_json::json!(["Routed", "NONE", "AWS_IAM"]),
            "{method}"
        );
    }
    // The answer function may write a version's failure record, and no other object.
    let answer = statements(&t, "AnswerPolicy");
    let writes: Vec<&Value> = (answer.iter())
        .filter(|s| s["Action"] == "s3:PutObject")
        .collect();
    assert_eq!(writes.len(), 1, "{answer:?}");
    assert_eq!(
        writes[0]["Resource"]["Fn::Sub"],
        "${ComponentBucket.Arn}/*.failures.json"
    );
    // With the methods open to the network, every /v1 request needs a Sluice key.
    let env = &resource("AnswerFunction")["Properties"]["Environment"]["Variables"];
    assert!(env.get("SLUICE_API_KEYS_TABLE").is_some());
}
