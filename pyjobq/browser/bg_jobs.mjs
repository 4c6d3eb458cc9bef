// <bg-jobs>: a live table of what the job queue is doing (spec: "Inspecting jobs").
//
// Theory of operation
// -------------------
// The element never touches IndexedDB or the channel. It talks to a *bridge* that
// pyjobq.ui.install() builds around the page's queue:
//   snapshot()          -> Promise<JSON text of query_all()>
//   subscribe(cb)       -> unsubscribe(); cb(JSON text of one job-update), from any tab
//   retry(id), remove(id), retry_all() -> Promise (the queue decides; we only ask)
// An element uses its own `bridge` property if one was set, else globalThis.__pyjobq_bridge.
//
// It subscribes before taking the snapshot, so no update falls between the two; records
// are merged by updated_at, and ids seen deleted stay deleted. Updates are batched into one
// render per animation frame. Rows are kept and patched in place (never rebuilt) so a
// focused button keeps its focus while the table changes around it. Data reaches the DOM
// only through textContent and attributes: labels and errors are text, never markup.

const STATUSES = ["pending", "running", "paused", "done", "failed", "cancelled"];
const RETRYABLE = new Set(["failed", "cancelled"]);
const BRIDGE_EVENT = "pyjobq:bridge";

const STYLE = `
:host {
  --bg-jobs-bg: #ffffff;
  --bg-jobs-fg: #1f2328;
  --bg-jobs-muted: #656d76;
  --bg-jobs-border: #d8dee4;
  --bg-jobs-stripe: #f6f8fa;
  --bg-jobs-accent: #0969da;
  display: block;
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--bg-jobs-fg);
}
@media (prefers-color-scheme: dark) {
  :host {
    --bg-jobs-bg: #0d1117; --bg-jobs-fg: #e6edf3; --bg-jobs-muted: #9198a1;
    --bg-jobs-border: #30363d; --bg-jobs-stripe: #161b22; --bg-jobs-accent: #4493f8;
  }
}
.panel { background: var(--bg-jobs-bg); border: 1px solid var(--bg-jobs-border); border-radius: 10px; overflow: hidden; }
.bar { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; padding: 12px; border-bottom: 1px solid var(--bg-jobs-border); text-align: left; font-weight: 400; }
.title { font-weight: 650; font-size: 15px; margin-right: 4px; }
.title .sub { font-weight: 400; color: var(--bg-jobs-muted); font-size: 12px; margin-left: 6px; }
.title .sub::before { content: ""; display: inline-block; width: 6px; height: 6px; border-radius: 50%; background: #1a7f37; margin-right: 4px; vertical-align: 1px; }
.title .sub.off::before { background: var(--bg-jobs-muted); }
.counts { display: flex; flex-wrap: wrap; gap: 6px; margin: 0; padding: 0; list-style: none; flex: 1; }
.counts li { display: inline-flex; align-items: center; gap: 6px; }
.counts li.zero { opacity: .45; }
.counts b { font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
caption { padding: 0; }
th, td { padding: 7px 12px; text-align: left; vertical-align: top; border-bottom: 1px solid var(--bg-jobs-border); }
thead th { font-size: 12px; font-weight: 600; color: var(--bg-jobs-muted); text-transform: uppercase; letter-spacing: .04em; white-space: nowrap; }
tbody tr:nth-child(even) { background: var(--bg-jobs-stripe); }
tbody tr:last-child > * { border-bottom: 0; }
tbody th { font-weight: 600; min-width: 14ch; }
.job-label { overflow-wrap: anywhere; }
.job-id { display: block; width: fit-content; font: 11px/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: var(--bg-jobs-muted); font-weight: 400; }
.scope { display: inline-block; margin-left: 6px; padding: 0 6px; border-radius: 999px; font-size: 11px; font-weight: 500; border: 1px solid var(--bg-jobs-border); color: var(--bg-jobs-muted); vertical-align: 1px; }
.type { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.pill { display: inline-flex; align-items: center; gap: 5px; padding: 1px 9px; border-radius: 999px; font-size: 12px; font-weight: 600; white-space: nowrap; border: 1px solid transparent; }
.pill::before { content: ""; width: 7px; height: 7px; border-radius: 50%; background: currentColor; }
.s-pending   { color: #7d4e00; background: #fff3c4; border-color: #f2d675; }
.s-running   { color: #0550ae; background: #ddf4ff; border-color: #9ecbff; }
.s-paused    { color: #6639ba; background: #f3e8ff; border-color: #d2b6f5; }
.s-done      { color: #116329; background: #dafbe1; border-color: #8ddb9e; }
.s-failed    { color: #a40e26; background: #ffebe9; border-color: #ffaba8; }
.s-cancelled { color: #57606a; background: #eef1f4; border-color: #d0d7de; }
@media (prefers-color-scheme: dark) {
  .s-pending   { color: #e3b341; background: #3b2e0a; border-color: #6c5314; }
  .s-running   { color: #79c0ff; background: #0c2d6b; border-color: #1f6feb; }
  .s-paused    { color: #d2a8ff; background: #2e1a52; border-color: #6e40c9; }
  .s-done      { color: #56d364; background: #0f2e1a; border-color: #238636; }
  .s-failed    { color: #ff7b72; background: #3d1114; border-color: #da3633; }
  .s-cancelled { color: #9198a1; background: #21262d; border-color: #3d444d; }
}
.s-running.pill::before { animation: pulse 1.2s ease-in-out infinite; }
@keyframes pulse { 50% { opacity: .25; } }
@media (prefers-reduced-motion: reduce) { .s-running.pill::before { animation: none; } }
.progress { display: flex; white-space: nowrap; align-items: center; gap: 6px; margin-top: 5px; font-size: 12px; color: var(--bg-jobs-muted); }
progress { width: 90px; height: 8px; accent-color: var(--bg-jobs-accent); }
.muted { color: var(--bg-jobs-muted); }
.error { max-width: 34ch; }
.error-msg { display: block; overflow-wrap: anywhere; color: var(--bg-jobs-fg); font-size: 13px; }
.code { display: inline-block; margin-right: 6px; padding: 0 5px; border-radius: 4px; font: 11px/1.6 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--bg-jobs-stripe); border: 1px solid var(--bg-jobs-border); }
.actions { white-space: nowrap; text-align: right; }
.when { white-space: nowrap; }
button { font: inherit; font-size: 13px; padding: 3px 10px; border-radius: 6px; border: 1px solid var(--bg-jobs-border); background: var(--bg-jobs-bg); color: var(--bg-jobs-fg); cursor: pointer; }
button:hover:not([aria-disabled="true"]) { border-color: var(--bg-jobs-muted); }
button:focus-visible { outline: 2px solid var(--bg-jobs-accent); outline-offset: 2px; }
button[aria-disabled="true"] { opacity: .5; cursor: default; }
button.retry { color: var(--bg-jobs-accent); }
button.delete { margin-left: 6px; }
button.delete:hover { color: #cf222e; border-color: #cf222e; }
.empty td { text-align: center; color: var(--bg-jobs-muted); padding: 22px 12px; }
.note { padding: 6px 12px; font-size: 13px; color: #a40e26; }
.note:empty { display: none; }
[hidden] { display: none !important; }
`;

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

/** The name a row is known by: its label, else its type and a short id. */
function jobName(job) {
  if (typeof job.label === "string" && job.label) return job.label;
  return `${job.type || "job"} ${String(job.id).slice(0, 8)}`;
}

function retryIn(job, now) {
  if (job.status === "paused") return job.yield_lock ? `when ${job.yield_lock} is free` : "type suspended";
  if (job.status !== "pending" || typeof job.next_retry_at !== "number") return "";
  const s = Math.ceil((job.next_retry_at - now) / 1000);
  if (s <= 0) return "due now";
  if (s < 90) return `in ${s} s`;
  const m = Math.floor(s / 60);
  return m < 90 ? `in ${m} min ${s % 60} s` : `in ${Math.round(m / 60)} h`;
}

function parse(text) {
  try { return typeof text === "string" ? JSON.parse(text) : text; } catch { return null; }
}

export class BgJobs extends HTMLElement {
  constructor() {
    super();
    this._jobs = new Map();      // id -> record (as last rendered or merged)
    this._rows = new Map();      // id -> row parts
    this._gone = new Set();      // ids seen deleted: a later snapshot must not revive them
    this._queued = new Map();    // id -> update waiting for the next frame
    this._frame = 0;
    this._tick = 0;
    this._unsubscribe = null;
    this._bridge = null;
    this._generation = 0;
    this._onBridge = () => { if (!this._own) this._connect(); };
    const root = this.attachShadow({ mode: "open" });
    root.append(el("style", { text: STYLE }));
    this._counts = el("ul", { class: "counts", "aria-label": "Jobs by status" });
    this._countItems = {};
    for (const s of STATUSES) {
      const n = el("b", { text: "0" });
      const li = el("li", { class: "zero" }, el("span", { class: `pill s-${s}`, text: s }), n);
      this._countItems[s] = { li, n };
      this._counts.append(li);
    }
    this._retryAll = el("button", { type: "button", class: "retry", "aria-label": "Retry all failed and cancelled jobs", text: "Retry all failed" });
    this._retryAll.setAttribute("aria-disabled", "true");
    this._retryAll.addEventListener("click", () => this._act(this._retryAll, () => this._bridge.retry_all()));
    this._sub = el("span", { class: "sub off", text: "connecting…" });
    this._title = el("span", { class: "title", id: "title" }, document.createTextNode("Background jobs"), this._sub);
    this._tbody = el("tbody");
    this._empty = el("tr", { class: "empty" }, el("td", { colspan: "7", text: "No jobs yet." }));
    this._tbody.append(this._empty);
    const head = el("tr");
    for (const h of ["Job", "Type", "Status", "Attempts", "Next retry", "Last error", "Actions"]) {
      head.append(el("th", { scope: "col", text: h }));
    }
    // The caption carries the counts and "Retry all"; the table is named by its title alone.
    this._note = el("div", { class: "note", role: "status" });
    this._table = el("table", { tabindex: "-1", "aria-labelledby": "title" },
      el("caption", {}, el("div", { class: "bar" }, this._title, this._counts, this._retryAll), this._note),
      el("thead", {}, head), this._tbody);
    root.append(el("div", { class: "panel", part: "panel" }, el("div", { class: "scroll" }, this._table)));
  }

  /** Set a bridge for this element only (instead of globalThis.__pyjobq_bridge). */
  set bridge(value) { this._own = value || null; if (this.isConnected) this._connect(); }
  get bridge() { return this._bridge; }

  connectedCallback() {
    globalThis.addEventListener(BRIDGE_EVENT, this._onBridge);
    this._connect();
    this._tick = setInterval(() => this._refreshTimes(), 1000);
  }

  disconnectedCallback() {
    globalThis.removeEventListener(BRIDGE_EVENT, this._onBridge);
    clearInterval(this._tick);
    this._disconnect();
  }

  _disconnect() {
    this._generation++;
    if (this._unsubscribe) { try { this._unsubscribe(); } catch { /* bridge already gone */ } }
    this._unsubscribe = null;
    if (this._frame) cancelAnimationFrame(this._frame);
    this._frame = 0;
  }

  async _connect() {
    this._disconnect();
    const bridge = this._own || globalThis.__pyjobq_bridge || null;
    this._bridge = bridge;
    if (!bridge) { this._sub.textContent = "waiting for the queue…"; this._sub.className = "sub off"; return; }
    const generation = this._generation;
    this._unsubscribe = bridge.subscribe((text) => {
      const job = parse(text);
      if (generation === this._generation && job && typeof job.id === "string") this._enqueue(job);
    });
    try {
      const records = parse(await bridge.snapshot()) || [];
      if (generation !== this._generation) return;
      for (const job of records) this._merge(job, true);
      this._sub.textContent = "live";
      this._sub.className = "sub";
      this._render();
    } catch (err) {
      this._sub.textContent = "";
      this._note.textContent = `Could not read the queue: ${err && err.message ? err.message : err}`;
    }
  }

  _enqueue(update) {
    const prev = this._queued.get(update.id);
    // A progress-only update patches whatever is already waiting for this frame.
    this._queued.set(update.id, prev && update.progress_only ? { ...prev, ...update, progress_only: prev.progress_only } : update);
    if (!this._frame) this._frame = requestAnimationFrame(() => this._flush());
  }

  _flush() {
    this._frame = 0;
    const batch = this._queued;
    this._queued = new Map();
    for (const update of batch.values()) this._merge(update, false);
    this._render();
  }

  _merge(job, fromSnapshot) {
    const id = job.id;
    if (job.deleted) { this._gone.add(id); this._jobs.delete(id); return; }
    if (this._gone.has(id)) {
      if (fromSnapshot) return;
      this._gone.delete(id); // an update after the delete: a job filed again under its id
    }
    const cur = this._jobs.get(id);
    if (job.progress_only) {
      if (cur && cur.status !== "running") return; // late progress for a run that has ended
      this._jobs.set(id, { ...(cur || { id, type: "", attempts: 0 }), status: "running",
        progress: job.progress, progress_note: job.progress_note });
      return;
    }
    if (cur && typeof cur.updated_at === "number" && typeof job.updated_at === "number"
        && job.updated_at < cur.updated_at) return; // older news than what we show
    const next = { ...job };
    if (cur && cur.status === "running" && job.status === "running" && next.progress === undefined) {
      next.progress = cur.progress;
      next.progress_note = cur.progress_note;
    }
    this._jobs.set(id, next);
  }

  _ordered() {
    // Newest first: what just happened is what the reader came to see.
    return [...this._jobs.values()].sort((a, b) =>
      (b.created_at || 0) - (a.created_at || 0) || String(a.id).localeCompare(String(b.id)));
  }

  _render() {
    const root = this.shadowRoot;
    const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
    for (const job of this._jobs.values()) if (job.status in counts) counts[job.status]++;
    for (const s of STATUSES) {
      const { li, n } = this._countItems[s];
      n.textContent = String(counts[s]);
      li.classList.toggle("zero", counts[s] === 0);
    }
    const revivable = counts.failed + counts.cancelled;
    this._retryAll.setAttribute("aria-disabled", String(revivable === 0));
    this._retryAll.textContent = revivable ? `Retry all failed (${revivable})` : "Retry all failed";

    // Rows whose job is gone: if focus was inside, hand it to a neighbour.
    for (const [id, row] of this._rows) {
      if (this._jobs.has(id)) continue;
      const hadFocus = row.tr.contains(root.activeElement);
      const neighbour = row.tr.nextElementSibling || row.tr.previousElementSibling;
      row.tr.remove();
      this._rows.delete(id);
      if (hadFocus) {
        const target = neighbour && neighbour.querySelector("button:not([hidden])");
        (target || this._table).focus();
      }
    }
    const now = Date.now();
    const ordered = this._ordered();
    ordered.forEach((job, i) => {
      let row = this._rows.get(job.id);
      if (!row) { row = this._makeRow(job.id); this._rows.set(job.id, row); }
      this._fill(row, job, now);
      const at = this._tbody.children[i];
      if (at !== row.tr) this._tbody.insertBefore(row.tr, at || null);
    });
    this._empty.hidden = ordered.length > 0;
    if (ordered.length) this._tbody.append(this._empty);
    this.dispatchEvent(new CustomEvent("bg-jobs-render", { detail: { counts } }));
  }

  _makeRow(id) {
    const r = {};
    r.label = el("span", { class: "job-label" });
    r.scope = el("span", { class: "scope", text: "this tab", title: "A volatile job: it lives in this tab only" });
    r.id = el("span", { class: "job-id" });
    r.type = el("span", { class: "type" });
    r.pill = el("span", { class: "pill" });
    r.bar = el("progress", { max: "1" });
    r.pct = el("span");
    r.progress = el("div", { class: "progress" }, r.bar, r.pct);
    r.attempts = el("td");
    r.retryIn = el("td", { class: "when" });
    r.code = el("span", { class: "code" });
    r.http = el("span", { class: "code" });
    r.msg = el("span", { class: "error-msg" });
    r.error = el("td", { class: "error" }, r.code, r.http, r.msg);
    r.retry = el("button", { type: "button", class: "retry", text: "Retry" });
    r.del = el("button", { type: "button", class: "delete", text: "Delete" });
    r.retry.addEventListener("click", () => this._act(r.retry, () => this._bridge.retry(id)));
    r.del.addEventListener("click", () => this._act(r.del, () => this._bridge.remove(id)));
    r.tr = el("tr", { "data-job-id": id },
      el("th", { scope: "row" }, r.label, r.scope, r.id),
      el("td", {}, r.type),
      el("td", {}, r.pill, r.progress),
      r.attempts,
      r.retryIn,
      r.error,
      el("td", { class: "actions" }, r.retry, r.del));
    return r;
  }

  _fill(r, job, now) {
    const name = jobName(job);
    r.tr.dataset.status = job.status;
    r.label.textContent = name;
    r.scope.hidden = job.volatile !== true;
    r.id.textContent = String(job.id).slice(0, 12);
    r.id.title = String(job.id);
    r.type.textContent = job.type || "";
    r.pill.className = `pill s-${STATUSES.includes(job.status) ? job.status : "cancelled"}`;
    r.pill.textContent = String(job.status);
    const hasProgress = typeof job.progress === "number" && job.status === "running";
    r.progress.hidden = !hasProgress;
    if (hasProgress) {
      const p = Math.min(1, Math.max(0, job.progress));
      r.bar.value = p;
      r.bar.setAttribute("aria-label", `Progress of ${name}`);
      r.pct.textContent = `${Math.round(p * 100)}%` + (job.progress_note ? ` · ${job.progress_note}` : "");
    }
    r.attempts.textContent = `${job.attempts ?? 0} / ${job.max_attempts ?? "?"}`;
    r.retryIn.textContent = retryIn(job, now) || "—";
    r.retryIn.className = retryIn(job, now) ? "when" : "when muted";
    const failedish = job.status !== "done" && (job.error || job.code || job.http_status);
    r.code.hidden = !(failedish && job.code);
    r.code.textContent = job.code ? String(job.code) : "";
    r.http.hidden = !(failedish && job.http_status);
    r.http.textContent = job.http_status ? `HTTP ${job.http_status}` : "";
    r.http.title = r.http.textContent;
    // "cancelled" / "deleted" say no more than their code: show the code alone.
    r.msg.textContent = failedish && job.error && job.error !== job.code ? String(job.error) : "";
    if (!failedish) r.msg.textContent = "—";
    r.msg.className = failedish ? "error-msg" : "error-msg muted";
    const retryable = RETRYABLE.has(job.status);
    // Hiding a focused button would drop focus on the floor: hand it to Delete first.
    if (!retryable && this.shadowRoot.activeElement === r.retry) r.del.focus();
    r.retry.hidden = !retryable;
    r.retry.setAttribute("aria-label", `Retry ${name}`);
    r.del.setAttribute("aria-label", `Delete ${name}`);
  }

  _refreshTimes() {
    const now = Date.now();
    for (const [id, row] of this._rows) {
      const job = this._jobs.get(id);
      if (!job) continue;
      const text = retryIn(job, now);
      row.retryIn.textContent = text || "—";
      row.retryIn.className = text ? "when" : "when muted";
    }
  }

  // Buttons are never `disabled` while busy: disabling a focused button drops focus (the
  // focus fixup rule), so keyboard users would be thrown back to the top of the page.
  async _act(button, action) {
    if (!this._bridge || button.getAttribute("aria-disabled") === "true" || button.dataset.busy) return;
    button.dataset.busy = "1";
    button.setAttribute("aria-busy", "true");
    this._note.textContent = "";
    try {
      await action();
    } catch (err) {
      this._note.textContent = `The queue refused: ${err && err.message ? err.message : err}`;
    } finally {
      delete button.dataset.busy;
      button.removeAttribute("aria-busy");
    }
  }
}

/** Make a bridge object around the Python side's single entry point.
 *
 * `call(op, arg, resolve, reject)` runs a queue operation and settles with JSON text.
 * The Python side calls `bridge.emit(text)` for every job-update. */
export function makeBridge(call) {
  const listeners = new Set();
  const ask = (op, arg) => new Promise((resolve, reject) => call(op, arg ?? null, resolve, reject));
  return {
    snapshot: () => ask("snapshot"),
    subscribe(callback) {
      listeners.add(callback);
      return () => listeners.delete(callback);
    },
    retry: (id) => ask("retry", String(id)),
    remove: (id) => ask("remove", String(id)),
    retry_all: () => ask("retry_all"),
    emit(text) {
      for (const cb of [...listeners]) {
        try { cb(text); } catch (err) { console.error("<bg-jobs> listener failed", err); }
      }
    },
    get listenerCount() { return listeners.size; },
  };
}

/** Expose the bridge to every <bg-jobs> and define the element (once per page). */
export function install(bridge) {
  globalThis.__pyjobq_bridge = bridge;
  if (!customElements.get("bg-jobs")) customElements.define("bg-jobs", BgJobs);
  globalThis.dispatchEvent(new Event(BRIDGE_EVENT));
}

/** Detach the bridge: elements keep their last rows and stop receiving updates. */
export function uninstall(bridge) {
  if (globalThis.__pyjobq_bridge === bridge) delete globalThis.__pyjobq_bridge;
  globalThis.dispatchEvent(new Event(BRIDGE_EVENT));
}
