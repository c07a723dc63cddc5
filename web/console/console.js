// The sandstack gateway's console (docs/gateway.md, "The console"). No build step: the browser
// loads this file as it is, beside xterm.js and its fit addon (vendored by
// scripts/vendor-console.sh). The tenant token lives in sessionStorage only, and travels in the
// Authorization header of fetch() calls made without cookies; the terminal's WebSocket carries
// a single-use ticket instead (a browser cannot set its headers). Elements are built with
// textContent, never innerHTML: what the gateway or a sandbox sends is never markup.
"use strict";
(function () {
  const TOKEN_KEY = "sandstack.console.token";
  const API = "/console/api/";
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY);
  let sessions = [];
  const stats = {};
  let current = null; // the session the terminal and egress panels show
  let term = null, fit = null, sock = null, streams = [];

  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  async function api(method, path, body) {
    const init = { method, cache: "no-store", credentials: "omit",
      headers: { Authorization: "Bearer " + token } };
    if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
    const res = await fetch(API + path, init);
    let doc = {};
    try { doc = await res.json(); } catch (e) { doc = {}; }
    if (res.status === 401) { signOut("The token was refused."); throw new Error("unauthorized"); }
    if (!res.ok) throw new Error((doc.error && doc.error.message) || ("HTTP " + res.status));
    return doc;
  }

  function say(text) { $("status").textContent = text; }

  function duration(s) {
    if (s === undefined || s === null || isNaN(s)) return "";
    s = Math.max(0, Math.round(s));
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return Math.round(s / 3600) + " h";
  }

  function bytes(n) {
    if (typeof n !== "number") return "";
    if (n < 1048576) return Math.round(n / 1024) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }

  // --- sign-in -----------------------------------------------------------------------------
  function signOut(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    token = null;
    closeSession();
    $("app").hidden = true; $("signout").hidden = true; $("signin").hidden = false;
    $("who").textContent = "";
    $("signin-error").textContent = why || "";
  }

  async function signIn(t) {
    token = t;
    try {
      await api("GET", "sessions");
    } catch (e) {
      if (token) signOut("Sign-in failed: " + e.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, t);
    $("signin").hidden = true; $("app").hidden = false; $("signout").hidden = false;
    $("who").textContent = "Signed in";
    $("token").value = "";
    refresh();
  }

  // --- sessions ----------------------------------------------------------------------------
  const ACTIONS = {
    ready: [["Terminal", "open"], ["Pause", "pause"], ["Hibernate", "hibernate"], ["Snapshot", "snapshot"],
      ["Fork", "fork"], ["Destroy", "destroy"]],
    paused: [["Resume", "resume"], ["Destroy", "destroy"]],
    hibernated: [["Wake", "wake"], ["Destroy", "destroy"]],
  };

  function render(now) {
    const body = $("sessions").tBodies[0];
    body.replaceChildren();
    $("empty").hidden = sessions.length > 0;
    for (const s of sessions) {
      const st = stats[s.key] || {};
      const state = s.state;
      const tr = el("tr", null, { "data-key": s.key, "data-state": state });
      tr.append(el("td", s.key), el("td", state), el("td", duration(now - s.created)),
        el("td", duration(s.expires - now)),
        el("td", typeof st.cpu === "number" ? st.cpu.toFixed(1) + " %" : ""),
        el("td", st.mem !== undefined ? bytes(st.mem) + (st.mem_total ? " of " + bytes(st.mem_total) : "") : ""),
        el("td", s.egress === false ? "none (no proxy)" : (st.egress || ""), { class: "policy" }));
      const cell = el("td");
      for (const [label, verb] of ACTIONS[state] || []) {
        const b = el("button", label, { type: "button", "aria-label": label + " " + s.key,
          class: verb === "destroy" ? "danger" : "" });
        b.addEventListener("click", () => act(s.key, verb));
        cell.append(b);
      }
      tr.append(cell);
      body.append(tr);
    }
  }

  async function refresh() {
    if (!token) return;
    try {
      const doc = await api("GET", "sessions");
      sessions = Array.isArray(doc.sessions) ? doc.sessions : []; // an empty list comes as {}
      render(doc.now);
      const pool = await api("GET", "pool");
      const dl = $("pool");
      dl.replaceChildren();
      if (!pool.enabled) dl.append(el("dt", "Pool"), el("dd", "not configured"));
      else for (const k of ["idle", "claimed", "starting"]) dl.append(el("dt", k), el("dd", String(pool[k]), { "data-count": k }));
    } catch (e) { if (token) say("Could not list sessions: " + e.message); }
  }

  async function refreshStats() {
    if (!token) return;
    for (const s of sessions) {
      if (s.state !== "ready") { delete stats[s.key]; continue; }
      try {
        stats[s.key] = await api("GET", "sessions/" + encodeURIComponent(s.key) + "/stats");
      } catch (e) { /* the next round tries again */ }
    }
    refresh();
  }

  async function act(key, verb) {
    const path = "sessions/" + encodeURIComponent(key);
    try {
      if (verb === "open") return openSession(key);
      if (verb === "destroy") {
        say("Destroying " + key + "…");
        if (current === key) closeSession();
        await api("DELETE", path);
        delete stats[key];
        say("Destroyed " + key + ".");
      } else {
        say(verb + " " + key + "…");
        // a paused or stopped proxy cannot be asked for its audit lines or asks: the streams
        // stop first (polling a container while the engine freezes it makes the freeze fail)
        const quiet = (verb === "pause" || verb === "hibernate") && current === key;
        if (quiet) stopStreams();
        const doc = await api("POST", path + "/" + verb);
        if ((verb === "resume" || verb === "wake") && current === key) startStreams(key);
        if (verb === "fork") say("Forked " + key + " into " + doc.key + ".");
        else if (verb === "snapshot") say("Snapshot " + ((doc.snapshot && doc.snapshot.name) || "") + " of " + key + " taken.");
        else say(key + ": " + verb + " done.");
      }
    } catch (e) { say(key + ": " + verb + " failed: " + e.message); }
    refresh();
  }

  async function create() {
    say("Creating a session…");
    $("create").disabled = true;
    try {
      const doc = await api("POST", "sessions");
      say("Created " + doc.key + ".");
      await refresh();
      openSession(doc.key);
    } catch (e) { say("Create failed: " + e.message); }
    $("create").disabled = false;
  }

  // --- the terminal and the egress panels of one session ------------------------------------
  function stopStreams() {
    for (const c of streams) c.abort();
    streams = [];
  }

  function closeSession() {
    if (sock) { sock.close(); sock = null; }
    stopStreams();
    if (term) { term.dispose(); term = null; }
    current = null;
    $("terminal-panel").hidden = true; $("egress-panel").hidden = true;
  }

  // a session whose stack has no proxy sandstack added has no policy, audit lines or asks to show
  function hasEgress(key) {
    const s = sessions.find((x) => x.key === key);
    return !s || s.egress !== false;
  }

  async function openSession(key) {
    closeSession();
    current = key;
    $("terminal-panel").hidden = false; $("egress-panel").hidden = !hasEgress(key);
    $("terminal-title").textContent = "Terminal: " + key;
    $("egress-title").textContent = "Egress: " + key;
    $("audit").replaceChildren(); $("asks").replaceChildren();
    term = new window.Terminal({ convertEol: false, fontSize: 14, screenReaderMode: false });
    fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open($("terminal"));
    fit.fit();
    const path = "sessions/" + encodeURIComponent(key);
    const { ticket } = await api("POST", path + "/ticket");
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    sock = new WebSocket(proto + "//" + location.host + API + path + "/terminal?ticket=" + ticket +
      "&cols=" + term.cols + "&rows=" + term.rows);
    sock.binaryType = "arraybuffer";
    const enc = new TextEncoder();
    sock.onopen = () => { $("terminal-state").textContent = "Connected (" + term.cols + "×" + term.rows + ")."; term.focus(); };
    sock.onclose = () => { $("terminal-state").textContent = "Disconnected."; };
    sock.onmessage = (ev) => { if (term) term.write(new Uint8Array(ev.data)); };
    term.onData((d) => { if (sock && sock.readyState === 1) sock.send(enc.encode(d)); });
    term.onResize(({ cols, rows }) => {
      $("terminal-state").textContent = "Connected (" + cols + "×" + rows + ").";
      if (sock && sock.readyState === 1) sock.send(JSON.stringify({ type: "resize", cols, rows }));
    });
    startStreams(key);
  }

  // the audit lines and the asks of the session the panels show
  function startStreams(key) {
    stopStreams();
    if (!hasEgress(key)) return;
    $("asks").replaceChildren(); $("audit").replaceChildren(); // the log comes again from its start
    const path = "sessions/" + encodeURIComponent(key);
    follow(path + "/egress/log", (event, data) => {
      if (event !== "audit") return;
      let line = data, cls = "";
      try {
        const a = JSON.parse(data);
        cls = a.decision === "deny" || a.decision === "refuse" ? "deny" : "";
        line = [a.decision, a.method || "", (a.host || "") + (a.port ? ":" + a.port : ""), a.reason || ""].join(" ");
      } catch (e) { /* shown as it came */ }
      const li = el("li", line, cls ? { class: cls } : {});
      $("audit").append(li);
    });
    loadAsks(key);
  }

  // follow(path, onEvent): a server-sent event stream read with fetch (EventSource cannot send
  // the Authorization header).
  async function follow(path, onEvent) {
    const ctl = new AbortController();
    streams.push(ctl);
    try {
      const res = await fetch(API + path, { headers: { Authorization: "Bearer " + token }, credentials: "omit",
        cache: "no-store", signal: ctl.signal });
      if (!res.ok) { // 429: the tenant's or the session's streams are at their cap
        if (res.status === 429) say(((await res.json().catch(() => ({}))).error || {}).message || "too many streams");
        return false;
      }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let event = "message"; const data = [];
          for (const l of block.split("\n")) {
            if (l.startsWith("event: ")) event = l.slice(7);
            else if (l.startsWith("data: ")) data.push(l.slice(6));
          }
          if (data.length) onEvent(event, data.join("\n"));
        }
      }
    } catch (e) { /* aborted, or the gateway went away */ }
    return true;
  }

  // --- asks: requests the proxy holds until someone answers ---------------------------------
  function showAsk(key, ask) {
    const id = String(ask.id);
    if (document.querySelector('#asks li[data-id="' + CSS.escape(id) + '"]')) return;
    const li = el("li", null, { "data-id": id });
    li.append(el("span", [ask.method || "", (ask.host || "") + (ask.port ? ":" + ask.port : ""), ask.path || ""].join(" ") + " "));
    for (const [label, decision] of [["Allow", "allow"], ["Deny", "deny"]]) {
      const b = el("button", label, { type: "button", "aria-label": label + " " + (ask.host || id),
        class: decision === "deny" ? "danger" : "" });
      b.addEventListener("click", async () => {
        try {
          await api("POST", "sessions/" + encodeURIComponent(key) + "/egress/asks/" + encodeURIComponent(id),
            { decision, remember: "once", reason: "answered in the console" });
          li.remove();
          say("Ask " + id + ": " + decision + ".");
        } catch (e) { say("Answer failed: " + e.message); }
      });
      li.append(b);
    }
    $("asks").append(li);
  }

  async function loadAsks(key) {
    const path = "sessions/" + encodeURIComponent(key) + "/egress/asks";
    try {
      const doc = await api("GET", path);
      $("asks-state").textContent = "";
      for (const a of Array.isArray(doc) ? doc : []) showAsk(key, a);
    } catch (e) {
      $("asks-state").textContent = "Asks are not available: " + e.message;
      return;
    }
    follow(path + "/stream", (event, data) => {
      if (event !== "ask") return;
      try { const a = JSON.parse(data); if (current === key) showAsk(key, a); } catch (e) { /* skip */ }
    });
  }

  // --- wiring ------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("token").value.trim()); });
    $("signout").addEventListener("click", () => signOut());
    $("create").addEventListener("click", create);
    window.addEventListener("resize", () => { if (fit && term) fit.fit(); });
    if (token) signIn(token); else signOut();
    setInterval(refresh, 3000);
    setInterval(refreshStats, 5000);
  });
})();
