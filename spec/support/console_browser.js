// The gateway console in headless Debian chromium, driven by playwright-core (web/package.json,
// installed by scripts/vendor-console.sh). Run by spec/console_browser_spec.lua against a real
// gateway; prints one line per step and exits non-zero on the first failure.
//   env: CONSOLE_URL (http://127.0.0.1:PORT), TOKEN_A, TOKEN_B, SHOTS (a directory),
//        CHROMIUM (default /usr/bin/chromium); POOLED_PREFIX: the pooled gateway's test instead
"use strict";
const path = require("path");
const fs = require("fs");
const root = path.resolve(__dirname, "../..");
const { chromium } = require(path.join(root, "web/node_modules/playwright-core"));
const AXE = fs.readFileSync(path.join(root, "web/node_modules/axe-core/axe.min.js"), "utf8");

const URL = process.env.CONSOLE_URL;
const SHOTS = process.env.SHOTS;
let shot = 0;

function check(ok, what) {
  if (!ok) throw new Error("check failed: " + what);
}

let failPage = null;
// The browser and its page, with a screenshot per step, every answer of the console's API kept
// (to look for what must never reach the browser) and the page's errors.
async function openPage() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  failPage = page;
  const step = async (name) => {
    shot += 1;
    const file = path.join(SHOTS, String(shot).padStart(2, "0") + "-" + name + ".png");
    await page.screenshot({ path: file, fullPage: true });
    console.log("step " + shot + ": " + name + " (" + file + ")");
  };
  const bodies = [];
  page.on("response", async (res) => {
    if (!res.url().includes("/console/api/") || res.url().includes("/egress/log")) return;
    try { bodies.push(res.url() + " " + await res.text()); } catch (e) { /* a WebSocket or an aborted stream */ }
  });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text()); });
  return { browser, context, page, step, bodies, errors };
}

async function signIn(page, token) {
  await page.fill("#token", token);
  await page.click("#signin-form button[type=submit]");
  await page.waitForSelector("#app:not([hidden])");
}

// A gateway whose sessions come from a warm pool and have no proxy (the example configuration's
// shape): the page offers what such a session can do (a terminal, pause, snapshot, fork; no
// egress panel), each works, and no text the page shows or the API answers names a project of
// the gateway (POOLED_PREFIX: its project_prefix).
async function pooled() {
  const prefix = process.env.POOLED_PREFIX;
  const { browser, page, step, bodies, errors } = await openPage();
  await page.goto(URL + "/console/");
  await signIn(page, process.env.TOKEN_A);
  await page.click("#create");
  await page.waitForSelector("#sessions tbody tr[data-state=ready]", { timeout: 180000 });
  const key = await page.getAttribute("#sessions tbody tr[data-state=ready]", "data-key");
  await page.waitForFunction(() => document.getElementById("terminal-state").textContent.startsWith("Connected"),
    null, { timeout: 60000 });
  check(await page.isHidden("#egress-panel"), "the egress panel is offered for a session without a proxy");
  check((await page.textContent(`#sessions tr[data-key="${key}"] .policy`)) === "none (no proxy)", "the policy cell");
  await page.click("#terminal");
  await page.keyboard.type("echo poo''led\n");
  await page.waitForFunction(() => document.querySelector("#terminal .xterm-rows").textContent.includes("pooled"),
    null, { timeout: 20000 });
  await step("pooled-created");
  await page.click(`button[aria-label="Snapshot ${key}"]`);
  await page.waitForFunction(() => /Snapshot .* taken|snapshot failed/.test(document.getElementById("status").textContent),
    null, { timeout: 120000 });
  check(/Snapshot .* taken/.test(await page.textContent("#status")), "snapshot: " + await page.textContent("#status"));
  await page.click(`button[aria-label="Fork ${key}"]`);
  await page.waitForFunction(() => /Forked|fork failed/.test(document.getElementById("status").textContent),
    null, { timeout: 180000 });
  const said = await page.textContent("#status");
  check(/^Forked /.test(said), "fork: " + said);
  const child = said.match(/ into (\S+)\.$/)[1];
  await page.waitForSelector(`#sessions tr[data-key="${child}"][data-state=ready]`, { timeout: 60000 });
  await step("pooled-forked");
  // a failure the page shows names the session by its key: asks of a session without a proxy
  const asked = await page.evaluate(async (k) => {
    const res = await fetch("/console/api/sessions/" + k + "/egress/asks",
      { headers: { Authorization: "Bearer " + sessionStorage.getItem("sandstack.console.token") } });
    return res.status + " " + await res.text();
  }, key);
  check(/^409 /.test(asked) && asked.includes(key), "the asks of a session without a proxy: " + asked);
  bodies.push("asks " + asked);
  for (const k of [child, key]) {
    await page.click(`button[aria-label="Destroy ${k}"]`);
    await page.waitForFunction((x) => !document.querySelector(`#sessions tr[data-key="${x}"]`), k, { timeout: 60000 });
  }
  await step("pooled-destroyed");
  const shown = await page.evaluate(() => document.body.innerText);
  check(!shown.includes(prefix), "the page shows a project: " + shown);
  for (const b of bodies) check(!b.includes(prefix), "the API answered a project: " + b);
  console.log("api answers checked: " + bodies.length);
  check(errors.length === 0, "errors in the page: " + errors.join("; "));
  await browser.close();
}

async function main() {
  if (process.env.POOLED_PREFIX) return pooled();
  const { browser, context, page, step, bodies, errors } = await openPage();

  const res = await page.goto(URL + "/console/");
  const csp = res.headers()["content-security-policy"] || "";
  check(csp.includes("script-src 'self'") && !csp.includes("unsafe-eval") && !/script-src[^;]*unsafe-inline/.test(csp),
    "the page's CSP: " + csp);
  check(res.headers()["x-content-type-options"] === "nosniff", "nosniff");
  // the CSP holds: an inline script added to the page does not run
  const ran = await page.evaluate(() => {
    const s = document.createElement("script");
    s.textContent = "window.__inline = 1";
    document.body.append(s);
    return window.__inline === 1;
  });
  check(!ran, "an inline script ran despite the CSP");
  check(errors.length === 1 && errors[0].includes("Content Security Policy"), "the CSP's report of it: " + errors);
  errors.length = 0; // that refusal was this test's own
  await step("sign-in");

  // sign in as tenant a: the token goes to sessionStorage, never to the URL or a cookie
  await signIn(page, process.env.TOKEN_A);
  check(!page.url().includes(process.env.TOKEN_A), "the token is in the URL");
  check((await context.cookies()).length === 0, "a cookie was set");
  check(await page.evaluate(() => Object.values(sessionStorage).length === 1), "the token in sessionStorage");

  // create: a row appears and the terminal connects
  await page.click("#create");
  await page.waitForSelector("#sessions tbody tr[data-state=ready]", { timeout: 180000 });
  const key = await page.getAttribute("#sessions tbody tr[data-state=ready]", "data-key");
  await page.waitForFunction(() => document.getElementById("terminal-state").textContent.startsWith("Connected"),
    null, { timeout: 60000 });
  // CPU and memory come in from h:stats, the policy from h:egress
  // (the engine samples each container for a second or two, far longer on a loaded engine)
  await page.waitForFunction(() => /MiB|KiB/.test(document.querySelector("#sessions tbody tr").textContent),
    null, { timeout: 150000 });
  await step("created");

  // the terminal: typed, answered (the quotes keep the typed line from matching)
  const rows = () => page.evaluate(() => document.querySelector("#terminal .xterm-rows").textContent);
  await page.click("#terminal");
  await page.keyboard.type("echo hel''lo\n");
  await page.waitForFunction(() => document.querySelector("#terminal .xterm-rows").textContent.includes("hello"),
    null, { timeout: 20000 });
  await step("terminal-echo");

  // resize the window: fit, a resize message, and the shell's terminal has the new size
  const before = await page.textContent("#terminal-state");
  await page.setViewportSize({ width: 700, height: 900 });
  await page.waitForFunction((b) => document.getElementById("terminal-state").textContent !== b, before,
    { timeout: 10000 });
  const size = (await page.textContent("#terminal-state")).match(/(\d+)×(\d+)/);
  await page.keyboard.type("stty size\n");
  await page.waitForFunction((want) => document.querySelector("#terminal .xterm-rows").textContent.includes(want),
    size[2] + " " + size[1], { timeout: 20000 });
  console.log("terminal resized to " + size[1] + "x" + size[2] + ": " + before);
  await step("terminal-resized");
  await page.setViewportSize({ width: 1280, height: 900 });

  // an egress refusal: a path the rule naming the host does not admit is refused at once
  await page.click("#terminal");
  await page.keyboard.type("wget -q -O- http://allowed.test/no ; echo refused-done\n");
  await page.waitForFunction(() => /deny GET allowed\.test/.test(document.getElementById("audit").textContent),
    null, { timeout: 30000 });
  await step("egress-refusal");

  // an ask: a host no rule names is held by the proxy until the console answers (Deny: no
  // traffic leaves the machine)
  await page.keyboard.type("wget -q -O- http://asked.test/ ; echo ask-done\n");
  await page.waitForSelector("#asks li", { timeout: 30000 });
  check((await page.textContent("#asks li")).includes("asked.test"), "the ask names its host");
  await step("ask-pending");
  await page.click('#asks button[aria-label="Deny asked.test"]');
  await page.waitForFunction(() => !document.querySelector("#asks li") &&
    /ask-done/.test(document.querySelector("#terminal .xterm-rows").textContent), null, { timeout: 30000 });
  await page.waitForFunction(() => /deny GET asked\.test/.test(document.getElementById("audit").textContent),
    null, { timeout: 30000 });
  check(/ask_denied|403/.test(await rows()), "the sandbox read the ask's refusal");
  await step("ask-denied");

  // pause and resume
  await page.click(`button[aria-label="Pause ${key}"]`);
  await page.waitForFunction((k) => document.querySelector(`#sessions tr[data-key="${k}"][data-state=paused]`) ||
    /pause failed/.test(document.getElementById("status").textContent), key, { timeout: 60000 });
  const pauseSaid = await page.textContent("#status");
  if (/pause failed.*unable to freeze/.test(pauseSaid)) {
    // the engine's cgroup freezer gives up now and then on a loaded machine: once more
    console.log("pause: the engine said " + pauseSaid + "; trying once more");
    await page.click(`button[aria-label="Pause ${key}"]`);
  }
  await page.waitForSelector(`#sessions tr[data-key="${key}"][data-state=paused]`, { timeout: 60000 });
  await step("paused");
  await page.click(`button[aria-label="Resume ${key}"]`);
  await page.waitForSelector(`#sessions tr[data-key="${key}"][data-state=ready]`, { timeout: 60000 });
  await step("resumed");

  // accessibility: axe-core finds no serious or critical violation (evaluated through the
  // DevTools protocol, which the page's CSP does not govern)
  await page.evaluate(AXE);
  const axe = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length }));
  });
  const bad = axe.filter((v) => v.impact === "serious" || v.impact === "critical");
  console.log("axe: " + axe.length + " violations, " + bad.length + " serious or critical " + JSON.stringify(axe));
  check(bad.length === 0, "axe: " + JSON.stringify(bad));

  // destroy
  await page.click(`button[aria-label="Destroy ${key}"]`);
  await page.waitForFunction((k) => !document.querySelector(`#sessions tr[data-key="${k}"]`), key, { timeout: 60000 });
  await step("destroyed");

  // nothing the console's API answered holds a secret, a digest, a record or the token
  for (const b of bodies) {
    check(!/"(secret|digest|record|token_sha256|api_key|credentials)"/.test(b), "sent to the browser: " + b);
    check(!b.includes(process.env.TOKEN_A), "the token came back: " + b);
  }
  console.log("api answers checked: " + bodies.length);

  // a second session for tenant a, then tenant b sees none of a's
  await page.click("#create");
  await page.waitForSelector("#sessions tbody tr[data-state=ready]", { timeout: 180000 });
  const keyA = await page.getAttribute("#sessions tbody tr[data-state=ready]", "data-key");
  await page.click("#signout");
  await signIn(page, process.env.TOKEN_B);
  await page.waitForSelector("#empty:not([hidden])");
  check((await page.$$("#sessions tbody tr")).length === 0, "tenant b sees a session");
  await step("tenant-b");
  console.log("KEY_A=" + keyA);
  check(errors.length === 0, "errors in the page: " + errors.join("; "));
  await browser.close();
}

main().then(() => { console.log("console browser test: ok"); }, async (e) => {
  console.log("console browser test: FAILED: " + (e && e.stack || e));
  if (failPage) {
    try {
      await failPage.screenshot({ path: path.join(SHOTS, "failed.png"), fullPage: true });
      console.log("audit log: " + await failPage.textContent("#audit"));
      console.log("terminal: " + await failPage.textContent("#terminal .xterm-rows"));
    } catch (e2) { /* the page is gone */ }
  }
  process.exit(1);
});
