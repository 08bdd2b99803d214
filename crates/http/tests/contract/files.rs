//! Files as people have them, through `POST /v1/documents`: a PDF, a Word document, an HTML
//! page by name or by `Content-Type`, converted into sections whose place (section, pages)
//! every source of an answer carries; and every refusal with its code, naming the file, with
//! nothing of it stored.

use axum::http::Method;
use serde_json::{Value, json};
use sluice_testkit::files::{PdfOptions, docx, pdf};

use crate::kit::{App, Kit, Reply};

async fn upload(app: &App, query: &str, headers: &[(&str, &str)], bytes: Vec<u8>) -> Reply {
    app.send(
        Method::POST,
        &format!("/v1/documents{query}"),
        headers,
        bytes,
    )
    .await
}

async fn listed(app: &App) -> Vec<Value> {
    let reply = app.send(Method::GET, "/v1/documents", &[], "").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    reply.body["documents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn handbook() -> Vec<u8> {
    let pages: [&[(f32, &str)]; 3] = [
        &[
            (16.0, "Cards"),
            (10.0, "Debit cards are free to hold and to use at home."),
        ],
        &[
            (14.0, "Lost or stolen"),
            (
                10.0,
                "A stolen card is frozen at once; the replacement card arrives in five working days.",
            ),
        ],
        &[
            (16.0, "Loans"),
            (10.0, "Loan rates depend on the amount and the term."),
        ],
    ];
    let outline = [(1, "Cards", 1), (2, "Lost or stolen", 2), (1, "Loans", 3)];
    pdf(
        &pages,
        PdfOptions {
            outline: &outline,
            ..Default::default()
        },
    )
}

/// One heading path per chunk (`SLUICE_PACK_SECTIONS=false`): the answer's source names its
/// section and its one page.
#[tokio::test]
async fn a_pdf_is_cited_by_section_and_page() {
    let app = Kit::new(&[("SLUICE_PACK_SECTIONS", "false")]).app();
    let reply = upload(&app, "?filename=policies/handbook.pdf", &[], handbook()).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["documents"], 1);
    let docs = listed(&app).await;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["id"], "policies/handbook.pdf");
    assert_eq!(docs[0]["format"], "pdf");
    let answer = app
        .answer(&json!({"query": "When does the replacement for a stolen card arrive?", "k": 1}))
        .await;
    let source = &answer.meta()["documents"][0];
    assert_eq!(source["id"], "policies/handbook.pdf", "{source}");
    assert_eq!(source["section"], "Cards › Lost or stolen", "{source}");
    assert_eq!(source["page"], 2, "{source}");
    assert!(
        source.get("pages").is_none(),
        "one page: no range, {source}"
    );
}

/// By default whole sections share a chunk while they fit: the handbook's three short
/// sections are one chunk, which cites the pages it spans and no section (they share no
/// heading), and quotes each section under its heading line.
#[tokio::test]
async fn by_default_short_sections_share_a_chunk_citing_the_pages_it_spans() {
    let app = Kit::new(&[]).app();
    let reply = upload(&app, "?filename=handbook.pdf", &[], handbook()).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let answer = app
        .answer(&json!({"query": "When does the replacement for a stolen card arrive?", "k": 3}))
        .await;
    let sources = answer.meta()["documents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(sources.len(), 1, "one chunk: {sources:?}");
    let source = &sources[0];
    assert!(source.get("section").is_none(), "{source}");
    assert_eq!(source["page"], 1, "{source}");
    assert_eq!(source["pages"], json!([1, 3]), "{source}");
    let text = source["snippet"].as_str().unwrap_or_default();
    let order: Vec<Option<usize>> = ["Lost or stolen", "five working days", "Loans"]
        .iter()
        .map(|needle| text.find(needle))
        .collect();
    assert!(
        order.iter().all(Option::is_some) && order.is_sorted(),
        "{source}"
    );
}

#[tokio::test]
async fn word_and_html_by_name_or_by_content_type() {
    let app = Kit::new(&[]).app();
    let word = docx("# Savings\n\n## Rates\n\nThe easy-access saver pays three per cent.\n");
    let reply = upload(&app, "?filename=savings.docx", &[], word).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let page = "<html><head><title>Branches</title></head><body><nav>Home | Help</nav>\
        <main><h1>Branches</h1><h2>Opening hours</h2><p>Branches open at nine on weekdays.</p></main></body></html>";
    // No file name: the Content-Type names the format, the content names the document.
    let headers = [("content-type", "text/html; charset=utf-8")];
    let reply = upload(&app, "", &headers, page.as_bytes().to_vec()).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let again = upload(&app, "", &headers, page.as_bytes().to_vec()).await;
    assert_eq!(again.status, 200, "{}", again.raw);
    let docs = listed(&app).await;
    let formats: Vec<(&str, &str)> = (docs.iter())
        .map(|d| {
            (
                d["format"].as_str().unwrap_or(""),
                d["title"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        docs.len(),
        2,
        "the same page sent twice is one document: {docs:?}"
    );
    assert!(formats.contains(&("docx", "Savings")), "{formats:?}");
    assert!(formats.contains(&("html", "Branches")), "{formats:?}");
    let answer = app
        .answer(&json!({"query": "When do branches open on weekdays?", "k": 1}))
        .await;
    assert_eq!(
        answer.meta()["documents"][0]["section"],
        "Branches › Opening hours"
    );
    assert!(answer.meta()["documents"][0].get("page").is_none());
}

#[tokio::test]
async fn refusals_have_their_code_name_the_file_and_store_nothing() {
    let app = Kit::new(&[("SLUICE_MAX_PDF_PAGES", "2")]).app();
    let line: &[(f32, &str)] = &[(10.0, "Some text.")];
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "scan.pdf",
            pdf(&[&[], &[]], PdfOptions::default()),
            422,
            "no_text_layer",
        ),
        (
            "locked.pdf",
            pdf(
                &[line],
                PdfOptions {
                    password: Some("pw"),
                    ..Default::default()
                },
            ),
            422,
            "encrypted_document",
        ),
        (
            "broken.pdf",
            pdf(
                &[line],
                PdfOptions {
                    no_media_box: true,
                    ..Default::default()
                },
            ),
            422,
            "unreadable_document",
        ),
        (
            "long.pdf",
            pdf(&[line, line, line], PdfOptions::default()),
            413,
            "ingest_too_large",
        ),
        (
            "notes.pdf",
            b"%PDF-1.4 not really".to_vec(),
            400,
            "invalid_document",
        ),
        ("sheet.xlsx", b"PK".to_vec(), 415, "unsupported_format"),
    ];
    for (name, bytes, status, code) in cases {
        let reply = upload(&app, &format!("?filename={name}"), &[], bytes).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{name}: {}",
            reply.raw
        );
        let message = reply.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(name), "{name}: {message}");
    }
    // An unknown Content-Type without a name is not a file format.
    let reply = upload(
        &app,
        "",
        &[("content-type", "image/png")],
        b"\x89PNG".to_vec(),
    )
    .await;
    assert_eq!(
        reply.status, 400,
        "the JSON body is expected: {}",
        reply.raw
    );
    assert!(listed(&app).await.is_empty());
}
