// The labelling screen. Keys: 1/2/3/4 or the arrows pick (Shift = the highest strength), Q/W/E set
// the strength (slightly / clearly / much) before or after the pick (a pick without Shift keeps the
// strength chosen; on the change screen, the judgement's stored one), Enter submits, R focuses the
// reason box (Esc leaves it), Z brings back the last judgement, H opens the history, S skips, F opens
// the flag menu (1/2/3 pick the reason, Enter flags, Esc closes; the pair stays on screen). Buttons
// work without this script.
//
// Pair switches without a page load: the server reserves the next pair (its own lease) while the
// current one is read, and sends its HTML; a submission swaps it in at once and sends the verdict in
// the background. Submissions go one after another, in order; each answer says which pair is current
// and reserves the one after it.
(function () {
  "use strict";
  const form = document.getElementById("verdict");
  if (!form) return;
  const screen = document.getElementById("screen");
  const status = document.getElementById("label-status");
  const progress = document.getElementById("progress");
  const history = document.getElementById("history");
  const historyBody = document.getElementById("history-body");
  const elapsed = form.querySelector("input[name=elapsed_ms]");
  const rationale = form.querySelector("textarea[name=rationale]");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]");
  const maxStrength = Number(form.dataset.maxStrength || "1");
  const flagMenu = document.getElementById("flag-menu");
  const flagForm = document.getElementById("flag");
  const live = form.dataset.mode === "label" && screen && screen.dataset.assignment && window.fetch;
  let shownAt = performance.now();  // when the pair on screen was shown
  let picked = form.dataset.currentPick || null;
  let submitting = false;
  let next = null;  // the reserved pair: {assignment, submit_url, skip_url, html}
  let queue = Promise.resolve();  // submissions, one after another

  function button(pick) {
    return form.querySelector('button[data-pick="' + pick + '"]');
  }
  function setStrength(level) {
    const radio = form.querySelector('input[name=strength][value="' + level + '"]');
    if (radio) radio.checked = true;
  }
  function strength() {
    const radio = form.querySelector("input[name=strength]:checked") || form.querySelector("input[name=strength]");
    return radio ? radio.value : "1";
  }
  // The pair's suggestion (a model judge's verdict, marked on screen in words): pre-selected, so
  // Enter keeps it and any pick key changes it.
  function preselectSuggestion() {
    const note = screen && screen.querySelector("[data-suggested-pick]");
    const suggested = note ? note.dataset.suggestedPick : null;
    form.querySelectorAll("button[data-pick]").forEach(function (b) {
      b.classList.toggle("suggested", b.dataset.pick === suggested);
    });
    if (suggested && button(suggested)) select(suggested);
  }
  function select(pick) {
    if (!button(pick)) return;
    picked = pick;
    // A tie or "both bad" has no strength: grey the choice out while one is selected.
    form.querySelectorAll("input[name=strength]").forEach(function (radio) {
      radio.disabled = pick === "tie" || pick === "both_bad";
    });
    form.querySelectorAll("button[data-pick]").forEach(function (b) {
      b.classList.toggle("selected", b.dataset.pick === pick);
      b.setAttribute("aria-pressed", b.dataset.pick === pick ? "true" : "false");
    });
  }
  // Verdicts sent and not yet answered, on the form as data-pending (tests and the bench wait on it).
  let inFlight = 0;
  function pending(change) {
    inFlight += change;
    form.dataset.pending = String(inFlight);
  }
  function say(message) {
    if (!status) return;
    status.textContent = message || "";
    status.hidden = !message;
  }

  // ---- the pair switch (labelling mode only; the edit screen is a plain form) ----
  function post(url, body) {
    return fetch(url, {
      method: "POST",
      body: body || new FormData(),
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": csrf ? csrf.value : "" },
    }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    });
  }
  function show(pair) {
    screen.innerHTML = pair.html;
    screen.dataset.assignment = String(pair.assignment);
    form.action = pair.submit_url;
    const skip = document.getElementById("skip");
    if (skip) skip.action = pair.skip_url;
    if (flagForm && pair.flag_url) flagForm.action = pair.flag_url;
    picked = null;
    form.querySelectorAll("button[data-pick]").forEach(function (b) {
      b.classList.remove("selected");
      b.setAttribute("aria-pressed", "false");
    });
    form.querySelectorAll("input[name=strength]").forEach(function (radio) { radio.disabled = false; });
    setStrength(1);
    preselectSuggestion();
    if (rationale) rationale.value = "";
    submitting = false;
    window.scrollTo(0, 0);
    shownAt = performance.now();
    document.dispatchEvent(new CustomEvent("concord:pair-shown", { detail: { assignment: pair.assignment } }));
  }
  function apply(data) {
    if (data.progress_html) progress.innerHTML = data.progress_html;
    if (data.error) say(data.error);
    if (!data.current) {  // nothing left: the page says so
      window.location.assign(form.dataset.labelUrl);
      return;
    }
    if (String(data.current.assignment) !== screen.dataset.assignment) show(data.current);
    next = data.next;
    if (history && history.open) loadHistory();
  }
  function failed() {
    say("The connection to the server failed; reloading to show where you are.");
    window.setTimeout(function () { window.location.assign(form.dataset.labelUrl); }, 1500);
  }
  function send(url, body) {
    // The reserved pair goes on screen now; the answer confirms it (or brings the right one).
    if (next) { show(next); next = null; }
    pending(1);
    queue = queue.then(function () { return post(url, body).then(apply); }).catch(failed)
      .then(function () { pending(-1); });
  }
  function submit(pick) {
    if (!pick || submitting) return;
    submitting = true;  // a second Enter or a double click sends nothing more
    if (!live) { form.requestSubmit(button(pick)); return; }
    const body = new FormData(form);
    body.set("pick", pick);
    body.set("strength", strength());
    body.set("elapsed_ms", String(Math.round(performance.now() - shownAt)));
    say("");
    send(form.action, body);
  }

  form.addEventListener("submit", function (event) {
    const pick = event.submitter && event.submitter.dataset.pick ? event.submitter.dataset.pick : picked;
    if (live) {
      event.preventDefault();
      if (event.submitter && event.submitter.dataset.pick) select(event.submitter.dataset.pick);
      submit(pick);
      return;
    }
    if (submitting && event.submitter && event.submitter.dataset.pick !== picked) {
      event.preventDefault();
      return;
    }
    submitting = true;
    elapsed.value = String(Math.round(performance.now() - shownAt));
  });
  // The second click of a double click would land on the pair that replaced the judged one.
  form.addEventListener("click", function (event) {
    if (live && event.detail > 1 && event.target.closest("button[data-pick]")) event.preventDefault();
  });
  function skip() {
    const skipForm = document.getElementById("skip");
    if (!skipForm) return;
    if (!live) { skipForm.requestSubmit(); return; }
    if (submitting) return;
    submitting = true;
    send(skipForm.action, new FormData(skipForm));
  }
  const skipForm = document.getElementById("skip");
  if (skipForm && live) {
    skipForm.addEventListener("submit", function (event) { event.preventDefault(); skip(); });
  }
  if (picked) select(picked);
  else if (form.dataset.mode === "label") preselectSuggestion();
  if (live) {
    pending(1);
    queue = post(form.dataset.aheadUrl).then(apply).catch(function () { next = null; })
      .then(function () { pending(-1); });
  }

  // Leaving the screen (Z, a history link) waits for the verdicts still on their way: a page
  // navigation would cancel the ones not sent yet.
  function leave(url) {
    queue.then(function () { window.location.assign(url); });
  }
  if (historyBody) {
    historyBody.addEventListener("click", function (event) {
      const link = event.target.closest("a[href]");
      if (!link || !live || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      leave(link.href);
    });
  }
  document.querySelectorAll('.after a[href]').forEach(function (link) {
    link.addEventListener("click", function (event) {
      if (!live || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      leave(link.href);
    });
  });

  // ---- history ----
  function loadHistory() {
    fetch(form.dataset.historyUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (data) { historyBody.innerHTML = data.html; })
      .catch(function () { historyBody.textContent = "Could not load the history."; });
  }
  if (history) {
    history.addEventListener("toggle", function () { if (history.open) loadHistory(); });
  }

  // ---- flag: sent in the background; the annotator's pair and place do not change ----
  if (flagForm && live) {
    flagForm.addEventListener("submit", function (event) {
      event.preventDefault();
      post(flagForm.action, new FormData(flagForm))
        .then(function (data) { say(data.message); flagMenu.open = false; flagForm.reset(); })
        .catch(function () { say("The flag could not be sent; try again."); });
    });
  }
  function flagKey(event) {
    // While the flag menu is open its keys are the only ones: 1-3 reason, Enter flag, Esc close.
    const inNote = document.activeElement && document.activeElement.name === "note";
    if (event.key === "Escape") { event.preventDefault(); flagMenu.open = false; return; }
    if (inNote) return;  // typing; Enter submits the form by itself
    const radios = flagForm.querySelectorAll("input[name=reason]");
    const digit = event.code && event.code.startsWith("Digit") ? Number(event.code.slice(5)) : Number(event.key);
    if (radios[digit - 1]) { event.preventDefault(); radios[digit - 1].checked = true; }
    else if (event.key === "Enter") { event.preventDefault(); flagForm.requestSubmit(); }
  }

  // ---- keys ----
  const keys = { "1": "left", ArrowLeft: "left", "2": "right", ArrowRight: "right", "3": "tie", "4": "both_bad" };
  const shifted = { "!": "left", "@": "right" };  // Shift+1 / Shift+2 on US layouts
  const strengths = { q: 1, w: 2, e: 3 };
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      if (event.key === "Enter" && document.activeElement === rationale) submit(picked);
      return;
    }
    if (document.activeElement === rationale) {
      if (event.key === "Escape") rationale.blur();
      return;
    }
    if (flagMenu && flagMenu.open) { flagKey(event); return; }
    const active = document.activeElement;
    const typing = active && (active.isContentEditable || active.tagName === "SELECT" ||
      (active.tagName === "INPUT" && !["radio", "checkbox", "submit", "button"].includes(active.type)));
    if (typing) return;
    const digit = event.code && event.code.startsWith("Digit") ? event.code.slice(5) : null;
    const pick = keys[event.key] || shifted[event.key] || (digit && keys[digit]);
    if (pick) {
      event.preventDefault();
      select(pick);
      // Only Shift changes the strength with a pick: a strength pressed first (or the stored one
      // on the change screen) stays. A new pair starts at "slightly" (show()).
      if (event.shiftKey && (pick === "left" || pick === "right")) setStrength(maxStrength);
      return;
    }
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    if (key in strengths) {
      event.preventDefault();
      setStrength(Math.min(key === "e" ? maxStrength : strengths[key], maxStrength));
    } else if (key === "Enter") { event.preventDefault(); if (!event.repeat) submit(picked); }
    else if (key === "r" && rationale) { event.preventDefault(); rationale.focus(); }
    else if (key === "h" && history) {
      event.preventDefault();
      history.open = !history.open;
      if (history.open) history.scrollIntoView({ block: "nearest" });
    }
    else if (key === "z") { leave(form.dataset.undoUrl); }
    else if (key === "s") { skip(); }
    else if (key === "f" && flagMenu) { event.preventDefault(); flagMenu.open = true; }
  });
})();
