// Forms whose kind decides their fields (the training-run admin form, the model-judge form): choosing
// another kind in the select marked data-reload-kind reloads the page with ?kind=<value> (the other
// parameters of the address are kept), and the server renders that kind's fields only. Runs once the
// page is parsed: the admin loads this script in <head>, before the select exists.
(function () {
  "use strict";
  function reloadOnKindChange() {
    const kind = document.querySelector("select[data-reload-kind]");
    if (!kind) return;
    kind.addEventListener("change", function () {
      const url = new URL(window.location.href);
      url.searchParams.set("kind", kind.value);
      window.location.assign(url.toString());
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", reloadOnKindChange);
  } else {
    reloadOnKindChange();
  }
})();
