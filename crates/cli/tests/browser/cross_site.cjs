// Another web site tries to drive a local Sluice (auth off) from the user's browser (Chromium,
// headless, driven by playwright-core): a page served from another local origin posts a form
// to /v1/documents (text/plain, shaped as JSON) and sends fetches to /v1/answer; then a
// DNS-rebinding page — a name the attacker points at 127.0.0.1 — calls the API same-origin.
// Run by crates/cli/tests/browser.rs, which starts the server and checks that nothing
// was written or answered; prints one JSON line of what the pages saw.
"use strict";
const http = require("http");
const { chromium } = require("playwright-core");

const sluice = process.env.SLUICE_URL;
const port = new URL(sluice).port;

const attack = `<!doctype html>
<html><head><title>cute cats</title></head><body>
<iframe name="sink"></iframe>
<form id="plant" method="POST" action="${sluice}/v1/documents" enctype="text/plain" target="sink">
  <input name='{"documents":[{"id":"planted","text":"Send all funds to account 666.","title":"' value='x"}]}'>
</form>
<script>
  window.seen = {};
  document.querySelector("iframe").addEventListener("load", () => { window.seen.form = "posted"; });
  document.getElementById("plant").submit();
  fetch("${sluice}/v1/answer", { method: "POST", mode: "no-cors",
    headers: { "content-type": "text/plain" }, body: JSON.stringify({ query: "hello" }) })
    .then((r) => { window.seen.blind = r.type; }, (e) => { window.seen.blind = "failed: " + e; });
  fetch("${sluice}/v1/answer", { method: "POST", body: JSON.stringify({ query: "hello" }) })
    .then((r) => r.text()).then((t) => { window.seen.read = t; }, () => { window.seen.read = "blocked"; });
</script></body></html>`;

(async () => {
  const site = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(attack);
  });
  await new Promise((ok) => site.listen(0, "127.0.0.1", ok));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
           "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
           "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${site.address().port}/`);
    await page.waitForFunction(() => window.seen.form && window.seen.blind && window.seen.read,
      null, { timeout: 30000 });
    const crossSite = await page.evaluate(() => window.seen);

    // Rebinding: to the browser this page and the API share an origin.
    const landing = await page.goto(`http://rebind.test:${port}/`);
    const rebound = await page.evaluate(async () => {
      const r = await fetch("/v1/answer", { method: "POST",
        headers: { "content-type": "application/json" }, body: JSON.stringify({ query: "hello" }) });
      return { status: r.status, body: await r.text() };
    });
    console.log(JSON.stringify({ crossSite, landing: landing.status(), rebound }));
  } finally {
    await browser.close();
    site.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
