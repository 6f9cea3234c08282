// The project form shows each task type's own settings: when the task type select changes, the
// fields of the other types are hidden (a save ignores them; they keep their values).
(function () {
  "use strict";
  document.querySelectorAll("form[data-testid=project-form]").forEach(function (form) {
    const select = form.querySelector("select[name=task_type]");
    if (!select) return;
    function show() {
      form.querySelectorAll("[data-task-types]").forEach(function (row) {
        row.hidden = row.dataset.taskTypes.split(" ").indexOf(select.value) < 0;
      });
    }
    select.addEventListener("change", show);
    show();
  });
})();
