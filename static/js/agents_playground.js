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
  var conversation = document.getElementById("pg-conversation");
  var result = document.getElementById("pg-result");
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

  // ------------------------------------------------------------------ the conversation
  //
  // Drawn as the run page draws one (templates/includes/run_event.html's markup and the
  // site's classes): the customer's and the agent's messages, each tool call and its
  // result. While it goes, from what each frame says; once over, from τ²'s own messages.

  // τ²'s control words that end a conversation, as the run page words them
  // (apps.runs.presenters.STOP_MARKERS): shown as a line, not as text.
  var STOP_MARKERS = {
    "###STOP###": "ended the conversation",
    "###TRANSFER###": "asked for a transfer to a human agent",
    "###OUT-OF-SCOPE###": "ended the conversation: out of scope",
  };

  function bubble(kind, text) {
    var event = el("div", { "class": "event event-" + kind, "data-testid": "pg-event", "data-kind": kind });
    var ended = "";
    text = String(text);
    Object.keys(STOP_MARKERS).forEach(function (marker) {
      if (text.indexOf(marker) >= 0) {
        ended = ended || STOP_MARKERS[marker];
        text = text.split(marker).join("").trim();
      }
    });
    if (text) {
      var box = el("div", { "class": "bubble " + kind });
      box.appendChild(el("div", { "class": "who" }, kind === "customer" ? "Customer" : "Agent"));
      var prose = el("div", { "class": "prose" });
      text.split(/\n{2,}/).forEach(function (part) { prose.appendChild(el("p", {}, part)); });
      box.appendChild(prose);
      event.appendChild(box);
    }
    if (ended) {
      var line = el("p", { "class": "stop-marker", "data-testid": "stop-marker" });
      line.appendChild(el("span", { "class": "stop-icon", "aria-hidden": "true" }));
      line.appendChild(document.createTextNode((kind === "customer" ? "The customer " : "The agent ") + ended));
      event.appendChild(line);
    }
    return event;
  }

  function toolRow(kind, label, name, body, error) {
    var phone = kind === "customer" || kind === "customer_tool_result";
    var row = el("details", {
      "class": "tool-row" + (label === "call" ? "" : " result") + (phone ? " phone" : ""),
      "data-testid": label === "call" ? "pg-tool-call" : "pg-tool-result",
    });
    var summary = el("summary");
    var chip = label === "call"
      ? el("span", { "class": "chip " + (phone ? "user" : "basis") }, phone ? "phone tool" : "tool call")
      : el("span", { "class": "chip " + (error ? "write" : "read") }, error ? "tool error" : "result");
    summary.appendChild(chip);
    summary.appendChild(document.createTextNode(" "));
    if (name) summary.appendChild(el("code", {}, name));
    else summary.appendChild(el("span", { "class": "muted" }, body.length > 120 ? body.slice(0, 119) + "…" : body));
    row.appendChild(summary);
    row.appendChild(el("pre", { "class": "args" }, body));
    return row;
  }

  function add(node) {
    conversation.appendChild(node);
    conversation.hidden = false;
  }

  function addCall(name, args, output, error) {
    var event = el("div", { "class": "event event-agent", "data-testid": "pg-event", "data-kind": "agent" });
    event.appendChild(toolRow("agent", "call", name, JSON.stringify(args, null, 2)));
    add(event);
    var answer = el("div", { "class": "event event-tool_result", "data-testid": "pg-event", "data-kind": "tool_result" });
    answer.appendChild(toolRow("tool_result", "result", "", output, error));
    add(answer);
  }

  function text(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  // τ²'s messages (metadata.messages of the final observation), as the run page shows them.
  function drawMessages(messages) {
    conversation.replaceChildren();
    messages.forEach(function (m) {
      if (m.role === "tool") {
        var kind = m.requestor === "user" ? "customer_tool_result" : "tool_result";
        var event = el("div", { "class": "event event-" + kind + (m.error ? " event-error" : ""), "data-testid": "pg-event", "data-kind": kind });
        event.appendChild(toolRow(kind, "result", "", text(m.content), m.error));
        add(event);
        return;
      }
      var who = m.role === "user" ? "customer" : "agent";
      var node = m.content ? bubble(who, m.content) : el("div", { "class": "event event-" + who, "data-testid": "pg-event", "data-kind": who });
      (m.tool_calls || []).forEach(function (call) {
        node.appendChild(toolRow(who, "call", call.name, JSON.stringify(call.arguments, null, 2)));
      });
      add(node);
    });
  }

  // τ²'s reward and its breakdown, as templates/includes/reward.html shows them.
  // The met / not met mark of templates/includes/check.html (inline SVG, not an emoji).
  var SVG = "http://www.w3.org/2000/svg";
  function check(ok) {
    var svg = document.createElementNS(SVG, "svg");
    var attrs = { "class": "check " + (ok ? "met" : "unmet"), viewBox: "0 0 16 16", width: "16", height: "16",
      role: "img", "aria-label": ok ? "met" : "not met", "data-testid": ok ? "check-met" : "check-unmet" };
    Object.keys(attrs).forEach(function (name) { svg.setAttribute(name, attrs[name]); });
    var path = document.createElementNS(SVG, "path");
    path.setAttribute("d", ok ? "M3 8.5l3.2 3.2L13 4.8" : "M4 4l8 8M12 4l-8 8");
    svg.appendChild(path);
    return svg;
  }

  function checks(title, items, describe) {
    if (!items || !items.length) return;
    result.appendChild(el("h3", {}, title));
    var list = el("ul", { "class": "checks" });
    items.forEach(function (c) {
      var parts = describe(c);
      var li = el("li");
      li.appendChild(check(parts[0]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", {}, parts[1]));
      if (parts[2]) li.appendChild(el("span", { "class": "muted" }, " — " + parts[2]));
      list.appendChild(li);
    });
    result.appendChild(list);
  }

  function drawResult(reward, info, error) {
    result.replaceChildren();
    var head = el("h2", {}, "Reward ");
    var scored = reward !== null && reward !== undefined;
    head.appendChild(el("span", { "class": "reward " + (scored && reward >= 0.999 ? "pass" : "fail"), "data-testid": "pg-reward-value" }, scored ? Number(reward).toFixed(2) : "none"));
    result.appendChild(head);
    if (!info) {
      result.appendChild(el("p", { "class": "muted" }, error ? "Not scored: " + error : "τ² gave no breakdown."));
      result.hidden = false;
      return;
    }
    result.appendChild(el("p", { "class": "muted" }, "Basis: " + ((info.reward_basis || []).join(", ") || "—") +
      ". τ²-bench multiplies one factor per component of the basis."));
    var breakdown = el("ul", { "class": "breakdown", "data-testid": "pg-breakdown" });
    Object.keys(info.reward_breakdown || {}).forEach(function (name) {
      var li = el("li");
      li.appendChild(el("code", {}, name));
      li.appendChild(document.createTextNode(" " + Number(info.reward_breakdown[name]).toFixed(2)));
      breakdown.appendChild(li);
    });
    result.appendChild(breakdown);
    if (info.db_check) {
      result.appendChild(el("h3", {}, "Database check"));
      var db = el("p");
      db.appendChild(check(info.db_check.db_match));
      db.appendChild(document.createTextNode(info.db_check.db_match
        ? " The final database matches the expected one." : " The final database differs from the expected one."));
      result.appendChild(db);
    }
    checks("Environment assertions", info.env_assertions, function (c) {
      return [c.met, c.env_assertion.env_type + "." + c.env_assertion.func_name];
    });
    checks("Must-tell checks", info.communicate_checks, function (c) { return [c.met, c.info, c.justification]; });
    checks("Natural-language assertions", info.nl_assertions, function (c) { return [c.met, c.nl_assertion, c.justification]; });
    checks("Expected actions", info.action_checks, function (c) { return [c.action_match, c.action.name]; });
    result.hidden = false;
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
    var meta = (observation.observation && observation.observation.metadata) || {};
    if (meta.messages) drawMessages(meta.messages);
    drawResult(reward, meta.reward_info, error);
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
    // The customer, from the one model picker (includes/model_picker.html): empty is the
    // server's default customer, on the person's own Hugging Face token.
    var customer = form.elements.user_model;
    if (customer && customer.value) data.user_model = customer.value;
    busy = true;
    rewardLine.hidden = true;
    result.hidden = true;
    conversation.replaceChildren();
    say("Starting the episode: the customer is writing their first message…");
    send({ type: "reset", data: data }).then(function (frame) {
      var problem = errorOf(frame);
      if (problem) throw new Error(problem);
      var meta = frame.data.observation.metadata || {};
      say("Task " + meta.task_id + " (" + meta.domain + ", " + meta.split + ")" +
        (meta.user_model ? " · customer model " + meta.user_model : "") + " — customer: " +
        (meta.user_message || "…"));
      if (meta.user_message) add(bubble("customer", meta.user_message));
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
        if (name === "respond_to_user") {
          add(bubble("agent", args.message || ""));
          if (output) add(bubble("customer", text(output)));
        } else if (name !== "done") {
          addCall(name, args, text(output), Boolean(observation.error));
        }
        showReward(frame.data);
      })
      .catch(function () { /* the close handler said why */ })
      .then(function () { busy = false; });
  });

  form.elements.domain.addEventListener("change", fillSplitsAndTasks);
  fillSplitsAndTasks();
})();
