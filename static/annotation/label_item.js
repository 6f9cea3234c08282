// The rating and ranking screens (label_item.html). Keyboard first; the form works without this
// script (radio buttons and selects, a submit button).
//
// Rating: 1-5 score the focused aspect, Tab / Shift+Tab move between aspects, T or U thumbs up,
// F or D thumbs down. Ranking: Up / Down focus the previous / next response, a number key places
// the focused response at that rank (without ties, a response already there takes the focused
// one's old rank), dragging a response to a place ranks the list top to bottom. Both: Enter
// submits, R focuses the reason box (Esc leaves it), S skips, Z opens the session's last answer
// to change it (undo; the form's data-undo-url, absent when there is none).
(function () {
  "use strict";
  const form = document.getElementById("item-answer");
  if (!form) return;
  const kind = form.dataset.taskType;
  const size = Number(form.dataset.size || "0");
  const allowTies = form.dataset.allowTies === "1";
  const rationale = form.querySelector("textarea[name=rationale]");
  const elapsed = form.querySelector("input[name=elapsed_ms]");
  const skip = document.getElementById("skip");
  const shownAt = performance.now();

  function inText(target) {
    return target && (target.tagName === "TEXTAREA" || (target.tagName === "INPUT" && target.type === "text"));
  }

  // --- Rating --------------------------------------------------------------------------------
  const aspects = Array.from(form.querySelectorAll("fieldset.aspect"));
  function focusedAspect() {
    const i = aspects.indexOf(document.activeElement.closest ? document.activeElement.closest("fieldset.aspect") : null);
    return i;
  }
  function focusAspect(i) {
    if (aspects.length) aspects[Math.max(0, Math.min(aspects.length - 1, i))].focus();
  }
  function score(digit) {
    let i = focusedAspect();
    if (i < 0) { i = 0; focusAspect(0); }
    const radio = aspects[i] && aspects[i].querySelector('input[value="' + digit + '"]');
    if (radio) { radio.checked = true; aspects[i].focus(); }
  }
  function thumbs(value) {
    const radio = form.querySelector('input[name=thumbs][value="' + value + '"]');
    if (radio) radio.checked = true;
  }

  // --- Ranking -------------------------------------------------------------------------------
  const list = document.getElementById("ranking");
  function candidates() { return list ? Array.from(list.querySelectorAll("li.candidate")) : []; }
  function select(li) { return li.querySelector("select"); }
  function focusedCandidate() {
    const li = document.activeElement && document.activeElement.closest ? document.activeElement.closest("li.candidate") : null;
    return li;
  }
  function place(li, rank) {
    if (!li || rank < 1 || rank > size) return;
    const mine = select(li);
    if (!allowTies) {
      candidates().forEach(function (other) {
        if (other !== li && select(other).value === String(rank)) select(other).value = mine.value;
      });
    }
    mine.value = String(rank);
  }
  function moveFocus(step) {
    const all = candidates();
    const i = all.indexOf(focusedCandidate());
    const next = all[Math.max(0, Math.min(all.length - 1, i < 0 ? 0 : i + step))];
    if (next) next.focus();
  }
  let dragged = null;
  candidates().forEach(function (li) {
    li.addEventListener("dragstart", function () { dragged = li; li.classList.add("dragging"); });
    li.addEventListener("dragend", function () { li.classList.remove("dragging"); dragged = null; });
    li.addEventListener("dragover", function (event) { event.preventDefault(); });
    li.addEventListener("drop", function (event) {
      event.preventDefault();
      if (!dragged || dragged === li) return;
      const all = candidates();
      if (all.indexOf(dragged) < all.indexOf(li)) li.after(dragged); else li.before(dragged);
      candidates().forEach(function (each, index) { select(each).value = String(index + 1); });
      dragged.focus();
    });
  });

  form.addEventListener("submit", function () {
    if (elapsed) elapsed.value = String(Math.round(performance.now() - shownAt));
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const key = event.key;
    if (inText(event.target)) {
      if (key === "Escape") { event.target.blur(); event.preventDefault(); }
      return;
    }
    if (key === "Enter") { event.preventDefault(); form.requestSubmit(); return; }
    if (key === "r" || key === "R") { event.preventDefault(); rationale.focus(); return; }
    if ((key === "s" || key === "S") && skip) { event.preventDefault(); skip.requestSubmit(); return; }
    if ((key === "z" || key === "Z") && form.dataset.undoUrl) {
      event.preventDefault();
      window.location.assign(form.dataset.undoUrl);
      return;
    }
    if (kind === "rating") {
      if (key === "Tab" && aspects.length) {
        event.preventDefault();
        const i = focusedAspect();
        focusAspect(i < 0 ? 0 : i + (event.shiftKey ? -1 : 1));
        return;
      }
      if (/^[1-5]$/.test(key)) { event.preventDefault(); score(key); return; }
      if (key === "t" || key === "u" || key === "T" || key === "U") { thumbs("up"); return; }
      if (key === "f" || key === "d" || key === "F" || key === "D") { thumbs("down"); return; }
    } else if (kind === "ranking") {
      if (key === "ArrowDown") { event.preventDefault(); moveFocus(1); return; }
      if (key === "ArrowUp") { event.preventDefault(); moveFocus(-1); return; }
      if (/^[1-8]$/.test(key)) {
        event.preventDefault();
        const li = focusedCandidate() || candidates()[0];
        place(li, Number(key));
        moveFocus(1);
      }
    }
  });
  if (kind === "rating") focusAspect(0);
  if (kind === "ranking" && candidates().length) candidates()[0].focus();
})();
