// grounded_planner console: one page, four views; the shared state arrives on a WebSocket, actions go to the JSON API.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c === null || c === undefined ? "" : String(c)));
  return node;
};
const SVG = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs) => { const n = document.createElementNS(SVG, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); return n; };
const fmt = (xs, d = 3) => xs ? "[" + xs.map((x) => Number(x).toFixed(d)).join(", ") + "]" : "—";
const STEP_COLOURS = ["#22c55e", "#3b82f6", "#f59e0b", "#e11d48", "#a855f7", "#14b8a6"];

let state = null;
let taxonomy = {};
window.gpShown = [];  // [{stamp_ns, shown_ms}] for benchmarks: when each camera frame was on screen

function toast(text, ms = 4000) {
  const t = $("#toast"); t.textContent = text; t.hidden = false;
  clearTimeout(toast.timer); toast.timer = setTimeout(() => { t.hidden = true; }, ms);
}

async function api(method, path, body) {
  const response = await fetch(path, { method, headers: body ? { "Content-Type": "application/json" } : {},
                                       body: body ? JSON.stringify(body) : undefined, credentials: "same-origin" });
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (!response.ok) { const err = new Error(data.error || response.statusText); err.status = response.status; throw err; }
  return data;
}

const stepText = (a) => `${a.type} ${a.object || ""}${a.target ? " → " + a.target : ""}`.replace(/\s+/g, " ").trim();

// -- the overlay: boxes, points and step numbers of a plan, in the plan image's pixels ---------------------------
function drawPlan(svg, plan) {
  svg.replaceChildren();
  if (!plan || !plan.image_size) return;
  const [w, h] = plan.image_size;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  // sizes in screen pixels whatever the image's resolution: the overlay is drawn in the image's pixels
  const scale = w / (svg.clientWidth || w);
  const stroke = 2.5 * scale;
  (plan.actions || []).forEach((a, i) => {
    const colour = STEP_COLOURS[i % STEP_COLOURS.length];
    let lx = 0, ly = 0;
    if (a.bbox) {
      const [x1, y1, x2, y2] = a.bbox;
      svg.append(svgEl("rect", { x: x1, y: y1, width: x2 - x1, height: y2 - y1, fill: "none", stroke: colour, "stroke-width": stroke }));
      lx = x1; ly = y1;
    }
    if (a.point) {
      const [x, y] = a.point, r = 3 * stroke;
      svg.append(svgEl("circle", { cx: x, cy: y, r, fill: "none", stroke: colour, "stroke-width": stroke }));
      svg.append(svgEl("path", { d: `M${x - 2 * r} ${y}H${x + 2 * r}M${x} ${y - 2 * r}V${y + 2 * r}`, stroke: colour, "stroke-width": stroke / 2 }));
      lx = x + r; ly = y - r;
    }
    const size = 15 * scale;
    const label = svgEl("text", { x: lx + 2, y: Math.max(size, ly - 4), fill: colour, "font-size": size, "font-weight": "700",
                                  "paint-order": "stroke", stroke: "#000", "stroke-width": size / 8 });
    label.textContent = `${i + 1} ${stepText(a)}`;
    svg.append(label);
  });
}

// -- live camera: one frame in flight; the next is asked for when this one is on screen --------------------------
let socket = null, frameUrl = null;
// how wide the page shows the camera, in device pixels: the console encodes no wider (a 1280x720 camera in an 800 px
// view is sent 832 px wide, a third of the pixels to encode, send and decode)
function shownWidth() { return Math.ceil($("#camera").clientWidth * (window.devicePixelRatio || 1)); }
function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/ws`);
  socket.binaryType = "arraybuffer";
  socket.onopen = () => {
    livePaused = false;  // as of now: a console still paused says so right after the state
    $("#conn").textContent = "online"; $("#conn").className = "conn on";
    if (currentView() === "live") askFrame("frames");
  };
  socket.onclose = () => {
    $("#conn").textContent = "offline"; $("#conn").className = "conn off";
    // what the page shows may be out of date (a console that restarted knows no plan of before): no decision from it
    if (state) { state = null; showOffline(); }
    setTimeout(connect, 1000);
  };
  socket.onmessage = (event) => {
    if (typeof event.data === "string") {
      const message = JSON.parse(event.data);
      if (message.type === "state") { state = message.state; render(); }
      // the planner is answering with the arm still: no frames come meanwhile (one element changes, nothing redrawn)
      if (message.type === "live") { livePaused = message.paused; showLivePaused(); }
      return;
    }
    askedAt = 0; framesCame += 1;
    const view = new DataView(event.data);
    const stampNs = view.getBigInt64(0);
    const img = $("#camera");
    const url = URL.createObjectURL(new Blob([event.data.slice(16)], { type: "image/jpeg" }));
    img.onload = () => {
      window.gpShown.push({ stamp_ns: stampNs.toString(), shown_ms: performance.timeOrigin + performance.now() });
      if (window.gpShown.length > 1000) window.gpShown.shift();
      if (frameUrl) URL.revokeObjectURL(frameUrl);
      frameUrl = url;
      $("#camera-empty").hidden = true;
      requestAnimationFrame(() => { if (socket.readyState === 1) askFrame("ack"); });
    };
    img.src = url;
  };
}

// the page asks for the next frame once it showed the last: asked and nothing came for CAMERA_STALE_MS while frames
// should flow, and the camera has likely stopped (the image on screen is old): the page says so on the image
const CAMERA_STALE_MS = 3000;
let askedAt = 0, framesCame = 0;
function askFrame(type) { socket.send(JSON.stringify({ type, width: shownWidth() })); askedAt = performance.now(); }
function showCameraStale() {
  const waitedMs = askedAt && socket && socket.readyState === 1 && !livePausedNow() ? performance.now() - askedAt : 0;
  const note = $("#camera-stale");
  note.hidden = waitedMs < CAMERA_STALE_MS;
  if (note.hidden) return;
  const s = Math.floor(waitedMs / 1000);
  note.textContent = framesCame ? `no new camera image for ${s} s: the camera may have stopped, this image is old`
                                 : `no camera image after ${s} s: is the camera publishing?`;
}
setInterval(showCameraStale, 500);

let livePaused = false, wasPaused = false;
const livePausedNow = () => livePaused && !(state && state.executor && state.executor.state === "running");
function showLivePaused() {
  const paused = livePausedNow();
  if (paused !== wasPaused && askedAt) askedAt = performance.now();  // no frames come in a pause: count from its end
  wasPaused = paused;
  $("#camera-paused").hidden = !paused;
}

// -- rendering the shared state ----------------------------------------------------------------------------------
function render() {
  if (!state) return;
  showLivePaused();
  const ex = state.executor || {};
  $("#exec-badge").textContent = "executor: " + (ex.state || "?").replace("_", " ");
  $("#exec-badge").className = "badge " + (ex.state || "");
  $("#nav-session").hidden = !state.session;
  if (currentView() === "live") renderLive();
  if (currentView() === "session") renderSessionPage();
}

function renderLive() {
  const p = state.planner;
  $("#planner-status").textContent = p ? `${p.success ? "ok" : "FAILED"}: ${p.instruction} — ${p.num_actions} action(s) in ${Number(p.duration_s).toFixed(2)} s${p.message ? " (" + p.message + ")" : ""}` : "no plan yet";
  const ex = state.executor;
  $("#executor-state").textContent = ex.state === "running" ? `running step ${ex.step + 1}: ${ex.motion}` :
    ex.state === "waiting_approval" ? "holding the plan for approval" : ex.state === "gone" ? `GONE: ${ex.message}` :
    `idle${ex.message ? " — " + ex.message : ""}`;
  $("#executor-state").className = ex.state === "gone" ? "bad" : "";
  $("#reset-btn").hidden = state.executor_backend !== "sim";  // a real robot's scene is set back by a person
  renderPlan(state.plan);
  renderEpisode(state.episode);
  renderTally(state.tally);
  $("#log").textContent = (state.log || []).slice().reverse().join("\n");
  renderSessionPanel(state.session);
}

function verdictCell(step) {
  if (!step.verdict) return el("td", { class: "muted" }, "—");
  return el("td", { class: step.verdict === "ok" ? "ok" : "bad", title: step.verdict_message || "" }, step.verdict);
}

function progressCell(plan, i) {
  const s = (plan.progress || {})[String(i)];
  const done = plan.result && (plan.result.steps || []).find((r) => r.index === i);
  if (done) return el("td", { class: done.outcome === "ok" ? "ok" : "bad" }, done.outcome);
  if (!s) return el("td", { class: "muted" }, plan.result ? "not run" : plan.decision === "approved" ? "waiting" : "—");
  return el("td", { class: s === "ok" ? "ok" : (/^[a-z_]+$/.test(s) && s.endsWith("ed") ? "bad" : "run") }, s);
}

const NO_PLAN = "Type an instruction: the plan is shown here before anything moves.";
function showOffline() {
  $("#approve-btn").disabled = $("#reject-btn").disabled = true;
  $("#exec-badge").textContent = "executor: ?"; $("#exec-badge").className = "badge";  // not known from here now
  $("#plan-message").textContent = "offline: the console cannot be reached; Approve and Reject are off until it is back";
  $("#plan-message").className = "bad";
}

function renderPlan(plan) {
  const body = $("#steps tbody");
  body.replaceChildren();
  drawPlan($("#overlay"), plan && plan.plan);
  const approve = $("#approve-btn"), reject = $("#reject-btn");
  if (!plan) {  // none (yet, or since the console started again): nothing of an earlier plan stays on the page
    approve.disabled = reject.disabled = true;
    $("#plan-title").textContent = ""; $("#plan-message").textContent = NO_PLAN; $("#plan-message").className = "muted";
    $("#decision-msg").textContent = ""; $("#decision-msg").className = "";
    return;
  }
  $("#plan-title").textContent = `#${plan.id}: ${plan.instruction}`;
  const msg = plan.success ? (plan.steps.length ? `${plan.steps.length} step(s) in ${plan.duration_s.toFixed(2)} s${plan.message ? " — " + plan.message : ""}`
                                               : `empty plan: ${plan.message || "nothing to do"}`) : `planning failed: ${plan.message}`;
  $("#plan-message").textContent = msg;
  $("#plan-message").className = plan.success ? "muted" : "bad";
  plan.steps.forEach((s, i) => {
    body.append(el("tr", { "data-step": i },
      el("td", {}, i + 1), el("td", {}, stepText(s)),
      el("td", { title: s.frame }, s.position_m ? fmt(s.position_m) + " " + s.frame : "not back-projected"),
      el("td", {}, s.width_m !== null && s.width_m !== undefined ? (s.width_m * 100).toFixed(1) + " cm" : "—"),
      verdictCell(s), progressCell(plan, i)));
  });
  // a decided plan keeps its buttons, dimmed: the console (not this page) says whether a decision is still open, so
  // a late click from a second browser gets the refusal and its reason
  const runnable = plan.success && plan.steps.length > 0;
  approve.disabled = !runnable || plan.refused_steps.length > 0;
  reject.disabled = !runnable;
  for (const b of [approve, reject]) {
    b.classList.toggle("decided", Boolean(plan.decision));
    b.title = plan.decision ? `${plan.decision} by ${plan.decided_by}: the console refuses a second decision` : "";
  }
  const dm = $("#decision-msg");
  if (plan.decision) {
    let text = `${plan.decision} by ${plan.decided_by} at ${plan.decided_at}`;
    if (plan.result) text += ` — ${plan.result.outcome}: ${plan.result.message}`;
    if (plan.error) text += ` — ${plan.error}`;
    if (!dm.classList.contains("refused")) dm.textContent = text;
  } else if (plan.refused_steps.length) {
    dm.textContent = `the safety envelope refuses step(s) ${plan.refused_steps.map((i) => i + 1).join(", ")}: approve is off`;
  } else if (!dm.classList.contains("refused")) dm.textContent = "";
}

function renderTally(tally) {
  const body = $("#tally tbody");
  body.replaceChildren();
  $("#tally-empty").hidden = Boolean(tally && tally.length);
  for (const g of tally || []) {
    body.append(el("tr", {}, el("td", {}, g.task || "—"), el("td", {}, g.condition || "—"), el("td", {}, `${g.successes}/${g.n}`),
      el("td", {}, g.rate === null ? "—" : (100 * g.rate).toFixed(0) + " %"),
      el("td", {}, g.ci95 ? `${(100 * g.ci95[0]).toFixed(0)}–${(100 * g.ci95[1]).toFixed(0)} %` : "—"), el("td", {}, g.unlabelled)));
  }
}

// -- labels: outcome and failure mode, the stack's own label preselected -------------------------------------------
function labelWidget(container, rolloutId, current, onSaved) {
  const key = `${rolloutId}|${current.success}|${current.failure_mode}`;
  if (container.dataset.key === key) return;  // keep the operator's unsaved choice across state pushes
  container.dataset.key = key;
  let success = current.success, mode = current.failure_mode || null;
  const outcomeRow = el("div", { class: "row" }), modeRow = el("div", { class: "row" });
  const notes = el("textarea", { rows: 2, placeholder: "notes (optional)", class: "notes" });
  const save = el("button", { class: "approve save-label" }, "Save label");
  const said = current.success === true ? "success" : current.success === false ? `failure, ${current.failure_mode || "no failure mode yet"}` : "";
  const info = el("div", { class: current.source === "human" ? "ok label-info" : "muted label-info" },
                  !current.source ? "not labelled yet" : current.source === "human" ? `labelled by a person: ${said}`
                                                                            : `label from: ${current.source} (${said}); confirm or correct it`);
  const paint = () => {
    for (const b of outcomeRow.children) b.classList.toggle("chosen", String(success) === b.dataset.outcome);
    for (const b of modeRow.children) { b.classList.toggle("chosen", mode === b.dataset.mode); b.disabled = success !== false; }
    save.disabled = success === null || success === undefined || (success === false && !mode);
  };
  outcomeRow.append(
    el("button", { "data-outcome": "true", onclick: () => { success = true; mode = null; paint(); } }, "✔ Success"),
    el("button", { "data-outcome": "false", onclick: () => { success = false; paint(); } }, "✘ Failure"));
  for (const [name, help] of Object.entries(taxonomy)) {
    modeRow.append(el("button", { class: "mode", "data-mode": name, title: help, onclick: () => { mode = name; paint(); } }, name.replaceAll("_", " ")));
  }
  save.addEventListener("click", async () => {
    try {
      const answer = await api("POST", "/api/label", { rollout: rolloutId, success, failure_mode: success ? null : mode, notes: notes.value || null });
      info.textContent = `saved: ${success ? "success" : "failure, " + mode}` + (answer.trial ? ` — trial ${answer.trial.trial_id} recorded` : "")
        + (answer.trial_error ? ` — but ${answer.trial_error}` : "");
      info.className = (answer.trial_error ? "bad" : "ok") + " label-info";
      if (onSaved) onSaved(answer);
    } catch (e) {  // on the panel until the next save, not only a toast: the operator may look away
      info.textContent = "label not saved: " + e.message + " — the choice is kept here: save again";
      info.className = "bad label-info";
      toast("label not saved: " + e.message);
    }
  });
  container.replaceChildren(outcomeRow, modeRow, notes, el("div", { class: "row" }, save), info);
  paint();
}

function renderEpisode(episode) {
  const panel = $("#label-panel");
  panel.hidden = !episode;
  if (!episode) return;
  // the recording's status only where it is not "complete" (a stopped episode's recording is complete too)
  $("#label-title").textContent = (episode.instruction || episode.id)
    + (episode.status === "complete" ? "" : ` (recording ${episode.status.replace("_", " ")})`);
  $("#label-ended").textContent = episode.ended || "";
  labelWidget($("#live-label"), episode.id, { success: episode.success, failure_mode: episode.failure_mode, source: episode.label_source });
}

// -- evaluation session ----------------------------------------------------------------------------------------------
function cardView(session, withStart) {
  const card = session.card;
  if (session.error) return el("div", { class: "bad", id: "session-error" },
    "The session's trials cannot be read, so no trial can be run or recorded: " + session.error +
    ". Fix or remove that line, then open this page again.");
  if (!card) return el("div", { class: "ok" }, `session complete: ${session.done}/${session.total} trials recorded`);
  const img = card.card_png ? el("img", { src: "/api/session/file?path=" + encodeURIComponent(card.card_png), alt: card.trial_id }) : el("div");
  const start = el("button", { class: "approve", id: "session-start", onclick: async () => {
    try {
      const answer = await api("POST", "/api/session/start", { trial_id: card.trial_id });
      $("#instruction").value = answer.instruction;
      $("#instruction").scrollIntoView({ block: "center" });
      $("#instruction").focus();
      toast(`trial ${card.trial_id}: plan it, approve, then label`);
    } catch (e) { toast(e.message); }
  } }, "Run this trial");
  return el("div", { class: "card" }, img, el("div", {},
    el("div", {}, el("b", {}, card.trial_id), ` (${card.robot})`),
    el("p", {}, "Instruction: ", el("b", {}, card.instruction)),
    el("p", { class: "muted" }, "Success: " + (card.success_rule || "")),
    card.expects_action ? "" : el("p", { class: "bad" }, "No intervention: success means the robot does NOT move."),
    withStart ? start : ""));
}

function renderSessionPanel(session) {
  $("#session-panel").hidden = !session;
  if (!session) return;
  $("#session-progress").textContent = `${session.error ? "?" : session.done}/${session.total}`;
  const key = JSON.stringify([session.done, session.card && session.card.trial_id, session.error]);
  if ($("#session-card").dataset.key !== key) { $("#session-card").dataset.key = key; $("#session-card").replaceChildren(cardView(session, true)); }
}

function renderSessionPage() {
  const s = state && state.session;
  $("#session-detail").replaceChildren(s ? el("div", {}, el("p", {}, `${s.folder}: ${s.error ? "?" : s.done} of ${s.total} trials recorded`), cardView(s, false))
                                          : el("p", {}, "No session: start the console with --session DIR (a scene-card folder)."));
}

// -- rollouts pages --------------------------------------------------------------------------------------------------
// a campaign is thousands of rollouts (Spa-Bench ran 2,892): the list shows one page of them, newest first, and its
// page number stays in the address with the filters (a page past the end, as a filter leaves fewer, shows the last)
const PAGE_ROWS = 100;
let rolloutsPage = 1;
async function loadRollouts(page) {
  if (page === undefined) {  // the page opened: its filters and page from the address (the menus fill in later)
    const params = new URLSearchParams(location.search);
    for (const f of ["task", "condition", "outcome"]) if (params.get(f)) $("#f-" + f).dataset.want = params.get(f);
    page = Math.max(1, parseInt(params.get("page") || "1", 10) || 1);
  }
  const query = new URLSearchParams();
  for (const f of ["task", "condition", "outcome"]) { const v = $("#f-" + f).value || $("#f-" + f).dataset.want || ""; if (v) query.set(f, v); }
  const data = await api("GET", `/api/rollouts?${query}${query.toString() ? "&" : ""}offset=${(page - 1) * PAGE_ROWS}&limit=${PAGE_ROWS}`);
  const pages = Math.max(1, Math.ceil(data.total / PAGE_ROWS));
  if (page > pages) return loadRollouts(pages);
  rolloutsPage = page;
  for (const [f, values] of [["task", data.tasks], ["condition", data.conditions]]) {
    const sel = $("#f-" + f), want = query.get(f) || "";
    sel.replaceChildren(el("option", { value: "" }, "all"), ...values.map((v) => el("option", { value: v }, v || "(none)")));
    sel.value = want;
  }
  $("#f-outcome").value = query.get("outcome") || "";
  for (const f of ["task", "condition", "outcome"]) delete $("#f-" + f).dataset.want;
  if (page > 1) query.set("page", page);
  history.replaceState(null, "", "/rollouts" + (query.toString() ? "?" + query : ""));
  const first = data.offset + 1, last = data.offset + data.rollouts.length;
  $("#rollout-count").textContent = data.total > data.rollouts.length ? `${first}–${last} of ${data.total} rollouts` : `${data.total} rollout(s)`;
  $("#rollout-page").textContent = `page ${page} of ${pages}`;
  $("#rollout-pager").hidden = pages === 1;
  $("#rollouts-newer").disabled = page === 1;
  $("#rollouts-older").disabled = page === pages;
  $("#rollout-list tbody").replaceChildren(...data.rollouts.map(rolloutRow));
}

function rolloutRow(r) {
  return el("tr", {},
    el("td", {}, (r.started_at || "").replace("T", " ").slice(0, 19)),
    el("td", {}, el("a", { href: "/rollout?id=" + encodeURIComponent(r.id) }, r.instruction || r.id)),
    el("td", {}, r.task), el("td", {}, r.condition), el("td", {}, r.status),
    el("td", { class: r.outcome === "success" ? "ok" : r.outcome === "failure" ? "bad" : "muted" },
       r.outcome + (r.failure_mode ? ": " + r.failure_mode : "")));
}

// the frames strip's thumbnails (64 px high, twice that on a tablet's screen) are asked at this width, not whole
const THUMB_WIDTH = 240;
async function loadRollout() {
  const id = new URLSearchParams(location.search).get("id") || "";
  let data;
  try { data = await api("GET", "/api/rollout?id=" + encodeURIComponent(id)); }
  catch (e) { $("#rollout-title").textContent = "Rollout not found"; $("#rollout-meta").textContent = e.message; return; }
  const d = data.record;
  $("#rollout-title").textContent = d.instruction || data.id;
  $("#rollout-meta").replaceChildren(el("div", {}, `${data.id} — recording ${d.status}, task ${d.task || "—"}, condition ${d.condition || "—"}, model ${d.model || "—"}`),
    d.planner_error ? el("div", { class: "bad" }, "planner error: " + d.planner_error) : "",
    d.error ? el("div", { class: "bad" }, d.error) : "", d.notes ? el("div", {}, "notes: " + d.notes) : "");
  const plan = d.plan;  // the plan in pixels, each action's 3D target inside once back-projected
  const targets = {};
  for (const t of (d.targets && d.targets.targets) || []) targets[t.index] = { ...t, frame: t.frame || d.targets.frame };
  const showFrame = (k) => {
    $("#rollout-image").src = `/api/rollout/frame?id=${encodeURIComponent(id)}&k=${k}`;
    for (const t of $("#frames").children) t.classList.toggle("current", Number(t.dataset.k) === k);
  };
  drawPlan($("#rollout-overlay"), plan);
  $("#frames").replaceChildren(...Array.from({ length: data.frames }, (_, k) =>
    el("img", { src: `/api/rollout/frame?id=${encodeURIComponent(id)}&k=${k}&w=${THUMB_WIDTH}`, "data-k": k, loading: "lazy", onclick: () => showFrame(k) })));
  if (data.frames) showFrame(0);
  $("#rollout-plan tbody").replaceChildren(...((plan && plan.actions) || []).map((a, i) => el("tr", {},
    el("td", {}, i + 1), el("td", {}, stepText(a)),
    el("td", {}, a.bbox ? "box " + fmt(a.bbox, 0) : a.point ? "point " + fmt(a.point, 0) : "—"),
    el("td", {}, (() => { const t = a.target_3d || targets[i]; return t ? fmt(t.position) + " " + (t.frame || "") : "—"; })()))));
  $("#rollout-steps tbody").replaceChildren(...(d.steps || []).map((s) => el("tr", {},
    el("td", {}, s.index + 1), el("td", {}, s.type), el("td", { class: s.outcome === "ok" ? "ok" : "bad" }, s.outcome), el("td", {}, s.message))));
  $("#rollout-attempts tbody").replaceChildren(...(d.attempts || []).map((a) => el("tr", {},
    el("td", {}, (a.step ?? 0) + 1), el("td", {}, a.attempt ?? ""), el("td", {}, a.check ?? ""), el("td", {}, a.outcome ?? ""), el("td", {}, a.message ?? ""))));
  $("#rollout-steps-empty").hidden = Boolean(d.steps && d.steps.length);
  $("#rollout-attempts-empty").hidden = Boolean(d.attempts && d.attempts.length);
  labelWidget($("#rollout-label"), data.id, { success: d.success, failure_mode: d.failure_mode, source: d.label_source }, () => loadRollout());
}

// -- STOP: a STOP the console does not confirm says so, on screen, until one is confirmed ---------------------------
const STOP_CONFIRM_MS = 2000;  // a STOP unanswered this long is shown as not confirmed (the answer may still come)
let stopSeq = 0;
function stopAlert(text) {
  $("#stop-alert-text").textContent = `STOP NOT CONFIRMED: ${text}. Use the robot's own emergency stop if it moves.`;
  $("#stop-alert").hidden = false;
}
async function stop() {
  const seq = ++stopSeq, button = $("#stop-btn");
  button.classList.add("sending");
  const slow = setTimeout(() => { if (seq === stopSeq) stopAlert(`no answer from the console after ${STOP_CONFIRM_MS / 1000} s (still waiting)`); }, STOP_CONFIRM_MS);
  try {
    const r = await api("POST", "/api/stop");
    if (seq !== stopSeq) return;  // a later STOP's answer says what holds now
    $("#stop-alert").hidden = true;
    toast(r.cancelled ? "STOP: the running goal was cancelled" : "STOP: nothing was running");
  } catch (e) {
    if (seq === stopSeq) stopAlert(e.status ? `the console answered ${e.status}: ${e.message}` : `the console cannot be reached (${e.message})`);
  } finally {
    clearTimeout(slow);
    if (seq === stopSeq) button.classList.remove("sending");
  }
}

// -- views ------------------------------------------------------------------------------------------------------------
function currentView() {
  const path = location.pathname.replace(/\/+$/, "") || "/";
  return { "/": "live", "/rollouts": "rollouts", "/rollout": "rollout", "/session": "session" }[path] || "live";
}

async function start() {
  const view = currentView();
  for (const v of ["live", "rollouts", "rollout", "session"]) $("#view-" + v).hidden = v !== view;
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.view === view);
  try { taxonomy = (await api("GET", "/api/taxonomy")).failure_modes; } catch (e) { toast("console: " + e.message); }
  $("#stop-btn").addEventListener("click", stop);
  // Escape is STOP on every page, with the focus anywhere (typing an instruction too): a stop without the mouse.
  // A key held down sends one STOP, not one per repeat.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.repeat) return;
    event.preventDefault();
    stop();
  });
  $("#stop-alert-close").addEventListener("click", () => { $("#stop-alert").hidden = true; });
  $("#reset-btn").addEventListener("click", async () => {
    const button = $("#reset-btn");
    button.disabled = true;
    try { toast("scene reset: " + (await api("POST", "/api/reset_scene")).message); }
    catch (e) { toast("scene not reset: " + e.message, 8000); }
    finally { button.disabled = false; }
  });
  $("#plan-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const instruction = $("#instruction").value.trim();
    if (!instruction) { toast("type an instruction first"); return; }
    $("#plan-btn").disabled = true; $("#plan-message").textContent = "planning…"; $("#decision-msg").className = ""; $("#decision-msg").textContent = "";
    try { await api("POST", "/api/plan", { instruction }); }
    catch (e) { toast("plan failed: " + e.message); }
    finally { $("#plan-btn").disabled = false; }
  });
  const decide = (approve) => async () => {
    const dm = $("#decision-msg");
    const planId = state && state.plan && state.plan.id;
    try {
      const r = await api("POST", "/api/decision", { plan_id: planId, approve });
      dm.className = ""; dm.textContent = r.message;
    } catch (e) { dm.className = "refused"; dm.textContent = (approve ? "Approve" : "Reject") + " refused: " + e.message; }
  };
  $("#approve-btn").addEventListener("click", decide(true));
  $("#reject-btn").addEventListener("click", decide(false));
  for (const f of ["task", "condition", "outcome"]) $("#f-" + f).addEventListener("change", () => loadRollouts(1));
  $("#rollouts-newer").addEventListener("click", () => loadRollouts(rolloutsPage - 1));
  $("#rollouts-older").addEventListener("click", () => loadRollouts(rolloutsPage + 1));
  connect();
  if (view === "rollouts") loadRollouts();
  if (view === "rollout") loadRollout();
}

start();
