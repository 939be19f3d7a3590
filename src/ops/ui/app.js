// The status page's script: polls the JSON API once a second and redraws.
// Read-only (GET only). Every value from the API is inserted as text, never
// as HTML, so member ids and reasons cannot inject markup.
"use strict";
(function () {
  const PER_PAGE = 100;
  // Changes shown; /api/changes is asked for no more (it holds 100 at most).
  const CHANGES_SHOWN = 20;
  let page = 1;
  let pages = 1;
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function set(id, text) { $(id).textContent = text; }
  function ago(ms) {
    if (ms === null || ms === undefined) return "";
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    return s < 60 ? s + " s ago" : Math.round(s / 60) + " min ago";
  }
  async function get(path) {
    const r = await fetch(path, { cache: "no-store" });
    if (!r.ok) throw new Error(path + ": " + r.status);
    return r.json();
  }

  function drawStatus(a) {
    const me = a.replica;
    set("me", me.id + " (" + me.role + (me.census_index === null ? "" : ", index " + me.census_index) + ")");
    set("takeover", me.takeover);
    const s = a.status;
    if (!s) { set("holder", a.read_error || "not read yet"); return; }
    set("table", s.table);
    set("holder", s.lease.holder || "none");
    set("epoch", s.lease.epoch);
    set("generation", s.generation);
    set("units", s.work_units + (s.invalid_work_units ? " (+" + s.invalid_work_units + " invalid)" : ""));
    set("in-transit", s.in_transit);
    const live = s.groups.reduce((n, g) => n + g.live, 0);
    const failed = s.groups.reduce((n, g) => n + g.failed, 0);
    const draining = s.groups.reduce((n, g) => n + g.draining, 0);
    set("member-counts", live + " live, " + failed + " failed" + (draining ? ", " + draining + " draining" : ""));
    const c = s.last_change;
    set("last-change", c ? "moved " + c.moved + " (minimum " + c.minimum + "), placed " + c.placed : "–");
    const b = s.balance;
    set("balance", b ? "cost ±" + b.tolerance + ": busiest " + b.imbalance.toFixed(2) + "× its share" +
      (b.out_of_band ? ", " + b.out_of_band + " outside" : "") + (b.hot_count ? ", " + b.hot_count + " hot" : "") : "count");
    const k = s.controls;
    set("controls", !k ? "none" : [
      k.paused_since_ms !== null ? "paused" + (k.paused_for_ms !== null ? " " + ago(Date.now() - k.paused_for_ms) : "") : "",
      k.cordoned.length ? "cordoned: " + k.cordoned.join(", ") : "",
      k.drained.length ? "drained: " + k.drained.join(", ") : "",
      k.pins ? k.pins + " pinned" : "",
      k.unreadable ? k.unreadable + " unreadable" : "",
    ].filter((x) => x).join("; "));
    const q = s.quarantine;
    set("quarantined", !q ? "none" : q.units + ": " + q.quarantined.map((u) =>
      u.unit + " (" + u.deaths.length + " deaths)").join(", ") + (q.units > q.quarantined.length ? ", …" : ""));
    const reps = $("replicas");
    reps.replaceChildren(...s.replicas.map((r) => el("li", null,
      r.id + ": census index " + (r.index === null ? "?" : r.index) + " of " + (r.replicas === null ? "?" : r.replicas) +
      (r.id === s.lease.holder ? " — holder" : "") + (r.id === me.id ? " — this replica" : "") +
      (r.blocked ? " — not acting: " + r.blocked : "") +
      (r.recovering ? " — recovering from state Redis may have lost: " + r.recovering : ""))));
    const tr = $("transit");
    tr.replaceChildren(...s.transit.map((t) => el("li", null,
      t.unit + " (" + t.group + "): from " + (t.from.join(", ") || "?") + " to " + (t.to || "?") + ", " + t.for_ms + " ms")));
    if (s.in_transit > s.transit.length) tr.append(el("li", "muted", "… " + (s.in_transit - s.transit.length) + " more"));
    if (s.in_transit === 0) tr.append(el("li", "muted", "none"));
    $("live").classList.toggle("stale", !!a.read_error);
    set("live", a.read_error ? a.read_error : "updated " + new Date().toLocaleTimeString() + (a.read_at_ms ? ", read " + ago(a.read_at_ms) : ""));
  }

  function drawMembers(p) {
    pages = Math.max(1, p.pages);
    if (page > pages) page = pages;
    set("members-total", "(" + p.total + ")");
    set("page-info", "page " + p.page + " of " + pages);
    $("prev").disabled = page <= 1;
    $("next").disabled = page >= pages;
    // By load when the table balances by cost (the bar shows load against
    // the largest, the mark where the share is), else by units.
    const size = (m) => (m.load ? m.load.load : m.units);
    const max = Math.max(1e-9, ...p.members.map((m) => Math.max(size(m), m.load ? m.load.share : 0)));
    $("members").replaceChildren(...p.members.map((m, i) => {
      const draining = m.protocol && m.protocol.draining;
      const row = el("div", "member" + (m.live ? "" : " failed") + (draining ? " draining" : ""));
      row.dataset.id = m.id;
      row.dataset.units = m.units;
      const id = el("div", "id", m.id);
      // Element Timing: when the first row (and its bar, drawn with it) is painted.
      if (i === 0) id.setAttribute("elementtiming", "first-member");
      row.append(id);
      const track = el("div", "track");
      const bar = el("div", "bar");
      bar.style.width = (100 * size(m) / max) + "%";
      track.append(bar);
      if (m.load) {
        const mark = el("div", "share");
        mark.style.left = (100 * m.load.share / max) + "%";
        track.append(mark);
        if (!m.load.in_band) row.classList.add("out-of-band");
      }
      row.append(track);
      let info = m.units + " units, weight " + m.weight;
      if (m.load) info += ", load " + +m.load.load.toFixed(3) + " of share " + +m.load.share.toFixed(3) + (m.load.in_band ? "" : " (outside)") + (m.load.hot.length ? ", hot: " + m.load.hot.join(",") : "");
      if (m.protocol) info += ", applied " + m.protocol.applied + (m.protocol.owes ? " (owes " + m.protocol.owes + " acknowledgements)" : "");
      if (draining) info += ", draining";
      if (m.control) { info += ", " + m.control; row.classList.add("controlled"); }
      if (!m.live) info += ", failed: " + (m.reason || "?");
      // With -forget-after off, a failed member stays listed and pinged
      // until it is removed.
      if (!m.live && m.failing_long) {
        info += " for " + Math.floor(m.failing_for_ms / 60000) + " min: remove it (distributor services remove) or set -forget-after";
        row.classList.add("failing-long");
      }
      row.append(el("div", "info", info));
      return row;
    }));
  }

  function drawChanges(c) {
    const list = $("changes");
    const items = [];
    if (c.error) items.push(el("li", "muted", "the last write was not recorded: " + c.error));
    if (c.changes.length === 0) items.push(el("li", "muted", "none recorded yet"));
    list.replaceChildren(...items, ...c.changes.slice(0, CHANGES_SHOWN).map((ch) => {
      const li = el("li", "change");
      for (const w of ch.why) li.append(el("span", "tag " + w, w));
      if (ch.why.length === 0) li.append(el("span", "tag", "rewritten"));
      let text = "generation " + ch.previous_generation + " → " + ch.generation + ", " + ago(ch.at_ms) + " by " + ch.writer +
        ": units moved " + ch.moved.count + ", placed " + ch.placed.count + ", revoked " + ch.revoked.count;
      if (ch.moves) text += " (solve: moved " + ch.moves.moved + ", minimum " + ch.moves.minimum + ")";
      li.append(document.createTextNode(text));
      const who = el("div", "muted");
      who.textContent = ch.members.map((m) => m.id + " " + m.why + " " + m.units_before + "→" + m.units_after).join("; ") +
        (ch.members_changed > ch.members.length ? "; … " + (ch.members_changed - ch.members.length) + " more" : "");
      li.append(who);
      return li;
    }));
  }

  async function tick() {
    try {
      const [status, members, changes] = await Promise.all([
        get("/api/status"),
        get("/api/members?page=" + page + "&per_page=" + PER_PAGE),
        get("/api/changes?limit=" + CHANGES_SHOWN),
      ]);
      drawStatus(status);
      drawMembers(members);
      drawChanges(changes);
      document.body.dataset.generation = status.status ? status.status.generation : "";
      // When the first data was in the DOM (Performance API; read by benches).
      if (performance.getEntriesByName("members-drawn").length === 0) performance.mark("members-drawn");
    } catch (e) {
      $("live").classList.add("stale");
      set("live", "not reachable: " + e.message);
    } finally {
      schedule(1000);
    }
  }
  // The what-if: /api/plan for the changes typed (comma-separated each).
  const PLAN_SHOWN = 50;
  async function plan(ev) {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const k of ["leave", "join", "weight", "cordon"]) {
      for (const v of $("plan-" + k).value.split(",").map((x) => x.trim()).filter((x) => x)) q.append(k, v);
    }
    const units = $("plan-units");
    units.replaceChildren();
    try {
      const r = await fetch("/api/plan?" + q.toString(), { cache: "no-store" });
      const p = await r.json();
      if (!r.ok) { set("plan-summary", "refused: " + (p.error || r.status)); return; }
      const m = p.moves;
      set("plan-summary", "generation " + p.generation + ", " + p.assignment + ": " + p.units_changed + " units change owner" +
        (m ? " (moved " + m.moved + ", minimum " + m.minimum + ", placed " + m.placed + ")" : "") +
        "; " + p.groups.map((g) => g.group + ": " + g.members + " members, " + g.min + " to " + g.max + " units").join("; "));
      units.replaceChildren(...p.units.slice(0, PLAN_SHOWN).map((c) =>
        el("li", null, c.unit + ": " + (c.from.join(", ") || "nobody") + " → " + (c.to || "nobody") + " (" + c.kind + ")")));
      if (p.units_changed > PLAN_SHOWN) units.append(el("li", "muted", "… " + (p.units_changed - PLAN_SHOWN) + " more"));
    } catch (e) {
      set("plan-summary", "not reachable: " + e.message);
    }
  }
  $("plan-form").addEventListener("submit", plan);

  // One pending poll at most: a click re-polls at once instead of adding a loop.
  let timer = null;
  function schedule(ms) { clearTimeout(timer); timer = setTimeout(tick, ms); }
  $("prev").addEventListener("click", () => { if (page > 1) { page--; schedule(0); } });
  $("next").addEventListener("click", () => { if (page < pages) { page++; schedule(0); } });
  tick();
})();
