// Admin training-run form: choosing another kind reloads the add page with that kind's settings
// (the snapshot and preset in the address are kept). Runs once the page is parsed: the admin loads
// this script in <head>, before the select exists.
(function () {
  "use strict";
  function reloadOnKindChange() {
    const kind = document.querySelector("select[data-reload-kind]");
    if (!kind || !/\/add\/$/.test(window.location.pathname)) return;
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
