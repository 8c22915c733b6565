// The play page: live events over /ws/runs/<id>/, the player's actions as fetch POSTs,
// and a tool form built from the tool's JSON schema (resolved on the server: no $ref).
(() => {
  const root = document.getElementById("play");
  if (!root) return;
  const runId = root.dataset.runId;
  const events = document.getElementById("events");
  const notice = document.getElementById("play-message");
  const tools = JSON.parse(document.getElementById("tool-schemas").textContent);
  let lastSeq = parseInt(root.dataset.lastSeq, 10);
  let final = root.dataset.final === "true";
  let finalSeq = final ? lastSeq : null; // the last event of an ended session
  let socket = null; // the live socket (static/js/live_socket.js)

  // ------------------------------------------------------------ events and state

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function addEvent(seq, html) {
    if (seq <= lastSeq) return null;
    const node = fragment(html);
    events.appendChild(node);
    lastSeq = seq;
    root.dataset.lastSeq = String(lastSeq);
    node.scrollIntoView({ block: "nearest" });
    closeWhenComplete();
    return node;
  }

  // An ended session needs no socket once every event up to its last one is shown.
  function complete() {
    return final && lastSeq >= finalSeq;
  }

  function closeWhenComplete() {
    if (complete() && socket) socket.close();
  }

  function say(text) {
    notice.textContent = text || "";
    notice.hidden = !text;
  }

  function setEnabled(enabled) {
    root.querySelectorAll("#say-form textarea, #say-form button, #tool-name, #tool-form button, #tool-form input, #tool-form select, #tool-form textarea, #end-form button")
      .forEach((el) => { el.disabled = !enabled; });
    // No tool chosen yet (the form opens on none): nothing to call.
    const call = document.querySelector("#tool-form button[type=submit]");
    const picked = document.getElementById("tool-name");
    if (call && picked && !picked.value) call.disabled = true;
  }

  function applyState(state) {
    const current = document.getElementById("play-state");
    const next = fragment(state.html);
    current.replaceWith(next);
    bindForms(next);
    setEnabled(state.can_act);
    root.dataset.phase = state.phase;
    if (state.final) {
      final = true;
      finalSeq = state.last_seq ?? lastSeq;
      root.dataset.final = "true";
      closeWhenComplete();
      // An ended session keeps no controls (as the page renders it once final).
      const controls = document.getElementById("play-controls");
      if (controls) controls.remove();
    }
  }

  async function refreshState() {
    const response = await fetch(root.dataset.stateUrl, { headers: { Accept: "application/json" } });
    if (response.ok) applyState((await response.json()).state);
  }

  async function post(form, body) {
    const response = await fetch(form.action, {
      method: "POST",
      body,
      headers: { Accept: "application/json", "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value },
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = { message: `The server answered ${response.status}.` }; }
    const added = (data.events || []).map((e) => addEvent(e.seq, e.html)).filter(Boolean);
    if (data.state) applyState(data.state);
    say(data.message || (data.errors && !form.matches("#tool-form") ? Object.values(data.errors).join(" ") : ""));
    return { ok: response.ok, status: response.status, data, added };
  }

  function bindForms(scope) {
    scope.querySelectorAll("form[data-action]").forEach((form) => {
      if (form.dataset.bound) return;
      form.dataset.bound = "1";
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const body = new FormData(form);
        if (form.dataset.action === "say") {
          if (!body.get("text").trim()) return;
          setEnabled(false);
          const result = await post(form, body);
          if (result.ok) form.querySelector("textarea").value = "";
        } else {
          setEnabled(false);
          await post(form, body);
        }
      });
    });
  }

  const textarea = document.getElementById("say-text");
  if (textarea) textarea.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      document.getElementById("say-form").requestSubmit();
    }
  });

  // ------------------------------------------------------------------- tool form

  const select = document.getElementById("tool-name");
  const fieldsBox = document.getElementById("tool-fields");
  const preview = document.getElementById("tool-preview");
  const description = document.getElementById("tool-description");
  const toolForm = document.getElementById("tool-form");
  const resultBox = document.getElementById("tool-result");
  let form = null; // the root node of the current tool's fields

  // τ²'s schemas as form fields (static/js/schema_form.js); adding or removing a list
  // item refreshes the preview.
  function makeNode(schema, label, required) {
    return window.SchemaForm.makeNode(schema, label, required, update);
  }

  function collect() {
    const errors = {};
    const nodes = {};
    const value = form.collect("", errors, nodes) || {};
    return { value, errors, nodes };
  }

  function update() {
    if (!form) return;
    const { value, nodes } = collect();
    Object.values(nodes).forEach((n) => n.setError(""));
    preview.textContent = JSON.stringify(value, null, 2);
  }

  function showErrors(errors, nodes) {
    Object.values(nodes).forEach((n) => n.setError(""));
    const general = [];
    for (const [path, message] of Object.entries(errors)) {
      const node = nodes[path];
      if (node && path !== "__all__") node.setError(message);
      else general.push(path === "__all__" ? message : `${path}: ${message}`);
    }
    say(general.join(" "));
  }

  function pickTool() {
    const tool = tools.find((t) => t.name === select.value);
    resultBox.replaceChildren();
    if (!tool) { // "Choose a tool…": an empty form
      form = null;
      description.textContent = "";
      fieldsBox.replaceChildren();
      preview.textContent = "{}";
      setEnabled(!select.disabled);
      return;
    }
    description.textContent = tool.description;
    fieldsBox.replaceChildren();
    form = makeNode(tool.schema, tool.name, true);
    fieldsBox.appendChild(form.wrap);
    resultBox.replaceChildren();
    update();
    setEnabled(!select.disabled);
  }

  bindForms(document);
  window.tau2Play = { get lastSeq() { return lastSeq; } };
  // Resumed after lastSeq; addEvent skips what the page shows already (from a POST's answer
  // too). Kept open until the session's last event is shown, not merely until it is final.
  // The customer's (or the judge's) LLM call under way, as the socket tells it
  // (static/js/call_line.js): waiting, or retrying after a timeout or a rate limit.
  const callLine = document.getElementById("play-call");
  let call = null;
  function showCall(text) {
    callLine.textContent = text || "";
    callLine.hidden = !text;
  }
  function tickCall() {
    if (call && !final) showCall(window.CallLine.words(call));
  }
  setInterval(tickCall, 1000);
  socket = window.LiveSocket.open({
    path: () => `/ws/runs/${runId}/?after=${lastSeq}&calls=1`,
    done: complete,
    onMessage: (data) => {
      if (data.type === "event") addEvent(data.seq, data.html);
      else if (data.type === "status") refreshState();
      else if (data.type === "call") {
        call = final ? null : window.CallLine.from(data);
        // An answer clears the line; a failure is said by the session's state instead.
        showCall(call ? window.CallLine.words(call) : "");
      }
    },
  });
  if (!select) return; // an ended session has no tool form

  fieldsBox.addEventListener("input", update);
  fieldsBox.addEventListener("change", update);
  select.addEventListener("change", pickTool);

  toolForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!form) { say("Choose a tool first."); return; }
    const { value, errors, nodes } = collect();
    if (Object.keys(errors).length) { showErrors(errors, nodes); return; } // nothing is sent
    const body = new FormData();
    body.append("name", select.value);
    body.append("arguments", JSON.stringify(value));
    setEnabled(false);
    const result = await post(toolForm, body);
    if (result.status === 400 && result.data.errors) showErrors(result.data.errors, nodes);
    // The tool's answer, shown under the form too (the socket may have added the event
    // to the conversation already).
    const answer = (result.data.events || [])
      .map((e) => fragment(e.html))
      .filter((n) => n.dataset.kind === "tool_result")
      .pop();
    if (answer) {
      answer.dataset.testid = "tool-answer"; // a copy, not another event of the conversation
      answer.querySelectorAll("details").forEach((d) => { d.open = true; });
      resultBox.replaceChildren(answer);
    }
  });

  pickTool();
  setEnabled(root.querySelector("#play-state").dataset.phase === "your_turn");
})();
