// The OpenEnv playground: one episode over OpenEnv's /ws, played by hand.
//
// OpenEnv's WebSocket protocol: the client sends {"type": "reset", "data": {...}},
// {"type": "step", "data": <action>} (actions: {"type": "list_tools"} and
// {"type": "call_tool", "tool_name", "arguments"}); the server answers each, in order,
// with {"type": "observation", "data": {"observation", "reward", "done"}} or
// {"type": "error", "data": {"message", "code"}}. The socket opens on the person's own
// session (same origin, session cookie): no token is in this page.
(function () {
  "use strict";

  var form = document.getElementById("pg-reset-form");
  if (!form) return;
  var domains = JSON.parse(document.getElementById("pg-domains").textContent);
  var status = document.getElementById("pg-status");
  var rewardLine = document.getElementById("pg-reward");
  var policy = document.getElementById("pg-policy");
  var toolsSection = document.getElementById("pg-tools");
  var toolForms = document.getElementById("pg-tool-forms");
  var frames = document.getElementById("pg-frames");
  var socket = null;
  var waiting = []; // resolvers of the frames sent, answered in order
  var busy = false;
  var forms = {}; // tool name → its SchemaForm node

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) { node.setAttribute(name, attrs[name]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function say(text) {
    status.textContent = text;
  }

  function showFrame(direction, frame) {
    var item = el("li", { "class": direction, "data-testid": "pg-frame" });
    item.appendChild(el("span", { "class": "pg-dir" }, direction === "sent" ? "→ sent" : "← received"));
    item.appendChild(el("pre", {}, JSON.stringify(frame, null, 2)));
    frames.insertBefore(item, frames.firstChild);
  }

  // ------------------------------------------------------------------ the socket

  function connect() {
    if (socket && socket.readyState === WebSocket.OPEN) return Promise.resolve(socket);
    return new Promise(function (resolve, reject) {
      var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
      var ws = new WebSocket(scheme + "//" + window.location.host + "/ws");
      ws.onopen = function () { socket = ws; resolve(ws); };
      ws.onmessage = function (event) {
        var frame;
        try { frame = JSON.parse(event.data); } catch (e) { frame = { raw: event.data }; }
        showFrame("received", frame);
        var next = waiting.shift();
        if (next) next(frame);
      };
      ws.onclose = function (event) {
        if (socket === ws) socket = null;
        waiting.splice(0).forEach(function (next) {
          next({ type: "error", data: { message: "The connection closed." } });
        });
        say("Connection closed (" + event.code + (event.reason ? ": " + event.reason : "") +
          "). Reset to start again.");
        reject(new Error("closed"));
      };
    });
  }

  function send(frame) {
    return connect().then(function (ws) {
      return new Promise(function (resolve) {
        waiting.push(resolve);
        showFrame("sent", frame);
        ws.send(JSON.stringify(frame));
      });
    });
  }

  function errorOf(frame) {
    if (frame.type === "error") return (frame.data && frame.data.message) || "Error.";
    return null;
  }

  // ------------------------------------------------------------------ reset

  function fillSplitsAndTasks() {
    var name = form.elements.domain.value;
    var domain = domains.filter(function (d) { return d.name === name; })[0] || { splits: [], tasks: [] };
    var split = form.elements.split;
    var keep = split.value || form.dataset.defaultSplit;
    split.replaceChildren();
    domain.splits.forEach(function (s) {
      var option = el("option", { value: s }, s);
      if (s === keep) option.selected = true;
      split.appendChild(option);
    });
    var list = document.getElementById("pg-task-ids");
    list.replaceChildren();
    domain.tasks.forEach(function (id) { list.appendChild(el("option", { value: id })); });
  }

  function showReward(observation) {
    if (!observation.done) {
      rewardLine.hidden = true;
      return;
    }
    var reward = observation.reward;
    var error = observation.observation && observation.observation.metadata &&
      observation.observation.metadata.error;
    rewardLine.textContent = "Episode over — reward: " +
      (reward === null || reward === undefined ? "none" + (error ? " (" + error + ")" : "") : reward);
    rewardLine.hidden = false;
    toolForms.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (busy) return;
    var data = { domain: form.elements.domain.value, split: form.elements.split.value };
    var taskId = form.elements.task_id.value.trim();
    var seed = form.elements.seed.value.trim();
    if (taskId) data.task_id = taskId;
    if (seed) data.seed = parseInt(seed, 10);
    busy = true;
    rewardLine.hidden = true;
    say("Starting the episode: the customer is writing their first message…");
    send({ type: "reset", data: data }).then(function (frame) {
      var problem = errorOf(frame);
      if (problem) throw new Error(problem);
      var meta = frame.data.observation.metadata || {};
      say("Task " + meta.task_id + " (" + meta.domain + ", " + meta.split + ") — customer: " +
        (meta.user_message || "…"));
      policy.querySelector("pre").textContent = meta.policy || "";
      policy.hidden = !meta.policy;
      showReward(frame.data);
      return send({ type: "step", data: { type: "list_tools" } });
    }).then(function (frame) {
      var problem = errorOf(frame);
      if (problem) throw new Error(problem);
      buildToolForms(frame.data.observation.tools || []);
    }).catch(function (error) {
      if (error.message !== "closed") say("Reset refused: " + error.message);
    }).then(function () { busy = false; });
  });

  // ------------------------------------------------------------------ tools

  function buildToolForms(tools) {
    toolForms.replaceChildren();
    // What an agent does most — talk and finish — first, then the domain's tools.
    var first = ["respond_to_user", "done"];
    tools.sort(function (a, b) {
      var ia = first.indexOf(a.name), ib = first.indexOf(b.name);
      return (ia < 0 ? 9 : ia) - (ib < 0 ? 9 : ib) || a.name.localeCompare(b.name);
    });
    forms = {};
    tools.forEach(function (tool) {
      var schema = tool.input_schema || tool.inputSchema || {};
      if (!schema.properties) schema = { type: "object", properties: {} };
      var box = el("details", { "class": "panel pg-tool", "data-testid": "pg-tool-" + tool.name });
      if (first.indexOf(tool.name) >= 0) box.open = true;
      box.appendChild(el("summary", {}, tool.name));
      var toolForm = el("form", { "data-tool": tool.name });
      if (tool.description) toolForm.appendChild(el("p", { "class": "muted" }, tool.description));
      // The fields, as the play page builds them (static/js/schema_form.js).
      forms[tool.name] = window.SchemaForm.makeNode(schema, tool.name, true, function () {});
      toolForm.appendChild(forms[tool.name].wrap);
      toolForm.appendChild(el("p", { "class": "pg-error", role: "alert" }));
      toolForm.appendChild(el("button", { type: "submit" }, "Call " + tool.name));
      box.appendChild(toolForm);
      toolForms.appendChild(box);
    });
    toolsSection.hidden = false;
  }

  // The arguments of a tool's form; each field's problem shown beside it (throws if any).
  function argumentsOf(name) {
    var errors = {};
    var nodes = {};
    var value = forms[name].collect("", errors, nodes) || {};
    Object.keys(nodes).forEach(function (path) { nodes[path].setError(errors[path] || ""); });
    if (Object.keys(errors).length) throw new Error("Some arguments need fixing.");
    return value;
  }

  toolForms.addEventListener("submit", function (event) {
    event.preventDefault();
    var toolForm = event.target;
    var problem = toolForm.querySelector(".pg-error");
    var args;
    try { args = argumentsOf(toolForm.dataset.tool); } catch (error) {
      problem.textContent = error.message;
      return;
    }
    if (busy) return;
    busy = true;
    problem.textContent = "";
    var name = toolForm.dataset.tool;
    say("Calling " + name + "…");
    send({ type: "step", data: { type: "call_tool", tool_name: name, arguments: args } })
      .then(function (frame) {
        var refused = errorOf(frame);
        if (refused) {
          problem.textContent = refused;
          say(name + " refused.");
          return;
        }
        var observation = frame.data.observation || {};
        var output = observation.data !== undefined && observation.data !== null
          ? observation.data : (observation.error && observation.error.message) || "";
        say(name + ": " + (typeof output === "string" ? output : JSON.stringify(output)));
        showReward(frame.data);
      })
      .catch(function () { /* the close handler said why */ })
      .then(function () { busy = false; });
  });

  form.elements.domain.addEventListener("change", fillSplitsAndTasks);
  fillSplitsAndTasks();
})();
