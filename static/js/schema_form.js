// Form fields for a value of a JSON schema (τ²'s tool parameters), shared by the play page
// (play.js) and the OpenEnv playground (agents_playground.js).
//
// SchemaForm.makeNode(schema, label, required, onChange) → a node: `node.wrap` (its element),
// `node.collect(path, errors, nodes)` → the value read back (undefined when left empty; a
// problem goes in errors[path], each node in nodes[path]), `node.setError(message)`.
// Objects become fieldsets, arrays lists with Add/Remove (onChange() after each), enums
// and booleans selects, anything else without a type a JSON textarea.
(function () {
  "use strict";

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") node.textContent = v;
      else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
    }
    children.forEach((c) => c && node.appendChild(c));
    return node;
  }

  function typeName(schema) {
    if (schema.enum) return "one of the choices";
    return { integer: "integer", number: "number", boolean: "true / false", string: "text", array: "list", object: "object" }[schema.type] || "JSON";
  }

  // A node renders one value of `schema` and knows how to read it back:
  // collect(path, errors, nodes) → the value, or undefined when left empty.
  function makeNode(schema, label, required, onChange) {
    const wrap = el("div", { class: "tool-field" });
    const error = el("span", { class: "field-error", "data-testid": "field-error" });
    const hint = el("span", { class: "hint", text: `${typeName(schema)} · ${required ? "required" : "optional"}${schema.description ? " — " + schema.description : ""}` });
    const node = { wrap, setError(message) { error.textContent = message || ""; wrap.classList.toggle("invalid", !!message); } };

    if (schema.type === "object" && schema.properties) {
      const fieldset = el("fieldset", { class: "tool-group" }, el("legend", { text: label }), hint);
      const children = Object.entries(schema.properties).map(([name, sub]) => {
        const child = makeNode(sub, name, (schema.required || []).includes(name), onChange);
        child.name = name;
        fieldset.appendChild(child.wrap);
        return child;
      });
      wrap.append(fieldset, error);
      node.collect = (path, errors, nodes) => {
        nodes[path || "__all__"] = node;
        const value = {};
        children.forEach((child) => {
          const v = child.collect(path ? `${path}.${child.name}` : child.name, errors, nodes);
          if (v !== undefined) value[child.name] = v;
        });
        if (!Object.keys(value).length && !required && path) return undefined;
        return value;
      };
      node.testid = null;
      return node;
    }

    if (schema.type === "array") {
      const list = el("div", { class: "array-items" });
      const items = [];
      const add = el("button", { type: "button", class: "secondary", "data-testid": `add-${label}`, text: `Add to ${label}` });
      add.addEventListener("click", () => {
        const child = makeNode(schema.items || {}, `${label} item`, true, onChange);
        const remove = el("button", { type: "button", class: "secondary", text: "Remove" });
        const box = el("div", { class: "array-item" }, child.wrap, remove);
        remove.addEventListener("click", () => { items.splice(items.indexOf(child), 1); box.remove(); onChange(); });
        items.push(child);
        list.appendChild(box);
        onChange();
      });
      wrap.append(el("fieldset", { class: "tool-group" }, el("legend", { text: label }), hint, list, add), error);
      node.collect = (path, errors, nodes) => {
        nodes[path] = node;
        if (!items.length) {
          if (required) errors[path] = "Required: add at least one.";
          return required ? [] : undefined;
        }
        return items.map((child, i) => child.collect(`${path}.${i}`, errors, nodes));
      };
      return node;
    }

    const id = `arg-${Math.random().toString(36).slice(2)}`;
    let input;
    if (schema.enum || schema.type === "boolean") {
      const choices = schema.enum || [true, false];
      input = el("select", { id }, el("option", { value: "", text: "—" }));
      choices.forEach((c) => input.appendChild(el("option", { value: JSON.stringify(c), text: String(c) })));
    } else if (schema.type === "object" || !schema.type) {
      input = el("textarea", { id, rows: 3, placeholder: "JSON" });
    } else {
      input = el("input", { id, type: "text", inputmode: schema.type === "string" ? undefined : "decimal" });
    }
    wrap.append(el("label", { for: id, text: label }), hint, input, error);
    node.input = input;
    node.collect = (path, errors, nodes) => {
      nodes[path] = node;
      input.dataset.testid = `arg-${path}`;
      const raw = input.value;
      if (raw.trim() === "") {
        if (required) errors[path] = "Required.";
        return undefined;
      }
      if (input.tagName === "SELECT") return JSON.parse(raw);
      if (schema.type === "integer") {
        if (!/^-?\d+$/.test(raw.trim())) { errors[path] = "Must be an integer."; return raw; }
        return parseInt(raw, 10);
      }
      if (schema.type === "number") {
        const n = Number(raw);
        if (!Number.isFinite(n)) { errors[path] = "Must be a number."; return raw; }
        return n;
      }
      if (schema.type === "object" || !schema.type) {
        try { return JSON.parse(raw); } catch (e) { errors[path] = "Must be JSON."; return raw; }
      }
      return raw;
    };
    return node;
  }

  window.SchemaForm = { makeNode: makeNode };
})();
