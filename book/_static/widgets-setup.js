/* Loaded on widget pages only, between require.js and the widget manager
 * (see nb_ipywidgets_js in _config.yml; the files come from scripts/vendor_js.py). */
(function () {
  "use strict";
  // Folder of this file, i.e. the site's _static/ (drop Sphinx's "?v=..." suffix).
  var here = document.currentScript.src.split("?")[0].replace(/[^/]*$/, "");

  // 1. The widget manager's CSS loads its Font Awesome files from next to the module
  //    URL that require.js derives from the module's name; map the name to the
  //    vendored folder, or the fonts would be looked for under the page's own folder.
  window.require.config({
    paths: { "@jupyter-widgets/html-manager/dist": here + "widgets/html-manager" },
  });

  // 2. The widget manager typesets labels through MathJax 2's MathJax.Hub.Queue; the
  //    site runs MathJax 3, which has no Hub. Offer that one entry point, mapped to
  //    MathJax 3's typesetPromise, on the configuration object (before MathJax has
  //    started) and again on the MathJax object that replaces it once it is ready.
  function typeset(elements) {
    var mj = window.MathJax;
    if (mj && typeof mj.typesetPromise === "function") {
      mj.typesetPromise(elements).catch(function (err) {
        console.warn("MathJax could not typeset a widget label:", err);
      });
    } // Not started yet: its first pass typesets the whole page, widgets included.
  }
  function addHub() {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {
        Queue: function () {
          Array.prototype.forEach.call(arguments, function (job) {
            if (Array.isArray(job) && job[0] === "Typeset") {
              typeset(job[2] ? [job[2]] : undefined);
            }
          });
        },
      };
    }
  }
  var config = window.MathJax || (window.MathJax = {});
  var startup = config.startup || (config.startup = {});
  var ready = startup.ready;
  startup.ready = function () {
    if (ready) {
      ready();
    } else {
      window.MathJax.startup.defaultReady();
    }
    addHub();
  };
  addHub();
})();
