// Admin "add training run": choosing another kind reloads the form with that kind's settings.
(function () {
  "use strict";
  const kind = document.querySelector("select[data-reload-kind]");
  if (!kind || !/\/add\/$/.test(window.location.pathname)) return;
  kind.addEventListener("change", function () {
    const url = new URL(window.location.href);
    url.searchParams.set("kind", kind.value);
    window.location.assign(url.toString());
  });
})();
