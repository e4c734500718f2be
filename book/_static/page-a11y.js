/* Every page, at the end of the body (book/_templates/layout.html): names for keyboard and
 * screen-reader users that the theme and its extensions leave out (issue 38). */
(function () {
  "use strict";

  // 1. sphinx-copybutton's button on every code cell is a Tab stop with no accessible name (its
  //    "Copy" is a CSS tooltip; the extension has no option for a name): "Copy code: <its first
  //    line>", so that a listener knows which cell it copies.
  function nameCopyButtons() {
    document.querySelectorAll("button.copybtn:not([aria-label])").forEach(function (button) {
      var target = document.querySelector(button.getAttribute("data-clipboard-target"));
      var first = target ? target.textContent.trim().split("\n")[0].trim() : "";
      if (first.length > 48) first = first.slice(0, 45).trimEnd() + "…";
      button.setAttribute("aria-label", first ? "Copy code: " + first : "Copy code");
    });
  }

  // 2. A chapter with a live view: a second skip link beside the theme's "Skip to main content",
  //    as a keyboard reader pressed Tab 70 to 238 times to reach the view. It moves the focus to
  //    the view (which starts it), so the next Tab lands on the view's first control.
  function addLiveSkipLink() {
    var view = document.querySelector(".ab-live");
    var skip = document.getElementById("pst-skip-link");
    if (!view || !skip || document.getElementById("ab-skip-live")) return;
    // The link names the section that holds the view (an anchor the built page has, which the
    // site's link check finds); Enter goes to the view itself.
    var section = view.closest("section[id]");
    if (!section && !view.id) view.id = "ab-live-view";
    var link = document.createElement("a");
    link.id = "ab-skip-live";
    link.href = "#" + (section ? section.id : view.id);
    link.textContent = "Skip to the live view";
    link.addEventListener("click", function (event) {
      event.preventDefault();
      view.setAttribute("tabindex", "-1");
      view.focus({ preventScroll: true });
      view.scrollIntoView({ block: "start" });
    });
    skip.appendChild(document.createTextNode(" "));
    skip.appendChild(link);
  }

  // 3. An answer's fold (a sphinx-design dropdown, scripts/editions.py ANSWER_LABEL) kept saying
  //    "Show answer" once open, where a solution's fold says "Hide solution" (a learner on the
  //    chapter 10 exercises): its label follows its state, so it names what a press will do.
  function labelAnswerFolds() {
    document.querySelectorAll("details.sd-dropdown").forEach(function (fold) {
      var text = fold.querySelector(":scope > summary .sd-summary-text");
      if (!text || !/^(Show|Hide) answer$/.test(text.textContent.trim())) return;
      var update = function () { text.textContent = fold.open ? "Hide answer" : "Show answer"; };
      fold.addEventListener("toggle", update);
      update();
    });
  }

  function run() {
    nameCopyButtons();
    addLiveSkipLink();
    labelAnswerFolds();
  }
  // copybutton.js adds its buttons on DOMContentLoaded, from a listener added before this one.
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { setTimeout(run, 0); });
  } else {
    setTimeout(run, 0);
  }
})();
