// The Swarm console's live parts: everything here only enhances pages the
// gateway already rendered (they work without it). Updates come over SSE;
// text from missions and models is set with textContent, and HTML only
// from the gateway, which escaped it.
(function () {
  "use strict";
  const page = document.body.dataset.page;
  const state = document.getElementById("live-state");
  const say = (t) => { if (state) state.textContent = t; };

  function open(url, handlers) {
    const es = new EventSource(url);
    es.onopen = () => say("live");
    es.onerror = () => say(es.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting…");
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (e) => { try { fn(JSON.parse(e.data), es); } catch (err) { console.error(err); } });
    }
    return es;
  }

  function badge(el, cls, label) {
    if (!el) return;
    const b = document.createElement("span");
    b.className = "badge " + cls;
    b.textContent = label;
    el.replaceChildren(b);
  }

  function progress(el, done, total, failed) {
    if (!el) return;
    if (!total) { el.textContent = "planning"; return; }
    const p = document.createElement("progress");
    p.max = total; p.value = done;
    p.setAttribute("aria-label", done + " of " + total + " tasks done");
    const n = document.createElement("span");
    n.className = "nums";
    n.textContent = " " + done + "/" + total + (failed ? ", " + failed + " failed" : "");
    el.replaceChildren(p, n);
  }

  // ---- the list of swarms ----
  if (page === "swarms") {
    const body = document.querySelector("#swarms tbody");
    const wanted = document.body.dataset.filterStatus || "";
    const first = (document.body.dataset.firstPage || "").toLowerCase() === "true";
    open("/events/swarms", {
      row: (r) => {
        let tr = body.querySelector('tr[data-swarm="' + CSS.escape(r.swarm_id) + '"]');
        if (wanted && r.status_code.toLowerCase() !== wanted) { if (tr) tr.remove(); return; }
        if (!tr) {
          if (!first) return;
          tr = document.createElement("tr");
          tr.dataset.swarm = r.swarm_id;
          for (const c of ["id", "status", "progress", "age", "mission"]) {
            const td = document.createElement("td"); td.className = c; tr.appendChild(td);
          }
          const a = document.createElement("a");
          a.href = "/swarms/" + encodeURIComponent(r.swarm_id);
          const code = document.createElement("code"); code.textContent = r.short_id;
          a.appendChild(code);
          tr.children[0].appendChild(a);
          const time = document.createElement("time");
          time.dateTime = r.accepted_iso; time.title = r.accepted_text; time.textContent = "just now";
          tr.children[3].appendChild(time);
          tr.children[4].textContent = r.mission;
          const empty = body.querySelector(".empty-row");
          if (empty) empty.remove();
          body.prepend(tr);
        }
        tr.dataset.status = r.status_code;
        badge(tr.querySelector(".status"), r.status_class, r.status_label);
        progress(tr.querySelector(".progress"), r.done, r.total, r.failed);
      },
    });
  }

  // ---- one swarm ----
  function swarmPage() {
    const id = document.body.dataset.swarm;
    const graph = document.getElementById("graph");
    const timeline = document.getElementById("timeline");
    const panel = document.getElementById("task-panel");
    let selected = null;

    async function showTask(taskId, push) {
      const url = "/swarms/" + encodeURIComponent(id) + "/tasks/" + encodeURIComponent(taskId);
      const r = await fetch(url + "?fragment=1", { credentials: "same-origin" });
      if (!r.ok) return false;
      panel.innerHTML = await r.text();
      panel.hidden = false;
      selected = taskId;
      graph.querySelectorAll(".node.selected").forEach((n) => n.classList.remove("selected"));
      const node = graph.querySelector('.node[data-task="' + CSS.escape(taskId) + '"]');
      if (node) node.classList.add("selected");
      if (push) history.replaceState(null, "", "#task=" + encodeURIComponent(taskId));
      panel.focus({ preventScroll: true });
      return true;
    }
    panel.tabIndex = -1;

    document.addEventListener("click", (e) => {
      const link = e.target.closest("a");
      if (!link) return;
      const m = (link.getAttribute("href") || "").match(/\/tasks\/([^/?#]+)$/);
      if (!m || !(graph.contains(link) || link.classList.contains("task-link"))) return;
      e.preventDefault();
      showTask(decodeURIComponent(m[1]), true);
    });
    const hash = location.hash.match(/^#task=(.+)$/);
    if (hash) showTask(decodeURIComponent(hash[1]), false);

    function setTask(t) {
      const node = graph.querySelector('.node[data-task="' + CSS.escape(t.id) + '"]');
      if (node) {
        node.setAttribute("class", "node " + t.class + (t.id === selected ? " selected" : ""));
        node.dataset.status = t.class.slice(3);
        const word = node.querySelector(".word");
        if (word) word.textContent = t.word;
        const title = node.querySelector("title");
        if (title) title.textContent = t.id + ": " + t.title + " (" + t.word + ")";
      }
      const row = document.querySelector('#tasks tr[data-task="' + CSS.escape(t.id) + '"]');
      if (row) {
        badge(row.querySelector(".status"), t.class, t.word);
        row.querySelector(".attempt").textContent = t.attempt;
        row.querySelector(".revision").textContent = t.revision;
        row.querySelector(".worker").textContent = t.worker;
      }
    }

    let refreshing = null;
    function refreshWaiting() {
      clearTimeout(refreshing);
      refreshing = setTimeout(async () => {
        const r = await fetch("/swarms/" + encodeURIComponent(id) + "/waiting", { credentials: "same-origin" });
        if (!r.ok) return;
        const html = await r.text();
        document.getElementById("waiting-body").innerHTML = html;
        document.getElementById("waiting").hidden = html.trim() === "";
      }, 200);
    }

    open("/events/swarms/" + encodeURIComponent(id), {
      graph: (g) => {
        graph.innerHTML = g.svg;
        const rows = document.querySelector("#tasks tbody");
        rows.innerHTML = g.rows;
        if (selected) {
          const node = graph.querySelector('.node[data-task="' + CSS.escape(selected) + '"]');
          if (node) node.classList.add("selected");
        }
      },
      tasks: (list) => { list.forEach(setTask); if (selected && list.some((t) => t.id === selected)) showTask(selected, false); },
      latest: (p) => {
        const row = document.querySelector('#tasks tr[data-task="' + CSS.escape(p.id) + '"] .latest');
        if (row) row.textContent = p.text;
      },
      swarm: (s) => {
        badge(document.getElementById("swarm-status"), s.status_class, s.status_label);
        progress(document.getElementById("swarm-progress"), s.done, s.total, s.failed);
        document.body.dataset.terminal = String(s.terminal);
        document.getElementById("cancel-form").hidden = s.terminal;
      },
      timeline: (t) => { timeline.innerHTML = t.svg; },
      waiting: () => refreshWaiting(),
      report: (r, es) => {
        const link = document.getElementById("report-link");
        link.hidden = false;
        es.close();
        say("finished: " + r.status_label);
      },
    });
  }
  if (page === "swarm") swarmPage();

  // ---- what waits for a person ----
  if (page === "approvals") {
    let t = null;
    open("/events/waiting", {
      waiting: () => {
        clearTimeout(t);
        t = setTimeout(async () => {
          const r = await fetch("/approvals?fragment=1", { credentials: "same-origin" });
          if (r.ok) document.getElementById("waiting-body").innerHTML = await r.text();
        }, 200);
      },
    });
  }
})();
