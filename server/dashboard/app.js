// switchyard's operator dashboard: signs in with the admin token (kept in
// this tab's sessionStorage, sent as a bearer token, never in a URL), then
// reads /admin/api/overview every second and draws it. Everything a node
// or a client sent (names, reasons, messages) is written with textContent,
// never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "switchyard.adminToken";
  const POLL_MS = 1000;
  const STALE_MS = 3500;

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let timer = null;
  let lastOK = 0;
  let generation = 0; // bumped at sign-out: late answers of an old session are dropped
  let last = null;

  // ---- small DOM helpers -------------------------------------------------

  function el(tag, props, ...children) {
    const n = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === "class") n.className = v;
        else if (k === "text") n.textContent = v;
        else if (k === "title") n.title = v;
        else if (k.startsWith("data-")) n.setAttribute(k, v);
        else if (k === "onclick") n.addEventListener("click", v);
        else n.setAttribute(k, v);
      }
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return n;
  }

  function setText(node, text) {
    const t = String(text);
    if (node.textContent !== t) node.textContent = t;
  }

  // Keeps a table body's rows in step with items by key: rows are updated
  // in place, so a button under the pointer is not replaced mid-click.
  function syncRows(tbody, items, key, create, update, empty) {
    const rows = new Map();
    for (const tr of Array.from(tbody.children)) {
      if (tr.dataset.key) rows.set(tr.dataset.key, tr);
      else tr.remove();
    }
    if (items.length === 0) {
      tbody.replaceChildren(empty());
      return;
    }
    let prev = null;
    const keep = new Set();
    for (const item of items) {
      const k = key(item);
      keep.add(k);
      let tr = rows.get(k);
      if (!tr) {
        tr = create(item);
        tr.dataset.key = k;
      }
      update(tr, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const [k, tr] of rows) if (!keep.has(k)) tr.remove();
  }

  function emptyRow(cols, title, note) {
    return el("tr", { class: "empty" },
      el("td", { colspan: String(cols) }, el("div", { class: "empty-title", text: title }), note ? el("div", { text: note }) : null));
  }

  function pill(kind, text, title) {
    return el("span", { class: "pill pill-" + kind, text: text, title: title });
  }

  // ---- formatting -----------------------------------------------------------

  function fmtMs(ms) {
    if (!ms || ms <= 0) return "–";
    if (ms < 1) return "<1 ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    return Math.round(ms / 60000) + " min";
  }

  function fmtUptime(s) {
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d > 0) return d + "d " + (h % 24) + "h";
    if (h > 0) return h + "h " + (m % 60) + "m";
    return m + "m " + (s % 60) + "s";
  }

  function fmtPct(x) {
    if (x === 0) return "0%";
    const p = x * 100;
    return (p < 10 ? p.toFixed(1) : Math.round(p)) + "%";
  }

  function fmtTime(iso) {
    const d = new Date(iso);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  function fmtAgo(iso) {
    const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    return Math.floor(s / 3600) + " h ago";
  }

  function short(id) {
    return id && id.length > 12 ? id.slice(0, 8) + "…" : (id || "");
  }

  // ---- sign-in ----------------------------------------------------------------

  function showSignIn(message) {
    $("dash").hidden = true;
    $("topbar-right").hidden = true;
    $("signin").hidden = false;
    const err = $("signin-error");
    err.hidden = !message;
    err.textContent = message || "";
    $("signin-token").value = "";
    $("signin-token").focus();
  }

  function showDash() {
    $("signin").hidden = true;
    $("dash").hidden = false;
    $("topbar-right").hidden = false;
    clearTimeout(usageTimer);
    pollUsage();
  }

  function signOut(message) {
    generation++;
    clearTimeout(timer);
    clearTimeout(usageTimer);
    timer = null;
    token = "";
    last = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn(message);
  }

  async function fetchOverview(tok) {
    const resp = await fetch("/admin/api/overview", {
      headers: { Authorization: "Bearer " + tok, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
    });
    let body = null;
    try { body = await resp.json(); } catch (_) { /* not JSON: a proxy's page */ }
    return { status: resp.status, body: body, retryAfter: resp.headers.get("Retry-After") };
  }

  function errorText(r) {
    if (r.status === 401) return "That token was not accepted.";
    if (r.status === 429) return "Too many failed attempts from this address; try again in " + (r.retryAfter || "a few") + " s.";
    if (r.status === 404) return "This instance has no admin token set, so the dashboard has no data.";
    const msg = r.body && r.body.error && r.body.error.message;
    return "The server answered " + r.status + (msg ? ": " + msg : ".");
  }

  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const tok = $("signin-token").value.trim();
    if (!tok) return;
    const btn = $("signin-submit");
    btn.disabled = true;
    btn.textContent = "Signing in…";
    try {
      const r = await fetchOverview(tok);
      if (r.status !== 200 || !r.body) {
        showSignIn(errorText(r));
        return;
      }
      token = tok;
      sessionStorage.setItem(TOKEN_KEY, tok);
      generation++;
      showDash();
      accept(r.body);
      schedule();
    } catch (e) {
      showSignIn("Cannot reach the server.");
    } finally {
      btn.disabled = false;
      btn.textContent = "Sign in";
    }
  });

  $("signout").addEventListener("click", () => signOut(""));

  // ---- polling -------------------------------------------------------------

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }

  async function poll() {
    const gen = generation;
    try {
      const r = await fetchOverview(token);
      if (gen !== generation) return;
      if (r.status === 401) {
        signOut("The admin token is no longer accepted; sign in again.");
        return;
      }
      if (r.status === 200 && r.body) accept(r.body);
    } catch (_) {
      // The instance is restarting or the network dropped: keep the last
      // picture, say it is stale, and keep asking.
    }
    if (gen !== generation) return;
    updateLive();
    schedule();
  }

  function accept(data) {
    lastOK = Date.now();
    last = data;
    render(data);
    updateLive();
  }

  function updateLive() {
    const live = $("live");
    const ok = lastOK && Date.now() - lastOK < STALE_MS;
    live.classList.toggle("ok", !!ok);
    live.classList.toggle("stale", !ok);
    setText($("live-text"), ok ? "Live · " + fmtTime(new Date(lastOK).toISOString()) : "Reconnecting…");
  }

  // ---- node actions ------------------------------------------------------------

  let toastTimer = null;
  function toast(text, isError) {
    const t = $("toast");
    t.textContent = text;
    t.classList.toggle("error", !!isError);
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, 3500);
  }

  async function nodeAction(node, action, button) {
    button.disabled = true;
    try {
      const resp = await fetch("/api/v1/nodes/" + encodeURIComponent(node.node_id) + "/" + action, {
        method: "POST",
        headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
        body: JSON.stringify({ reason: "from the dashboard" }),
        credentials: "omit",
      });
      if (resp.ok) {
        const verb = { pause: "Paused", resume: "Resumed", drain: "Draining" }[action];
        toast(verb + " " + node.name + (resp.status === 202 ? " (sent to its instance)" : ""));
        clearTimeout(timer);
        poll(); // show the new state now, not in a second
        return;
      }
      let msg = "HTTP " + resp.status;
      try {
        const b = await resp.json();
        if (b && b.error && b.error.message) msg = b.error.message;
      } catch (_) { /* keep the status */ }
      toast("Cannot " + action + " " + node.name + ": " + msg, true);
    } catch (_) {
      toast("Cannot reach the server.", true);
    } finally {
      button.disabled = false;
    }
  }

  // ---- rendering ----------------------------------------------------------------

  // instanceLabels names each instance; names shared by several (the
  // default is the host name) get the end of the instance id, which is
  // random (the start of a UUIDv7 is its time).
  let instanceLabels = new Map();
  function labelInstances(insts) {
    const count = new Map();
    for (const i of insts) count.set(i.name, (count.get(i.name) || 0) + 1);
    instanceLabels = new Map(insts.map((i) => [i.id, count.get(i.name) > 1 ? i.name + " · " + i.id.slice(-4) : i.name]));
  }
  function instanceLabel(id, name) {
    return instanceLabels.get(id) || name || short(id);
  }

  function render(d) {
    labelInstances(d.instances || []);
    renderSummary(d);
    renderNodes(d.nodes || []);
    renderTypes(d.task_types || []);
    renderInstances(d.instances || []);
    renderFailures(d.failures || []);
    const banner = $("banner");
    const warnings = d.warnings || [];
    banner.hidden = warnings.length === 0;
    setText(banner, warnings.join(" · "));
    const self = (d.instances || []).find((i) => i.self);
    setText($("footnote"), self ? "Answered by " + self.name + " (" + self.addr + ", " + self.version + ") · refreshes every second" : "");
  }

  function displayState(n) {
    const rep = n.reputation;
    if (n.state === "serving" && rep && rep.suspended_until) {
      return { state: "suspended", reason: "low reputation, until " + fmtTime(rep.suspended_until) };
    }
    return { state: n.state || "serving", reason: n.state_reason || "" };
  }

  const stateKinds = { serving: "green", paused: "amber", draining: "blue", suspended: "red", quarantined: "red" };

  function renderSummary(d) {
    const insts = d.instances || [], nodes = d.nodes || [], types = d.task_types || [];
    const ready = insts.filter((i) => i.ready).length;
    setText($("sum-instances"), insts.length);
    setText($("sum-instances-note"), ready === insts.length ? "all ready" : ready + " ready");
    const serving = nodes.filter((n) => displayState(n).state === "serving").length;
    setText($("sum-nodes"), nodes.length);
    setText($("sum-nodes-note"), nodes.length ? serving + " serving" : "none connected");
    const inflight = insts.reduce((s, i) => s + (i.tasks_in_flight || 0), 0);
    const waiting = types.reduce((s, t) => s + (t.waiting || 0), 0);
    setText($("sum-inflight"), inflight);
    setText($("sum-inflight-note"), waiting ? waiting + " waiting for a slot" : "none waiting");
    const served = types.reduce((s, t) => s + (t.served_1m || 0), 0);
    const finished = types.reduce((s, t) => s + (t.finished_5m || 0), 0);
    const failed = types.reduce((s, t) => s + (t.failed_5m || 0), 0);
    setText($("sum-served"), served);
    setText($("sum-served-note"), finished + " requests in 5 min");
    setText($("sum-errors"), finished ? fmtPct(failed / finished) : "–");
    $("sum-errors").classList.toggle("bad", finished > 0 && failed / finished >= 0.05);
    setText($("sum-errors-note"), failed ? failed + " failed" : "no failures");
  }

  function renderNodes(list) {
    const nodes = list.slice().sort((a, b) => (a.name || "").localeCompare(b.name || "") || (a.node_id < b.node_id ? -1 : 1));
    setText($("nodes-count"), nodes.length);
    syncRows($("nodes-body"), nodes, (n) => n.node_id, createNodeRow, updateNodeRow,
      () => emptyRow(10, "No nodes connected yet", "Start one with switchyard node --url <this server> --api-key <key> --name <name>; it shows up here within a second."));
  }

  function createNodeRow(n) {
    const tr = el("tr", { "data-node-id": n.node_id });
    const c = {
      name: el("div", { class: "name ellipsis" }), id: el("div", { class: "sub mono" }),
      meta: el("div", { class: "sub node-meta ellipsis" }),
      account: el("td", { class: "mono ellipsis" }), instance: el("td"), caps: el("td"),
      state: el("span"), reason: el("div", { class: "reason" }),
      slotsText: el("span"), bar: el("div", { class: "bar" }, el("span")),
      rep: el("td", { class: "num" }), bench: el("td", { class: "num" }), cpu: el("td", { class: "num" }),
      actions: el("td", { class: "actions" }),
    };
    tr._c = c;
    tr._node = n;
    const pause = el("button", { type: "button", class: "btn btn-sm", "data-action": "pause", text: "Pause" });
    const resume = el("button", { type: "button", class: "btn btn-sm", "data-action": "resume", text: "Resume" });
    const drain = el("button", { type: "button", class: "btn btn-sm btn-danger", "data-action": "drain", text: "Drain" });
    pause.addEventListener("click", () => nodeAction(tr._node, "pause", pause));
    resume.addEventListener("click", () => nodeAction(tr._node, "resume", resume));
    // Drain closes the node once it is idle: one click arms, a second sends.
    let armed = null;
    drain.addEventListener("click", () => {
      if (!armed) {
        drain.classList.add("confirm");
        drain.textContent = "Confirm drain";
        armed = setTimeout(() => { armed = null; drain.classList.remove("confirm"); drain.textContent = "Drain"; }, 3000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      drain.classList.remove("confirm");
      drain.textContent = "Drain";
      nodeAction(tr._node, "drain", drain);
    });
    c.pause = pause; c.resume = resume; c.drain = drain;
    c.actions.append(pause, resume, drain);
    tr.append(
      el("td", null, c.name, c.id, c.meta),
      c.account, c.instance, c.caps,
      el("td", null, c.state, c.reason),
      el("td", { class: "num" }, el("span", { class: "slots" }, c.bar, c.slotsText)),
      c.rep, c.bench, c.cpu, c.actions,
    );
    return tr;
  }

  function updateNodeRow(tr, n) {
    const c = tr._c;
    tr._node = n;
    setText(c.name, n.name);
    c.name.title = n.name;
    setText(c.id, short(n.node_id));
    c.id.title = n.node_id;
    // What the node declared: its version and labels (key=value, by key).
    const labels = Object.keys(n.labels || {}).sort().map((k) => k + "=" + n.labels[k]);
    const meta = [n.version ? "v" + n.version.replace(/^v/, "") : "", ...labels].filter(Boolean).join(" · ");
    setText(c.meta, meta);
    c.meta.title = meta;
    c.meta.hidden = !meta;
    setText(c.account, short(n.account_id));
    c.account.title = n.account_id || "";
    setText(c.instance, instanceLabel(n.instance, n.instance_name));
    c.instance.title = n.instance || "";
    const caps = (n.capabilities || []).join(",");
    if (c.caps.dataset.v !== caps) {
      c.caps.dataset.v = caps;
      const list = n.capabilities || [];
      c.caps.replaceChildren(...list.slice(0, 4).map((t) => el("span", { class: "chip", text: t })),
        ...(list.length > 4 ? [el("span", { class: "chip", text: "+" + (list.length - 4), title: list.slice(4).join(", ") })] : []));
    }
    const st = displayState(n);
    tr.dataset.state = st.state;
    c.state.className = "pill state-pill pill-" + (stateKinds[st.state] || "grey");
    setText(c.state, st.state);
    setText(c.reason, st.reason);
    c.reason.title = st.reason;
    c.reason.hidden = !st.reason;
    const max = n.max_concurrency || 0, used = n.active_tasks || 0;
    setText(c.slotsText, used + " / " + max);
    c.bar.firstChild.style.width = (max ? Math.min(100, (100 * used) / max) : 0) + "%";
    c.bar.classList.toggle("full", max > 0 && used >= max);
    const rep = n.reputation;
    setText(c.rep, rep ? rep.score.toFixed(1) : "–");
    c.rep.title = rep ? rep.total_tasks + " tasks, " + fmtPct(rep.success_rate) + " succeeded, avg " + fmtMs(rep.avg_response_ms) : "reputation unavailable";
    const b = n.benchmark;
    setText(c.bench, b ? fmtMs(b.avg_ms) + (b.passed ? "" : " ✗") : "–");
    c.bench.classList.toggle("bad", !!(b && !b.passed));
    c.bench.title = b ? (b.passed ? "benchmark passed" : "some benchmark prompts failed") : "no benchmark yet";
    setText(c.cpu, Math.round(n.cpu_percent || 0) + "%");
    c.pause.hidden = n.state !== "serving";
    c.resume.hidden = n.state !== "paused" && n.state !== "quarantined";
    c.drain.hidden = n.state === "draining";
  }

  function renderTypes(types) {
    setText($("types-count"), types.length);
    syncRows($("types-body"), types, (t) => t.task_type, createTypeRow, updateTypeRow,
      () => emptyRow(10, "No task types yet", "A task type appears when a node that serves it connects, or a request asks for it."));
  }

  function createTypeRow() {
    const tr = el("tr");
    const cells = [];
    for (let i = 0; i < 9; i++) cells.push(el("td", { class: i === 0 ? "name" : "num" }));
    const spark = el("td");
    tr._cells = cells;
    tr._spark = spark;
    tr.append(...cells, spark);
    return tr;
  }

  function updateTypeRow(tr, t) {
    const c = tr._cells;
    setText(c[0], t.task_type);
    setText(c[1], t.nodes);
    setText(c[2], t.slots_free + " / " + t.slots_total);
    setText(c[3], t.waiting);
    c[3].classList.toggle("bad", t.waiting > 0);
    setText(c[4], t.waiting ? fmtMs(t.oldest_wait_ms) : "–");
    setText(c[5], t.served_1m);
    setText(c[6], t.finished_5m ? fmtMs(t.p50_ms) : "–");
    setText(c[7], t.finished_5m ? fmtMs(t.p95_ms) : "–");
    setText(c[8], t.finished_5m ? fmtPct(t.error_rate) : "–");
    c[8].classList.toggle("bad", t.error_rate >= 0.05);
    c[8].title = t.failed_5m + " of " + t.finished_5m + " failed";
    const sig = (t.finished || []).join(",") + "|" + (t.failed || []).join(",");
    if (tr._spark.dataset.v !== sig) {
      tr._spark.dataset.v = sig;
      tr._spark.replaceChildren(sparkline(t.finished || [], t.failed || [], t.slot_seconds || 10));
    }
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    return n;
  }

  // sparkline draws requests finished per slot (a line over an area) and
  // the failed ones (red bars from the base line).
  function sparkline(finished, failed, slotSeconds) {
    const w = 132, h = 28, pad = 2;
    const s = svg("svg", { class: "spark", width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img" });
    const n = finished.length;
    const total = finished.reduce((a, b) => a + b, 0), bad = failed.reduce((a, b) => a + b, 0);
    const title = svg("title");
    title.textContent = "Last " + Math.round((n * slotSeconds) / 60) + " minutes, per " + slotSeconds + " s: " + total + " finished, " + bad + " failed";
    s.append(title);
    s.append(svg("line", { class: "base", x1: 0, y1: h - pad, x2: w, y2: h - pad }));
    if (n < 2) return s;
    const top = Math.max(1, ...finished);
    const x = (i) => ((w - 2) * i) / (n - 1) + 1;
    const y = (v) => h - pad - ((h - 2 * pad) * v) / top;
    // The last slot is still running: its segment is dashed, so a slot
    // half counted does not read as traffic falling.
    const pt = (i) => x(i).toFixed(1) + "," + y(finished[i]).toFixed(1);
    const done = finished.slice(0, n - 1).map((_, i) => pt(i)).join(" ");
    s.append(svg("polygon", { class: "area", points: x(0).toFixed(1) + "," + (h - pad) + " " + done + " " + x(n - 2).toFixed(1) + "," + (h - pad) }));
    s.append(svg("polyline", { class: "line", points: done }));
    s.append(svg("polyline", { class: "line running", points: pt(n - 2) + " " + pt(n - 1) }));
    failed.forEach((v, i) => {
      if (v > 0) {
        const top2 = y(v);
        s.append(svg("rect", { class: "fail", x: (x(i) - 1.5).toFixed(1), y: top2.toFixed(1), width: 3, height: Math.max(1.5, h - pad - top2).toFixed(1) }));
      }
    });
    return s;
  }

  function renderInstances(insts) {
    setText($("instances-count"), insts.length);
    syncRows($("instances-body"), insts, (i) => i.id, () => {
      const tr = el("tr");
      tr._c = { name: el("span", { class: "name" }), tag: el("span", { class: "tag", text: "this one" }), sub: el("div", { class: "sub mono" }),
        mode: el("td"), up: el("td", { class: "num" }), nodes: el("td", { class: "num" }), inflight: el("td", { class: "num" }), status: el("td") };
      const c = tr._c;
      tr.append(el("td", null, c.name, c.tag, c.sub), c.mode, c.up, c.nodes, c.inflight, c.status);
      return tr;
    }, (tr, i) => {
      const c = tr._c;
      setText(c.name, instanceLabel(i.id, i.name));
      c.tag.hidden = !i.self;
      setText(c.sub, i.addr + " · " + i.version);
      c.sub.title = i.id + " on " + i.host;
      setText(c.mode, i.mode);
      setText(c.up, fmtUptime(i.uptime_seconds));
      setText(c.nodes, i.nodes);
      setText(c.inflight, i.tasks_in_flight);
      const kind = i.draining ? "blue" : i.ready ? "green" : "red";
      const text = i.draining ? "draining" : i.ready ? "ready" : "not ready";
      const sig = kind + text + (i.not_ready_reason || "");
      if (c.status.dataset.v !== sig) {
        c.status.dataset.v = sig;
        c.status.replaceChildren(pill(kind, text));
        if (!i.ready && !i.draining && i.not_ready_reason) {
          c.status.append(el("div", { class: "reason", text: i.not_ready_reason, title: i.not_ready_reason }));
        }
      }
    }, () => emptyRow(6, "No instances", "Not even this one answered; reload the page."));
  }

  function renderFailures(fails) {
    setText($("failures-count"), fails.length);
    syncRows($("failures-body"), fails, (f) => f.at + "|" + f.instance + "|" + f.task_type + "|" + f.code, () => {
      const tr = el("tr");
      tr._c = { time: el("div"), ago: el("div", { class: "sub" }), type: el("td", { class: "name" }), code: el("span", { class: "pill pill-red code" }),
        msg: el("div", { class: "reason" }), node: el("td", { class: "ellipsis" }) };
      const c = tr._c;
      tr.append(el("td", { class: "mono" }, c.time, c.ago), c.type, el("td", null, c.code, c.msg), c.node);
      return tr;
    }, (tr, f) => {
      const c = tr._c;
      setText(c.time, fmtTime(f.at));
      setText(c.ago, fmtAgo(f.at));
      setText(c.type, f.task_type);
      setText(c.code, f.code);
      setText(c.msg, f.message || "");
      c.msg.title = f.message || "";
      c.msg.hidden = !f.message;
      setText(c.node, f.node_name || short(f.node_id) || "–");
      c.node.title = (f.node_id || "no node") + " · asked at " + instanceLabel(f.instance, f.instance_name);
    }, () => emptyRow(4, "No failures", "Requests that fail (timeouts, disconnects, node errors) show here."));
  }

  // ---- usage ---------------------------------------------------------------------

  // Usage changes by the task, not by the second: read every 30 s, and
  // at sign-in.
  const USAGE_MS = 30000;
  let usageTimer = null;

  async function fetchUsage(query) {
    const resp = await fetch("/admin/api/usage?" + query, {
      headers: { Authorization: "Bearer " + token, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
    });
    if (resp.status !== 200) throw new Error("usage: " + resp.status);
    return resp.json();
  }

  async function pollUsage() {
    const gen = generation;
    try {
      const [byDay, byKey] = await Promise.all([fetchUsage("group_by=day"), fetchUsage("group_by=account,key")]);
      if (gen !== generation) return;
      renderUsage(byDay, byKey);
    } catch (_) {
      // Keep the last picture; the live badge says when the cluster is away.
    }
    if (gen !== generation) return;
    clearTimeout(usageTimer);
    usageTimer = setTimeout(pollUsage, USAGE_MS);
  }

  function fmtInt(n) {
    return Number(n || 0).toLocaleString("en-US");
  }

  function fmtNodeTime(ms) {
    const s = (ms || 0) / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function renderUsage(byDay, byKey) {
    const t = byDay.total || {};
    setText($("usage-range"), byDay.from + " to " + byDay.to + ", UTC");
    setText($("usage-requests"), fmtInt(t.requests));
    setText($("usage-tokens"), fmtInt((t.prompt_tokens || 0) + (t.completion_tokens || 0)));
    setText($("usage-tokens-note"), fmtInt(t.prompt_tokens) + " prompt · " + fmtInt(t.completion_tokens) + " completion");
    setText($("usage-node"), fmtNodeTime(t.node_ms));
    $("usage-chart").replaceChildren(usageChart(byDay.from, byDay.to, byDay.rows || []));
    syncRows($("usage-body"), byKey.rows || [], (r) => r.account_id + "|" + r.key_id, () => {
      const tr = el("tr");
      tr._c = [el("td", { class: "mono ellipsis" }), el("td", { class: "mono" }), el("td", { class: "num" }), el("td", { class: "num" }),
        el("td", { class: "num" }), el("td", { class: "num" }), el("td", { class: "num" })];
      tr.append(...tr._c);
      return tr;
    }, (tr, r) => {
      const c = tr._c;
      setText(c[0], short(r.account_id));
      c[0].title = r.account_id;
      setText(c[1], r.key_id || "(none)");
      setText(c[2], fmtInt(r.requests));
      setText(c[3], fmtInt(r.completed));
      setText(c[4], fmtInt(r.prompt_tokens));
      setText(c[5], fmtInt(r.completion_tokens));
      setText(c[6], fmtNodeTime(r.node_ms));
    }, () => emptyRow(7, "No usage yet", "Each finished task adds to its key's row, within about a second."));
  }

  // usageChart draws requests per day over the range, a bar a day (the
  // part that did not complete in red), with the first and last days named.
  function usageChart(from, to, rows) {
    const byDay = new Map(rows.map((r) => [r.day, r]));
    const days = [];
    for (let d = new Date(from + "T00:00:00Z"); d <= new Date(to + "T00:00:00Z"); d.setUTCDate(d.getUTCDate() + 1)) {
      days.push(d.toISOString().slice(0, 10));
    }
    const w = 600, h = 90, base = 74, n = Math.max(days.length, 1);
    const s = svg("svg", { viewBox: "0 0 " + w + " " + h, preserveAspectRatio: "none", role: "img" });
    const top = Math.max(1, ...rows.map((r) => r.requests || 0));
    const slot = w / n;
    const title = svg("title");
    title.textContent = "Requests per day, " + from + " to " + to;
    s.append(title);
    days.forEach((day, i) => {
      const r = byDay.get(day);
      if (!r || !r.requests) return;
      const bh = Math.max(2, ((base - 4) * r.requests) / top);
      const x = (i * slot + slot * 0.15).toFixed(1), bw = (slot * 0.7).toFixed(1);
      const bar = svg("rect", { class: "ubar", x: x, y: (base - bh).toFixed(1), width: bw, height: bh.toFixed(1), "data-day": day });
      const tip = svg("title");
      tip.textContent = day + ": " + fmtInt(r.requests) + " requests, " + fmtInt((r.prompt_tokens || 0) + (r.completion_tokens || 0)) + " tokens";
      bar.append(tip);
      s.append(bar);
      const bad = (r.requests || 0) - (r.completed || 0);
      if (bad > 0) {
        const fh = (bh * bad) / r.requests;
        s.append(svg("rect", { class: "ubar failed", x: x, y: (base - fh).toFixed(1), width: bw, height: fh.toFixed(1) }));
      }
    });
    s.append(svg("line", { class: "axis", x1: 0, y1: base, x2: w, y2: base }));
    const label = (text, x, anchor) => {
      const tx = svg("text", { x: x, y: h - 2, "text-anchor": anchor });
      tx.textContent = text;
      s.append(tx);
    };
    label(from, 0, "start");
    label(to, w, "end");
    return s;
  }

  $("usage-csv").addEventListener("click", async () => {
    try {
      const resp = await fetch("/admin/api/usage?group_by=account,key,task_type,day&format=csv", {
        headers: { Authorization: "Bearer " + token }, cache: "no-store", credentials: "omit",
      });
      if (resp.status !== 200) throw new Error("the server answered " + resp.status);
      const url = URL.createObjectURL(await resp.blob());
      const a = el("a", { href: url });
      a.download = "switchyard-usage.csv";
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      toast("Cannot download the usage: " + e.message, true);
    }
  });

  // ---- start ---------------------------------------------------------------------

  setInterval(() => { if (last) updateLive(); }, 1000);
  if (token) {
    showDash();
    poll();
  } else {
    showSignIn("");
  }
})();
