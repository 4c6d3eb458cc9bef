// `make demo`: start the demo server, drive two tabs of the notes app, narrate what the queue does.
//
//   DEMO_EXIT=1 make demo   run the story, save build/demo.png, exit (non-zero if a save never completed)
//   make demo               the same, then keep the server up for a person at http://127.0.0.1:8000/demo/
//
// Env: DEMO_PORT (8000), CHROMIUM_PATH (/usr/bin/chromium).
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "@playwright/test";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const PORT = Number(process.env.DEMO_PORT || 8000);
const BASE = `http://127.0.0.1:${PORT}`;
const EXIT = process.env.DEMO_EXIT === "1";
const ARGS = JSON.parse(readFileSync(path.join(ROOT, "tests/chromium-flags.json"), "utf8"));

const t0 = Date.now();
const say = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s] ${msg}`);
const step = (msg) => console.log(`\n== ${msg}`);

async function startServer() {
  const python = existsSync(path.join(ROOT, ".venv/bin/python")) ? path.join(ROOT, ".venv/bin/python") : "python3";
  const server = spawn(python, ["scripts/demo_server.py", "--port", String(PORT), "--root", "build/site"],
    { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
  server.stdout.on("data", (d) => process.stdout.write(`[server] ${d}`));
  for (let i = 0; i < 100; i++) {
    if (server.exitCode !== null) throw new Error(`the demo server exited (${server.exitCode}); is port ${PORT} free?`);
    try { if ((await fetch(`${BASE}/__demo/state`)).ok) return server; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the demo server did not start");
}

const control = async (what, body) =>
  (await fetch(`${BASE}/__demo/${what}`, { method: "POST", body: JSON.stringify(body || {}) })).json();
const serverState = async () => (await fetch(`${BASE}/__demo/state`)).json();

function describe(u) {
  if (u.deleted) return `${u.label || u.type} ${u.id.slice(0, 8)} deleted`;
  if (u.progress_only) return `${u.id.slice(0, 8)} progress ${Math.round(u.progress * 100)}%`;
  const bits = [`${u.label || u.type} ${u.id.slice(0, 8)}`, u.status, `attempts ${u.attempts}/${u.max_attempts}`];
  if (u.http_status) bits.push(`HTTP ${u.http_status}`);
  if (u.code) bits.push(`code ${u.code}`);
  if (u.status === "pending" && u.next_retry_at) bits.push(`next try in ${Math.max(0, Math.round((u.next_retry_at - Date.now()) / 100) / 10)} s`);
  return bits.join(" · ");
}

/** Open the demo in a new tab; every job-update its <bg-jobs> bridge hears is printed and kept. */
async function openTab(context, name) {
  const page = await context.newPage();
  const seen = [];
  page.on("pageerror", (err) => say(`[${name}] page error: ${err.stack || err.message}`));
  page.on("console", (msg) => { if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) say(`[${name}] console: ${msg.text()}`); });
  await page.exposeFunction("demoSeen", (text) => {
    const u = JSON.parse(text);
    seen.push(u);
    say(`[${name}] job-update  ${describe(u)}`);
  });
  await page.goto(`${BASE}/demo/`);
  await page.waitForFunction(() => window.demoReady === true, null, { timeout: 60_000 });
  await page.evaluate(() => globalThis.__pyjobq_bridge.subscribe((t) => window.demoSeen(t)));
  say(`[${name}] ready: Pyodide loaded, queue configured, <bg-jobs> installed`);
  return { page, seen, name };
}

async function waitFor(tab, what, predicate, timeout = 30_000) {
  const start = Date.now();
  while (Date.now() - start < timeout) {
    const hit = tab.seen.find(predicate);
    if (hit) return hit;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`[${tab.name}] timed out waiting for ${what}`);
}

async function main() {
  mkdirSync(path.join(ROOT, "build"), { recursive: true });
  step("starting the demo server");
  const server = await startServer();
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", args: ARGS, headless: true });
  let ok = false;
  try {
    const context = await browser.newContext({ viewport: { width: 1180, height: 900 } });
    await context.route((url) => !url.href.startsWith(BASE), (route) => route.abort("internetdisconnected"));

    step("opening two tabs of the demo");
    const A = await openTab(context, "A");
    const B = await openTab(context, "B");

    step("typing a note in tab A (each keystroke replaces the pending save: delete_group + delay_ms)");
    await A.page.locator("#note").fill("");
    await A.page.locator("#note").pressSequentially("Hello from tab A", { delay: 40 });
    const saved = await waitFor(A, "the note's save to complete", (u) => u.label === "save note" && u.status === "done");
    await waitFor(B, "tab B to hear the same save", (u) => u.id === saved.id && u.status === "done");
    let state = await serverState();
    say(`server has note v${state.notes.welcome.version}: ${JSON.stringify(state.notes.welcome.text)}; ` +
      `PUTs: ${state.log.filter((r) => r.method === "PUT").length} (one per pause in typing, not per keystroke)`);

    step("the server's token expires: the next save gets a 401 and the transport refreshes the token");
    const before = (await serverState()).log.length;
    await control("expire");
    say("server: the current token now answers 401 until a refresh");
    await A.page.locator("#note").pressSequentially(" — and again", { delay: 40 });
    const resaved = await waitFor(A, "the save after the 401", (u) => u.label === "save note" && u.status === "done" && u.id !== saved.id);
    state = await serverState();
    for (const r of state.log.slice(before)) say(`server log: ${r.method} ${r.path} → ${r.status}`);
    say(`save ${resaved.id.slice(0, 8)} done after a token refresh; server has v${state.notes.welcome.version}`);

    step("the same with automatic refresh off: the job waits on the 401 branch until the user refreshes");
    // Whichever tab holds the lock runs the job, with its own transport: switch it off in both.
    for (const tab of [A, B]) await tab.page.locator("#auto").uncheck();
    await control("expire");
    await A.page.locator("#note").pressSequentially("!", { delay: 40 });
    const parked = await waitFor(A, "a 401 on the save", (u) => u.label === "save note" && u.http_status === 401 && u.status === "pending");
    say(`the save is pending, attempts ${parked.attempts}/${parked.max_attempts} (a 401 costs none), next try in ~60 s`);
    await A.page.waitForTimeout(600); // let the table show it
    await A.page.screenshot({ path: path.join(ROOT, "build", "demo-401.png"), fullPage: true });
    await A.page.getByRole("button", { name: "Refresh token" }).click();
    say("clicked “Refresh token”: the app files the note's save again with the fresh token");
    await waitFor(A, "the save after the manual refresh", (u) => u.label === "save note" && u.status === "done" && u.id !== resaved.id && u.id !== parked.id);
    for (const tab of [A, B]) await tab.page.locator("#auto").check();

    step("publishing is forbidden: a 403 fails the job on its first attempt, with no retry");
    await A.page.getByRole("button", { name: "Publish", exact: true }).click();
    const refused = await waitFor(A, "the publish job to fail", (u) => u.label === "publish note" && u.status === "failed");
    say(`publish failed at once: attempts ${refused.attempts}/${refused.max_attempts}, HTTP ${refused.http_status}, code ${refused.code}`);
    await waitFor(B, "tab B to see the failed publish", (u) => u.id === refused.id && u.status === "failed");

    if (!(await A.page.locator("#thumb").isDisabled())) {
      step("a volatile job: a closure in tab A's memory, never stored, with progress");
      await A.page.getByRole("button", { name: "Render thumbnail" }).click();
      await waitFor(A, "the thumbnail to render", (u) => u.label === "render thumbnail" && u.status === "done");
    } else {
      say("(volatile jobs: this pyjobq has no queue.enqueue yet; the thumbnail button is disabled)");
    }

    step("screenshot");
    await A.page.waitForTimeout(400);
    await A.page.screenshot({ path: path.join(ROOT, "build", "demo.png"), fullPage: true });
    say("saved build/demo.png (and build/demo-401.png: a save waiting out a 401)");
    ok = true;
  } catch (err) {
    console.error(`\ndemo failed: ${err && err.stack ? err.stack : err}`);
  } finally {
    if (EXIT) {
      await browser.close();
      server.kill();
    }
  }
  if (EXIT) process.exit(ok ? 0 : 1);
  await browser.close();
  console.log(`\nThe demo server is still running: open ${BASE}/demo/ in a browser (two tabs to see both). Ctrl-C to stop.`);
  const stop = () => { server.kill(); process.exit(ok ? 0 : 1); };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main();
