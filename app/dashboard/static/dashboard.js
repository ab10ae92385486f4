// The dashboard's only script, served by the service itself (its Content-Security-Policy
// allows no inline script). Pages work without it.

// A button with data-copy="<field id>" copies that field's value (a secret shown once).
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) {
    return;
  }
  var field = document.getElementById(button.dataset.copy);
  navigator.clipboard.writeText(field.value).then(function () {
    button.textContent = "Copied";
  });
});
