// The Analysis tab of an agent: "Add field" adds a field's inputs on the page, and the preview
// shows the analysis a call would get as the plan is edited. The page works without it (the
// server adds a field and renders the preview); app/dashboard/analysis.py renders the same.

(function () {
  "use strict";

  function ticked(form, name) {
    var box = form.querySelector('input[type="checkbox"][name="' + name + '"]');
    return box !== null && box.checked;
  }

  function value(row, part) {
    var input = row.querySelector('[name$="-' + part + '"]');
    return input === null ? "" : input.value;
  }

  // The plan the form holds, as the server reads it: rows in order, without those ticked
  // Remove or left empty; an enum's choices split at commas.
  function planOf(form) {
    var fields = [];
    form.querySelectorAll("[data-field]").forEach(function (row) {
      var remove = row.querySelector("[data-remove]");
      if (remove !== null && remove.checked) {
        return;
      }
      var name = value(row, "name").trim();
      var description = value(row, "description");
      var choices = value(row, "choices").split(",").map(function (choice) {
        return choice.trim();
      }).filter(function (choice) {
        return choice !== "";
      });
      if (name === "" && description === "" && choices.length === 0) {
        return;
      }
      fields.push({name: name, type: value(row, "type") || "string", choices: choices});
    });
    return {summary: ticked(form, "summary"), fields: fields};
  }

  function exampleAnalysis(plan, examples) {
    var fields = {};
    plan.fields.forEach(function (field) {
      if (field.type === "enum") {
        fields[field.name] = field.choices.length ? field.choices[0] : null;
      } else {
        var example = examples.values[field.type];
        fields[field.name] = example === undefined ? null : example;
      }
    });
    return {
      status: "done",
      summary: plan.summary ? examples.summary : null,
      successful: true,
      successReason: examples.successReason,
      fields: fields,
      model: examples.model,
      analyzedAt: examples.analyzedAt,
      costIdr: examples.costIdr
    };
  }

  function addField(form, template) {
    var list = form.querySelector("#plan-fields");
    var rows = list.querySelectorAll("[data-field]");
    var next = 0;
    rows.forEach(function (row) {
      var input = row.querySelector('[name$="-name"]');
      var match = input === null ? null : /^fields-(\d+)-name$/.exec(input.name);
      if (match) {
        next = Math.max(next, Number(match[1]) + 1);
      }
    });
    var html = template.innerHTML.replace(/__n__/g, String(next)).replace(/__number__/g, String(rows.length + 1));
    list.insertAdjacentHTML("beforeend", html);
    var none = document.getElementById("no-fields");
    if (none !== null) {
      none.remove();
    }
    document.getElementById("fields-" + next + "-name").focus();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("plan-form");
    var preview = document.getElementById("analysis-preview");
    if (form === null || preview === null) {
      return;
    }
    var examples = JSON.parse(preview.dataset.examples);
    var render = function () {
      preview.textContent = JSON.stringify(exampleAnalysis(planOf(form), examples), null, 2);
    };
    form.addEventListener("input", render);
    form.addEventListener("change", render);
    var template = document.getElementById("new-field");
    var add = document.getElementById("add-field");
    if (template !== null && add !== null) {
      add.addEventListener("click", function (event) {
        event.preventDefault();
        addField(form, template);
        render();
      });
    }
    render();
  });
}());
