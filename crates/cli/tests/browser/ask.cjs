// The web page in a real browser (Chromium, headless, driven by playwright-core): upload
// documents, ask, watch the answer stream in, read what the page shows, save a screenshot.
// Run by crates/cli/tests/browser.rs, which starts the server; prints one JSON line.
"use strict";
const { chromium } = require("playwright-core");

const url = process.env.SLUICE_URL;
const files = process.env.UPLOAD_FILES.split(":");
const screenshot = process.env.SCREENSHOT;
const question = "What should I do if I lose my card?";

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    // No sandbox (containers run as root); nothing in the background that could reach out.
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
           "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 1400 } });
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e}`));
    // A 400 the test provokes on purpose (a refused settings document) is logged by the
    // browser as a failed resource; any other error is a problem.
    let refusing = false;
    page.on("console", (m) => {
      if (m.type() !== "error") return;
      if (refusing && m.text().includes("status of 400")) return;
      problems.push(`console: ${m.text()}`);
    });
    // Each POST and PUT: whether it carried its body's SHA-256 (what CloudFront's origin
    // access control needs in front of a function URL).
    const hashed = [];
    page.on("request", (r) => {
      if (r.method() !== "POST" && r.method() !== "PUT") return;
      const body = r.postDataBuffer() || Buffer.alloc(0);
      const sent = r.headers()["x-amz-content-sha256"];
      const want = require("crypto").createHash("sha256").update(body).digest("hex");
      hashed.push({ method: r.method(), path: new URL(r.url()).pathname, ok: sent === want, bytes: body.length });
    });
    // Each API request: whether it carried the user token.
    const sentUser = [];
    page.on("request", (r) => {
      const path = new URL(r.url()).pathname;
      if (path.startsWith("/v1/")) sentUser.push({ method: r.method(), path, user: "x-sluice-user" in r.headers() });
    });
    await page.goto(url);
    const title = await page.title();

    await page.setInputFiles("#files", files);
    await page.click("#upload");
    await page.waitForFunction(
      () => document.getElementById("upload-status").textContent.startsWith("Added"),
      null, { timeout: 60000 });
    const uploaded = await page.textContent("#upload-status");

    // Typed, then Enter (the keyboard path).
    await page.fill("#question", question);
    await page.press("#question", "Enter");
    await page.waitForFunction(() => document.getElementById("answer").textContent.length > 0,
      null, { timeout: 30000 });
    const early = await page.evaluate(() => ({
      answer: document.getElementById("answer").textContent,
      total: document.getElementById("total").textContent,
      ttft: document.getElementById("ttft").textContent,
      busy: document.getElementById("answer").getAttribute("aria-busy"),
    }));
    // Done: the total shown and the stream closed (the answer no longer busy).
    await page.waitForFunction(() => document.getElementById("total").textContent !== "–"
      && document.getElementById("answer").getAttribute("aria-busy") === "false",
      null, { timeout: 60000 });
    const done = await page.evaluate(() => ({
      answer: document.getElementById("answer").textContent,
      ttft: document.getElementById("ttft").textContent,
      total: document.getElementById("total").textContent,
      tokens: document.getElementById("tokens").textContent,
      cache: document.getElementById("cache").textContent,
      status: document.getElementById("status").textContent,
      sources: [...document.querySelectorAll("#sources li")].map((li) => li.textContent),
      stages: [...document.querySelectorAll("#timings tbody td:first-child")].map((td) => td.textContent),
      busy: document.getElementById("answer").getAttribute("aria-busy"),
      extract: document.getElementById("extract").textContent,
      highlights: [...document.querySelectorAll("#sources .highlight")].map((q) => q.textContent),
      marked: [...document.querySelectorAll("#answer mark.unsupported")].map((m) => m.textContent),
      verdict: document.getElementById("verdict").textContent,
    }));
    await page.screenshot({ path: screenshot, fullPage: true });

    // The answer rated down, naming the page it should have come from; the ratings listed; a
    // set stored (through the page's own request helpers) and run, its progress shown.
    await page.fill("#expected", "lost-card.md");
    await page.click("#rate-down");
    await page.waitForFunction(() => document.getElementById("rate-status").textContent.length > 0,
      null, { timeout: 10000 });
    const rated = await page.textContent("#rate-status");
    await page.click("#list-feedback");
    await page.waitForFunction(() => document.getElementById("quality").textContent.length > 0,
      null, { timeout: 10000 });
    const ratings = await page.textContent("#quality");
    const stored = await page.evaluate(async () => {
      const text = JSON.stringify({ questions: [{ question: "What should I do if I lose my card?", documents: ["*lost-card*"] }] });
      const r = await fetch("/v1/evals/sets/web", { method: "PUT",
        headers: await withHash(headers({ "content-type": "application/json" }), text), body: text });
      return r.status;
    });
    await page.fill("#eval-set", "web");
    await page.click("#run-eval");
    await page.waitForFunction(() => document.getElementById("eval-status").textContent.startsWith("Run "),
      null, { timeout: 30000 });
    const quality = { rated, ratings, stored, run: await page.textContent("#eval-status"),
      figures: await page.textContent("#quality") };

    // A metadata filter typed in the page: not JSON is refused there; JSON goes with the
    // question, and the sources show their metadata.
    await page.fill("#filter", "{topic: accounts");
    await page.click("#ask");
    await page.waitForFunction(() => document.getElementById("error").textContent.length > 0,
      null, { timeout: 10000 });
    const badFilter = await page.textContent("#error");
    await page.fill("#filter", '{"topic": "accounts"}');
    await page.fill("#question", "How do I reset my password?");
    await page.click("#ask");
    await page.waitForFunction(() => document.getElementById("total").textContent !== "–",
      null, { timeout: 60000 });
    const filtered = await page.evaluate(() => ({
      error: document.getElementById("error").textContent,
      sources: [...document.querySelectorAll("#sources li")].map((li) => li.textContent),
      metadata: [...document.querySelectorAll("#sources .metadata")].map((m) => m.textContent),
    }));

    // The sources alone: the same filter and question, no answer written.
    await page.click("#search");
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Sources only"),
      null, { timeout: 30000 });
    const searched = await page.evaluate(() => ({
      status: document.getElementById("status").textContent,
      answer: document.getElementById("answer").textContent,
      sources: [...document.querySelectorAll("#sources li")].map((li) => li.textContent),
    }));

    // The documents, listed; one deleted (its confirmation accepted), then listed again.
    const rows = () => page.evaluate(() =>
      [...document.querySelectorAll("#documents tbody tr")].map((tr) => tr.dataset.id || ""));
    await page.click("#list-documents");
    await page.waitForFunction(() => document.getElementById("documents-status").textContent.includes("shown"),
      null, { timeout: 10000 });
    const listed = await rows();
    const victim = listed.find((id) => id.endsWith("lost-card.md"));
    page.once("dialog", (d) => d.accept());
    await page.click(`#documents tr[data-id="${victim}"] button`);
    await page.waitForFunction(() => document.getElementById("documents-status").textContent.startsWith("Deleted"),
      null, { timeout: 10000 });
    await page.click("#list-documents");
    await page.waitForFunction(() => document.getElementById("documents-status").textContent.includes("shown"),
      null, { timeout: 10000 });
    const documents = { listed, deleted: victim, after: await rows() };

    // The tenant's settings: none at first; instructions saved as version 1 and shown again;
    // an unknown field refused by the server, named, and nothing stored.
    const settingsStatus = () => document.getElementById("settings-status").textContent;
    const waitStatus = (before) => page.waitForFunction(
      (b) => { const t = document.getElementById("settings-status").textContent; return t && t !== b; },
      before, { timeout: 10000 });
    await page.click("#load-settings");
    await waitStatus("");
    const before = { status: await page.evaluate(settingsStatus), json: await page.inputValue("#settings") };
    await page.fill("#settings", '{"prompt": {"instructions": "You are Vega."}}');
    await page.click("#save-settings");
    await waitStatus(before.status);
    const saved = await page.evaluate(settingsStatus);
    await page.fill("#settings", '{"tone": "dry"}');
    refusing = true;
    await page.click("#save-settings");
    await waitStatus(saved);
    refusing = false;
    const refused = await page.evaluate(settingsStatus);
    await page.click("#load-settings");
    await waitStatus(refused);
    const settings = { before, saved, refused, after: { status: await page.evaluate(settingsStatus),
      json: await page.inputValue("#settings") } };
    // End users: an identity saved in the settings; a file uploaded for HR alone; listed and
    // asked about as a user of sales, then listed as a user of HR.
    await page.fill("#settings", JSON.stringify({ identity: JSON.parse(process.env.IDENTITY) }));
    await page.click("#save-settings");
    await waitStatus(settings.after.status);
    const identitySaved = await page.evaluate(settingsStatus);
    await page.fill("#access", "group:hr");
    await page.setInputFiles("#files", [process.env.HR_FILE]);
    await page.click("#upload");
    await page.waitForFunction(
      () => document.getElementById("upload-status").textContent.startsWith("Added 1 file"),
      null, { timeout: 60000 });
    await page.fill("#access", "");
    const listAs = async (token) => {
      await page.fill("#user", token);
      await page.evaluate(() => { document.getElementById("documents-status").textContent = ""; });
      await page.click("#list-documents");
      await page.waitForFunction(() => document.getElementById("documents-status").textContent.includes("shown"),
        null, { timeout: 10000 });
      return rows();
    };
    const asSales = await listAs(process.env.SALES_TOKEN);
    await page.fill("#filter", "");
    await page.fill("#question", "When is the staff bonus paid?");
    await page.click("#ask");
    await page.waitForFunction(() => document.getElementById("total").textContent !== "–",
      null, { timeout: 60000 });
    const salesSources = await page.evaluate(() =>
      [...document.querySelectorAll("#sources li")].map((li) => li.textContent));
    const asHr = await listAs(process.env.HR_TOKEN);
    // A token that does not verify: the page says which of its fields to fix (the browser
    // logs the 401 it expects; nothing else may go wrong meanwhile).
    const problemsBefore = problems.length;
    await page.fill("#user", "not-a-token");
    await page.evaluate(() => { document.getElementById("documents-status").textContent = ""; });
    await page.click("#list-documents");
    await page.waitForFunction(() => document.getElementById("documents-status").textContent.length > 0,
      null, { timeout: 10000 });
    const badToken = await page.textContent("#documents-status");
    problems.push(...problems.splice(problemsBefore).filter((p) => !p.includes("status of 401")));
    await page.fill("#user", "");
    const users = { identitySaved, asSales, salesSources, asHr, badToken, sent: sentUser };

    // A website kept in sync: saved from the fields, synced with its progress, then listed.
    await page.fill("#source-name", "site");
    await page.fill("#source-url", process.env.SITE_URL);
    await page.fill("#source-every", "60");
    await page.click("#save-source");
    await page.waitForFunction(() => document.getElementById("source-status").textContent.startsWith("Saved"),
      null, { timeout: 10000 });
    await page.click("#sync-source");
    await page.waitForFunction(() => document.getElementById("source-status").textContent.startsWith("Sync "),
      null, { timeout: 60000 });
    const synced = { status: await page.textContent("#source-status"), report: await page.textContent("#source-report") };
    await page.click("#list-sources");
    await page.waitForFunction(() => document.getElementById("source-report").textContent.startsWith("site"),
      null, { timeout: 10000 });
    const sources = Object.assign(synced, { listed: await page.textContent("#source-report") });
    console.log(JSON.stringify({ title, uploaded, early, done, quality, badFilter, filtered, searched, documents, settings, users, sources, problems, hashed }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
