// clawrig view: sortable tables, the job page's trial table (filter, sort, show more) and live
// updates while a job runs. Plain browser JavaScript: no library, nothing fetched but this
// server's own state API (and nothing at all from file://).
"use strict";

const clawrigCollator = new Intl.Collator(undefined, { numeric: true });

function clawrigCompare(a, b) {
  const an = a === null || a === undefined || a === "", bn = b === null || b === undefined || b === "";
  if (an || bn) return an === bn ? 0 : an ? 1 : -1;  // empty values last
  if (typeof a === "number" && typeof b === "number") return a - b;
  return clawrigCollator.compare(String(a), String(b));
}

// Server-rendered tables with class "sortable": click a header to sort by that column.
function clawrigSortable(table) {
  const heads = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
  heads.forEach((th, col) => {
    th.addEventListener("click", () => {
      const asc = !th.classList.contains("sorted-asc");
      heads.forEach((h) => h.classList.remove("sorted-asc", "sorted-desc"));
      th.classList.add(asc ? "sorted-asc" : "sorted-desc");
      const body = table.tBodies[0];
      const key = (tr) => {
        const td = tr.cells[col];
        const raw = td.dataset.sort !== undefined ? td.dataset.sort : td.textContent.trim().replace(/^\$/, "").replace(/,/g, "");
        const n = parseFloat(raw);
        return raw !== "" && !isNaN(n) && /^-?[\d.]+(e-?\d+)?$/.test(raw) ? n : raw === "—" ? null : raw;
      };
      const rows = Array.from(body.rows);
      rows.sort((a, b) => (asc ? 1 : -1) * clawrigCompare(key(a), key(b)));
      rows.forEach((r) => body.appendChild(r));
    });
  });
}
document.querySelectorAll("table.sortable").forEach(clawrigSortable);

function clawrigFmt(v, digits) {
  return v === null || v === undefined ? "—" : Number(v).toFixed(digits);
}

function clawrigJobPage() {
  const data = JSON.parse(document.getElementById("job-data").textContent);
  const table = document.getElementById("trials");
  const body = table.tBodies[0];
  const more = document.getElementById("t-more");
  const count = document.getElementById("t-count");
  const $ = (id) => document.getElementById(id);
  const PAGE = 500;
  // rows arrive column-wise ({keys, values}): one object per trial
  const unpack = (t) => t.values.map((v) => Object.fromEntries(t.keys.map((k, i) => [k, v[i]])));
  let rows = unpack(data.rows), sortKey = "task", asc = true, shown = PAGE;

  function matches(r) {
    const text = $("f-text").value.trim().toLowerCase();
    const cat = $("f-cat").value, err = $("f-err").value;
    const lo = $("f-min").value, hi = $("f-max").value;
    if (text && !r.task.toLowerCase().includes(text) && !r.id.toLowerCase().includes(text)) return false;
    if (cat && r.cat !== cat) return false;
    if (err === "none" && r.err) return false;
    if (err === "some" && !r.err) return false;
    if (err && err !== "none" && err !== "some" && r.err !== err) return false;
    if (lo !== "" && (r.score == null || r.score < parseFloat(lo))) return false;
    if (hi !== "" && (r.score == null || r.score > parseFloat(hi))) return false;
    return true;
  }

  function cell(tr, text, cls, title) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    if (title) td.title = title;
    return td;
  }

  function render() {
    const list = rows.filter(matches);
    list.sort((a, b) => {
      const c = clawrigCompare(a[sortKey], b[sortKey]);
      return (asc ? c : -c) || clawrigCompare(a.task, b.task) || a.run - b.run;
    });
    const frag = document.createDocumentFragment();
    for (const r of list.slice(0, shown)) {
      const tr = document.createElement("tr");
      tr.dataset.id = r.id;
      const a = document.createElement("a");
      a.href = `trials/${r.id}.html`;
      a.textContent = r.task;
      tr.insertCell().appendChild(a);
      cell(tr, r.cat || "");
      cell(tr, r.run || 0, "num");
      cell(tr, clawrigFmt(r.score, 4), "num score");
      cell(tr, r.err || "", r.err ? "err-cell" : "", r.msg || "");
      cell(tr, clawrigFmt(r.cost, 4), "num");
      cell(tr, (r.tok || 0).toLocaleString("en-US"), "num");
      cell(tr, clawrigFmt(r.time, 1), "num");
      cell(tr, r.turns, "num");
      cell(tr, r.tools, "num");
      cell(tr, r.stop || "");
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    count.textContent = `${list.length} of ${rows.length} trials` + (list.length > shown ? `, first ${shown} shown` : "");
    more.hidden = list.length <= shown;
    table.querySelectorAll("th[data-key]").forEach((th) => {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && asc);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && !asc);
    });
  }

  table.querySelectorAll("th[data-key]").forEach((th) =>
    th.addEventListener("click", () => {
      asc = th.dataset.key === sortKey ? !asc : true;
      sortKey = th.dataset.key;
      render();
    })
  );
  ["f-text", "f-cat", "f-err", "f-min", "f-max"].forEach((id) => $(id).addEventListener("input", () => { shown = PAGE; render(); }));
  more.addEventListener("click", () => { shown += PAGE; render(); });
  render();

  // Live: poll this server's state API; refresh the headline, plots and rows when the index
  // changed. Never from file:// (a static bundle) and never to another host.
  if (!data.live || location.protocol === "file:") return;
  let version = data.version;
  async function poll() {
    try {
      const res = await fetch(`${data.api}?since=${encodeURIComponent(version)}`, { cache: "no-store" });
      if (res.ok) {
        const st = await res.json();
        if (st.headline) $("headline").innerHTML = st.headline;
        if (st.rows) {
          version = st.version;
          rows = unpack(st.rows);
          $("plots").innerHTML = st.plots;
          const known = new Set(Array.from($("f-err").options).map((o) => o.value));
          for (const k of new Set(rows.map((r) => r.err).filter(Boolean))) {
            if (!known.has(k)) $("f-err").add(new Option(k, k));
          }
          render();
        }
        document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
        setTimeout(poll, st.running ? 1000 : 3000);
        return;
      }
    } catch (e) { /* the server went away: try again later */ }
    setTimeout(poll, 3000);
  }
  setTimeout(poll, 1000);
}
