// Copy buttons: <button data-copy="ID"> copies the value of the field #ID and says so beside it
// (the status element after the button). Loaded as a file: the Content-Security-Policy forbids
// inline scripts.
(function () {
  "use strict";
  function say(button, text) {
    const status = button.parentElement.querySelector(".copy-status");
    if (status) status.textContent = text;
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      const field = document.getElementById(button.dataset.copy);
      if (!field) return;
      field.select();
      const copied = navigator.clipboard && window.isSecureContext
        ? navigator.clipboard.writeText(field.value)
        : Promise.resolve(document.execCommand("copy")).then(function (ok) {
          if (!ok) throw new Error("copy refused");
        });
      copied.then(
        function () { say(button, "Copied."); },
        function () { say(button, "Could not copy: the link is selected, press Ctrl+C (⌘C)."); }
      );
    });
  });
})();
