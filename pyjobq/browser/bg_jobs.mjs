// <bg-jobs>: a live table of what the job queue is doing (spec: "Inspecting jobs").
//
// Theory of operation
// -------------------
// The element never touches IndexedDB or the channel. It talks to a *bridge* that
// pyjobq.ui.install() builds around the page's queue:
//   snapshot()          -> Promise<JSON text of query_all()>
//   recheck(text)       -> Promise<JSON text: of the rows given and the ids news asked about
//                          ({shown: {id: {status, updated_at}}, asked: {id: news or null}}),
//                          each whose record says more (that record) or is gone (null)
//   subscribe(cb)       -> unsubscribe(); cb(JSON text of one job-update), from any tab
//   retry(id), remove(id), retry_all() -> Promise (the queue decides; we only ask)
//   definition          the table: columns, status labels and colours (pyjobq.core.jobs_table)
//   cells(jobs, now)    -> every column's value for those jobs, computed by Python, at once
// An element uses its own `bridge` property if one was set, else globalThis.__pyjobq_bridge.
//
// What the table shows is Python's, the same definition the notebook table (jobs_html) draws:
// this module holds no status list, heading or wording of its own. It builds each column's
// parts (COLUMN_VIEWS, by the definition's keys) and writes the cells Python computed into them.
//
// It subscribes before taking the snapshot, so no update falls between the two; records
// are merged by updated_at, and ids seen deleted stay deleted. News is any same-origin
// script's word (anyone can post on the channel): news of an end, a deletion or a finished
// job running again is never drawn; it asks the bridge to read that job's record (recheck's
// `asked`), and what the store says is drawn. News of a job the table did not know is drawn
// and read too (no record: the row leaves). At most definition.max_unconfirmed ids wait for
// that read; beyond, the oldest are let go, with a row only news told of. The store is the truth: news of
// an end or a delete is lost for good when the tab that stored it crashed or froze before
// broadcasting it, so while a row shows an unfinished job the element asks the bridge for those
// rows' records again every definition.recheck_ms (recheck: pyjobq.notebook.read_again, never
// the finished records). A record that says more (Python decides: read_is_news) replaces the
// row, a row whose record is gone leaves, and a row news named while it was read is left to
// that news. Updates are batched into one
// render per animation frame, which asks Python once for the cells of the rows that changed.
// Rows are kept and patched in place (never rebuilt) so a focused button keeps its focus
// while the table changes around it. Data reaches the DOM only through textContent and
// attributes: labels and errors are text, never markup.

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
@media (prefers-reduced-motion: reduce) { .pill::before { animation: none !important; } }
@keyframes pulse { 50% { opacity: .25; } }
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

function parse(text) {
  try { return typeof text === "string" ? JSON.parse(text) : text; } catch { return null; }
}

/** The pills' colours, from the definition's status looks (light, then dark). */
function statusStyle(statuses) {
  const rules = (scheme) => statuses.map(({ status, [scheme]: c }) =>
    `.s-${status} { color: ${c.text}; background: ${c.background}; border-color: ${c.border}; }`).join("\n");
  const pulse = statuses.filter((s) => s.pulse)
    .map((s) => `.s-${s.status}.pill::before { animation: pulse 1.2s ease-in-out infinite; }`).join("\n");
  return `${rules("light")}\n@media (prefers-color-scheme: dark) {\n${rules("dark")}\n}\n${pulse}`;
}

/** Each column's parts, by the definition's keys: `make` builds the cell, `fill` writes a
 *  row's value for it (what Python's jobs_table.cells computed) into it. */
const COLUMN_VIEWS = {
  job: {
    make(r) {
      r.label = el("span", { class: "job-label" });
      r.scope = el("span", { class: "scope" });
      r.id = el("span", { class: "job-id" });
      return el("th", { scope: "row" }, r.label, r.scope, r.id);
    },
    fill(r, c, definition) {
      r.label.textContent = c.name;
      r.scope.hidden = !c.scope;
      r.scope.textContent = c.scope;
      r.scope.title = definition.volatile_note;
      r.id.textContent = c.short_id;
      r.id.title = c.id;
    },
  },
  type: {
    make(r) { r.type = el("span", { class: "type" }); return el("td", {}, r.type); },
    fill(r, c) { r.type.textContent = c; },
  },
  status: {
    make(r) {
      r.pill = el("span", { class: "pill" });
      r.bar = el("progress", { max: "1" });
      r.pct = el("span");
      r.progress = el("div", { class: "progress" }, r.bar, r.pct);
      return el("td", {}, r.pill, r.progress);
    },
    fill(r, c, _definition, name) {
      r.pill.className = `pill s-${c.look}`;
      r.pill.textContent = c.label;
      r.progress.hidden = c.progress === null;
      if (c.progress !== null) {
        r.bar.value = c.progress;
        r.bar.setAttribute("aria-label", `Progress of ${name}`);
        r.pct.textContent = c.progress_text;
      }
    },
  },
  attempts: {
    make(r) { r.attempts = el("td"); return r.attempts; },
    fill(r, c) { r.attempts.textContent = c; },
  },
  retry: {
    make(r) { r.retryIn = el("td", { class: "when" }); return r.retryIn; },
    fill(r, c, definition) {
      r.retryIn.textContent = c || definition.no_value;
      r.retryIn.className = c ? "when" : "when muted";
    },
  },
  error: {
    make(r) {
      r.code = el("span", { class: "code" });
      r.http = el("span", { class: "code" });
      r.msg = el("span", { class: "error-msg" });
      return el("td", { class: "error" }, r.code, r.http, r.msg);
    },
    fill(r, c, definition) {
      r.code.hidden = !(c && c.code);
      r.code.textContent = c ? c.code : "";
      r.http.hidden = !(c && c.http);
      r.http.textContent = c ? c.http : "";
      r.http.title = r.http.textContent;
      r.msg.textContent = c ? c.message : definition.no_value;
      r.msg.className = c ? "error-msg" : "error-msg muted";
    },
  },
  actions: {
    make(r, id, host) {
      r.retry = el("button", { type: "button", class: "retry", text: "Retry" });
      r.del = el("button", { type: "button", class: "delete", text: "Delete" });
      r.retry.addEventListener("click", () => host._act(r.retry, () => host._bridge.retry(id)));
      r.del.addEventListener("click", () => host._act(r.del, () => host._bridge.remove(id)));
      return el("td", { class: "actions" }, r.retry, r.del);
    },
    fill(r, c, _definition, name, host) {
      // Hiding a focused button would drop focus on the floor: hand it to Delete first.
      if (!c.retry && host.shadowRoot.activeElement === r.retry) r.del.focus();
      r.retry.hidden = !c.retry;
      r.retry.setAttribute("aria-label", `Retry ${name}`);
      r.del.setAttribute("aria-label", `Delete ${name}`);
    },
  },
};

export class BgJobs extends HTMLElement {
  constructor() {
    super();
    this._jobs = new Map();      // id -> record (as last rendered or merged)
    this._rows = new Map();      // id -> row parts
    this._dirty = new Set();     // ids whose row must be filled again at the next render
    this._gone = new Set();      // ids seen deleted: a later snapshot must not revive them
    this._queued = new Map();    // id -> update waiting for the next frame
    this._frame = 0;
    this._tick = 0;
    this._unsubscribe = null;
    this._bridge = null;
    this._definition = null;     // what the head, counts and rows were built from
    this._generation = 0;
    this._recheck = 0;           // the next recheck's timer, while connected
    this._heardSince = null;     // ids news named while a recheck's read was under way
    this._asked = new Map();     // id -> news of its end (or null): what the next read confirms
    this._heardOnly = new Set(); // ids of rows only news told of: no read has confirmed them
    this._reading = false;       // one read at a time: each begins after the one before ended
    this._onBridge = () => { if (!this._own) this._connect(); };
    const root = this.attachShadow({ mode: "open" });
    this._statusStyle = el("style");
    root.append(el("style", { text: STYLE }), this._statusStyle);
    this._counts = el("ul", { class: "counts", "aria-label": "Jobs by status" });
    this._countItems = {};
    this._retryAll = el("button", { type: "button", class: "retry", "aria-label": "Retry all failed and cancelled jobs", text: "Retry all failed" });
    this._retryAll.setAttribute("aria-disabled", "true");
    this._retryAll.addEventListener("click", () => this._act(this._retryAll, () => this._bridge.retry_all()));
    this._sub = el("span", { class: "sub off", text: "connecting…" });
    this._name = document.createTextNode("");
    this._title = el("span", { class: "title", id: "title" }, this._name, this._sub);
    this._tbody = el("tbody");
    this._emptyCell = el("td");
    this._empty = el("tr", { class: "empty" }, this._emptyCell);
    this._tbody.append(this._empty);
    this._head = el("tr");
    // The caption carries the counts and "Retry all"; the table is named by its title alone.
    this._note = el("div", { class: "note", role: "status" });
    this._table = el("table", { tabindex: "-1", "aria-labelledby": "title" },
      el("caption", {}, el("div", { class: "bar" }, this._title, this._counts, this._retryAll), this._note),
      el("thead", {}, this._head), this._tbody);
    root.append(el("div", { class: "panel", part: "panel" }, el("div", { class: "scroll" }, this._table)));
  }

  /** Build the head, the counts and the pills' colours from a bridge's definition. */
  _define(definition) {
    if (!definition || definition === this._definition) return;
    this._definition = definition;
    this._name.textContent = definition.title;
    this._statusStyle.textContent = statusStyle(definition.statuses);
    this._head.replaceChildren(...definition.columns.map((c) => el("th", { scope: "col", text: c.heading })));
    this._emptyCell.setAttribute("colspan", String(definition.columns.length));
    this._emptyCell.textContent = definition.empty;
    this._countItems = {};
    this._counts.replaceChildren(...definition.statuses.map(({ status, label }) => {
      const n = el("b", { text: "0" });
      const li = el("li", { class: "zero" }, el("span", { class: `pill s-${status}`, text: label }), n);
      this._countItems[status] = { li, n };
      return li;
    }));
    // Rows were built for the columns of the definition before: build them again.
    for (const row of this._rows.values()) row.tr.remove();
    this._rows.clear();
  }

  /** Python's cells for `jobs` at `now`, in order; null when the bridge cannot answer. */
  _cellsOf(jobs, now) {
    if (!jobs.length) return [];
    try {
      return JSON.parse(this._bridge.cells(JSON.stringify(jobs), now));
    } catch (err) {
      this._note.textContent = `Could not draw the table: ${err && err.message ? err.message : err}`;
      return null;
    }
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
    clearTimeout(this._recheck);
    this._recheck = 0;
    this._heardSince = null;
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
    this._define(bridge.definition);
    const generation = this._generation;
    this._unsubscribe = bridge.subscribe((text) => {
      const job = parse(text);
      if (generation !== this._generation || !job || typeof job.id !== "string") return;
      if (this._heardSince) this._heardSince.add(job.id);
      this._enqueue(job);
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

  /** Arm the next read of the unfinished rows (see the header), unless one is armed. */
  _armRecheck(generation) {
    const ms = this._definition && this._definition.recheck_ms;
    if (!this._recheck && ms > 0 && generation === this._generation && this._bridge) {
      this._recheck = setTimeout(() => { this._recheck = 0; this._checkAgain(generation); }, ms);
    }
  }

  /** Ask the next read about `id` (`news`: the end it was told of; see the header). */
  _ask(id, news) {
    if (news === null && this._asked.has(id)) return; // read for the end it was told of
    this._asked.delete(id);
    this._asked.set(id, news);
    const most = (this._definition && this._definition.max_unconfirmed) || 1000;
    for (const old of this._asked.keys()) {
      if (this._asked.size <= most) break;
      this._asked.delete(old);
      if (this._heardOnly.delete(old)) this._jobs.delete(old);
    }
    if (!this._reading) setTimeout(() => this._checkAgain(this._generation, false), 0);
  }

  /** One read of the store (see the header), each given one period to answer: `periodic`, of
   *  the unfinished rows' records (with none it stops: a render that draws one arms it), and
   *  always of every id news asked about. */
  async _checkAgain(generation, periodic = true) {
    const bridge = this._bridge;
    if (generation !== this._generation || !bridge || typeof bridge.recheck !== "function") return;
    if (this._reading) { if (periodic) this._armRecheck(generation); return; }
    const finished = new Set(this._definition.finished);
    const rows = periodic ? [...this._jobs.values()].filter((job) => !finished.has(job.status)) : [];
    const asked = this._asked;
    if (!rows.length && !asked.size) return;
    this._asked = new Map();
    const ids = new Set([...rows.map((job) => job.id), ...asked.keys()]);
    const shown = Object.fromEntries([...ids].filter((id) => this._jobs.has(id)).map((id) => {
      const job = this._jobs.get(id);
      return [id, { status: job.status, updated_at: job.updated_at, volatile: job.volatile }];
    }));
    const heard = this._heardSince = new Set(this._queued.keys());
    this._reading = true;
    let found = null;
    let timer = 0;
    try {
      const request = JSON.stringify({ shown, asked: Object.fromEntries(asked) });
      found = parse(await Promise.race([bridge.recheck(request), new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("no answer")), this._definition.recheck_ms);
      })]));
    } catch { /* the store could not be read now: the next period (or news) reads again */ }
    clearTimeout(timer);
    this._reading = false;
    if (this._heardSince === heard) this._heardSince = null;
    if (generation !== this._generation) return;
    const answered = found && typeof found === "object";
    let changed = false;
    for (const [id, news] of asked) { // unanswered, or named by news meanwhile: asked again
      if (!answered || heard.has(id)) this._ask(id, news);
      else this._heardOnly.delete(id); // read: what it says (or nothing new) stands
    }
    for (const [id, job] of Object.entries(answered ? found : {})) {
      if (!ids.has(id) || heard.has(id)) continue; // news came: newer
      if (job === null) { // no record: deleted (its news lost), or never filed
        if (this._jobs.delete(id)) { this._gone.add(id); changed = true; }
      } else if (this._jobs.has(id) || asked.has(id)) {
        this._gone.delete(id);
        this._jobs.set(id, { ...job });
        this._dirty.add(id);
        changed = true;
      }
    }
    if (changed) this._render();
    if (periodic) this._armRecheck(generation);
    if (this._asked.size && !this._reading) this._checkAgain(generation, false);
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
    const cur = this._jobs.get(id);
    if (fromSnapshot) {
      if (this._gone.has(id)) return;
      this._heardOnly.delete(id);
    } else {
      const finished = this._definition.finished;
      if (job.progress_only && cur && finished.includes(cur.status)) return; // its run ended
      if (job.deleted || finished.includes(job.status) || (cur && finished.includes(cur.status))) {
        this._ask(id, job); // news of an end: drawn once the store says so
        return;
      }
      if (!cur) { this._heardOnly.add(id); this._ask(id, null); }
    }
    if (job.progress_only) {
      if (cur && cur.status !== "running") return; // late progress for a run that has ended
      this._jobs.set(id, { ...(cur || { id, type: "", attempts: 0 }), status: "running",
        progress: job.progress, progress_note: job.progress_note });
      this._dirty.add(id);
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
    this._dirty.add(id);
  }

  _ordered() {
    // Newest first: what just happened is what the reader came to see.
    const at = (job) => (Number.isFinite(job.created_at) ? job.created_at : 0);
    return [...this._jobs.values()].sort((a, b) =>
      at(b) - at(a) || String(a.id).localeCompare(String(b.id)));
  }

  _render() {
    const definition = this._definition;
    if (!definition) return;
    const root = this.shadowRoot;
    const counts = Object.fromEntries(definition.statuses.map((s) => [s.status, 0]));
    for (const job of this._jobs.values()) if (job.status in counts) counts[job.status]++;
    if (!this._recheck && definition.finished
        && [...this._jobs.values()].some((job) => !definition.finished.includes(job.status))) {
      this._armRecheck(this._generation); // an unfinished row: its record is read again in a period
    }
    for (const [status, { li, n }] of Object.entries(this._countItems)) {
      n.textContent = String(counts[status]);
      li.classList.toggle("zero", counts[status] === 0);
    }
    const revivable = definition.retryable.reduce((sum, status) => sum + counts[status], 0);
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
    const ordered = this._ordered();
    // One ask of Python per frame, for the rows that changed; the others stay as drawn.
    const changed = ordered.filter((job) => this._dirty.has(job.id) || !this._rows.has(job.id));
    const cells = this._cellsOf(changed, Date.now());
    if (cells) {
      changed.forEach((job, i) => {
        let row = this._rows.get(job.id);
        if (!row) { row = this._makeRow(job.id); this._rows.set(job.id, row); }
        this._fill(row, job, cells[i]);
      });
      this._dirty.clear();
    }
    let i = 0;
    for (const job of ordered) {
      const row = this._rows.get(job.id);
      if (!row) continue; // not drawn yet: the bridge could not answer
      const at = this._tbody.children[i++];
      if (at !== row.tr) this._tbody.insertBefore(row.tr, at || null);
    }
    this._empty.hidden = this._rows.size > 0;
    if (this._rows.size) this._tbody.append(this._empty);
    this.dispatchEvent(new CustomEvent("bg-jobs-render", { detail: { counts } }));
  }

  _makeRow(id) {
    const r = { ticks: false };
    r.tr = el("tr", { "data-job-id": id });
    for (const column of this._definition.columns) {
      const view = COLUMN_VIEWS[column.key];
      r.tr.append(view ? view.make(r, id, this) : el("td"));
    }
    return r;
  }

  _fill(r, job, cells) {
    r.tr.dataset.status = job.status;
    r.ticks = cells.ticks;
    for (const column of this._definition.columns) {
      const view = COLUMN_VIEWS[column.key];
      if (view) view.fill(r, cells[column.key], this._definition, cells.job.name, this);
    }
  }

  /** Redraw the countdowns: the rows whose retry cell changes with time alone. */
  _refreshTimes() {
    if (!this._bridge || !this._definition) return;
    const ticking = [...this._rows].filter(([id, row]) => row.ticks && this._jobs.has(id));
    const cells = this._cellsOf(ticking.map(([id]) => this._jobs.get(id)), Date.now());
    if (!cells) return;
    ticking.forEach(([, row], i) => {
      row.ticks = cells[i].ticks;
      COLUMN_VIEWS.retry.fill(row, cells[i].retry, this._definition);
    });
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

/** Make a bridge object around the Python side's two entry points and its table.
 *
 * `call(op, arg, resolve, reject)` runs a queue operation and settles with JSON text.
 * `cells(jobsText, now)` returns, synchronously, the JSON text of those jobs' cells.
 * `definitionText` is the JSON of the table's definition (pyjobq.core.jobs_table).
 * The Python side calls `bridge.emit(text)` for every job-update. */
export function makeBridge(call, cells, definitionText) {
  const listeners = new Set();
  const ask = (op, arg) => new Promise((resolve, reject) => call(op, arg ?? null, resolve, reject));
  return {
    snapshot: () => ask("snapshot"),
    recheck: (rowsText) => ask("recheck", rowsText),
    subscribe(callback) {
      listeners.add(callback);
      return () => listeners.delete(callback);
    },
    retry: (id) => ask("retry", String(id)),
    remove: (id) => ask("remove", String(id)),
    retry_all: () => ask("retry_all"),
    definition: JSON.parse(definitionText),
    cells: (jobsText, now) => cells(jobsText, now),
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
