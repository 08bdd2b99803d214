//! End users' access, as a property: 10,000 random cases (`SLUICE_TEST_CASES`; 1,000 in `make
//! check`) — a user of random principals (or
//! none), through a key bound to a random filter (or none), sending a random filter (or none),
//! asking one of a few questions — over 40 documents with random access lists and labels. For
//! each, against the reference meaning (`access::may_see` AND the key's and the request's
//! filters, by `Filter::matches`): no source of the answer, cached or not, and no text of its
//! prompt belongs to a document the user may not see; the listing with the request's filter
//! holds exactly the documents the user may see, or — for the tenant's admin, an unbound key
//! with `documents` and no token — every document (the in-memory store filters exactly).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::access::{ACCESS_KEY, may_see};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_contract::metadata::{MetaValue, Metadata};
use sluice_testkit::MemoryKeys;
use sluice_testkit::users::{Cases, case_count, identity, principals, token};

use crate::kit::{Kit, UNCHECKED};

const DOCUMENTS: usize = 40;
const QUESTIONS: [&str; 3] = [
    "How long does a replacement card take?",
    "What is the policy on cards?",
    "When does a new card arrive?",
];

struct Doc {
    id: String,
    metadata: Metadata,
    access: Option<Vec<String>>,
}

struct Key {
    auth: String,
    filter: Option<Filter>,
}

fn parsed(filter: &Option<Value>) -> Option<Filter> {
    filter
        .as_ref()
        .map(|f| Filter::parse(f).expect("a test filter"))
}

#[tokio::test]
async fn no_answer_prompt_cached_answer_or_listing_crosses_a_users_access() {
    let mut cases = Cases::new(58);
    let count = case_count();
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add("acme", &Permission::DEFAULT);
    let app = Kit::new(UNCHECKED).keys(Arc::clone(&keys)).app();
    let admin = format!("Bearer {admin}");
    let as_admin = [("authorization", admin.as_str())];
    let settings = json!({"identity": identity(false)}).to_string();
    let put = app
        .send(Method::PUT, "/v1/settings", &as_admin, settings)
        .await;
    assert_eq!(put.status, 200, "{}", put.raw);

    let mut docs = Vec::new();
    for i in 0..DOCUMENTS {
        let id = format!("d{i:02}");
        let mut metadata = json!({"team": cases.pick(&["a", "b", "c"])});
        if let Some(list) = cases.access() {
            metadata["_access"] = json!(list);
        }
        let text =
            format!("Replacement cards and their policy: a new card arrives in {i} days. [[{id}]]");
        let body = json!({"documents": [{"id": id, "text": text, "metadata": metadata}]});
        let sent = app
            .send(Method::POST, "/v1/documents", &as_admin, body.to_string())
            .await;
        assert_eq!(sent.status, 200, "{}", sent.raw);
        let metadata = Metadata::from_json(metadata.as_object().unwrap()).unwrap();
        // The list as stored (an empty one as the principal nobody holds).
        let access = match metadata.get(ACCESS_KEY) {
            Some(MetaValue::List(list)) => Some(list.clone()),
            _ => None,
        };
        docs.push(Doc {
            id,
            metadata,
            access,
        });
    }
    // Keys as a tenant's front ends hold them: unbound, and bound to filters.
    let mut front_ends = Vec::new();
    for _ in 0..4 {
        let filter = cases.team_filter();
        let perms = [
            Permission::Answer,
            Permission::Documents,
            Permission::Prompt,
        ];
        let key = keys.add_filtered("acme", &perms, parsed(&filter));
        front_ends.push(Key {
            auth: format!("Bearer {key}"),
            filter: parsed(&filter),
        });
    }
    // Users, each with their token: their principals are random, their tokens fixed.
    let users: Vec<(String, Vec<String>)> = (0..24).map(|_| cases.user()).collect();
    let tokens: Vec<String> = (users.iter())
        .map(|(sub, groups)| token(sub, &groups.iter().map(String::as_str).collect::<Vec<_>>()))
        .collect();

    let (mut hits, mut shared, mut sources, mut listed) = (0, 0, 0, 0);
    let mut seen_by: HashMap<bool, usize> = HashMap::new();
    for case in 0..count {
        let key = cases.pick(&front_ends);
        let user = cases.below(users.len() + 2);
        let (held, token) = match users.get(user) {
            Some((sub, groups)) => (Some(principals(sub, groups)), Some(tokens[user].as_str())),
            None => (None, None),
        };
        let sent = cases.team_filter();
        let request = parsed(&sent);
        let visible = |d: &Doc| {
            may_see(d.access.as_deref(), held.as_deref())
                && [&key.filter, &request]
                    .iter()
                    .all(|f| f.as_ref().is_none_or(|f| f.matches(&d.metadata)))
        };
        let mut headers = vec![("authorization", key.auth.as_str())];
        if let Some(t) = token {
            headers.push(("x-sluice-user", t));
        }
        let why = || {
            format!(
                "case {case}: user {held:?}, key {:?}, filter {sent:?}",
                key.filter
            )
        };

        // An answer: every source, and every document quoted in the prompt, visible.
        let mut ask = json!({"query": cases.pick(&QUESTIONS), "k": 10, "include_prompt": true});
        if let Some(f) = &sent {
            ask["filter"] = f.clone();
        }
        let answer = app.answer_with(&headers, &ask).await;
        let meta = answer.meta();
        hits += usize::from(meta["cache"] == "hit");
        // Made for another user (or earlier), replayed because this user's sources are its.
        shared += usize::from(meta["cache_match"] == "sources");
        let prompt = meta["prompt"].to_string();
        for doc in &docs {
            let quoted = prompt.contains(&format!("[[{}]]", doc.id));
            let cited = answer.sources().contains(&doc.id);
            if quoted || cited {
                assert!(visible(doc), "{} reached {}", doc.id, why());
                sources += 1;
            }
        }

        // The listing: exactly the visible documents.
        let path = match &sent {
            Some(f) => format!(
                "/v1/documents?filter={}",
                sluice_contract::escape(&f.to_string())
            ),
            None => "/v1/documents".to_string(),
        };
        let reply = app.send(Method::GET, &path, &headers, "").await;
        assert_eq!(reply.status, 200, "{}: {}", why(), reply.raw);
        let body: Value = serde_json::from_str(&reply.raw).unwrap();
        let mut got: Vec<&str> = (body["documents"].as_array().unwrap().iter())
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        got.sort();
        // Listing is managing: a key that holds `documents`, bound to no filter, sending no
        // user's token is the tenant's admin, who lists every document, access lists aside.
        let admin = held.is_none() && key.filter.is_none();
        let request_passes = |d: &Doc| request.as_ref().is_none_or(|f| f.matches(&d.metadata));
        let want: Vec<&str> = docs
            .iter()
            .filter(|d| visible(d) || (admin && request_passes(d)))
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(got, want, "{}", why());
        listed += got.len();
        *seen_by.entry(!want.is_empty()).or_default() += 1;
    }
    // The cases reached what they are about: cache hits, documents seen, and nothing to see.
    assert!(
        hits > count / 10 && shared > count / 100,
        "cache hits: {hits}, {shared} through their sources"
    );
    assert!(
        sources > count && listed > count,
        "{sources} sources, {listed} listed"
    );
    assert!(
        seen_by.get(&false).copied().unwrap_or(0) > count / 50,
        "{seen_by:?}"
    );
}
