// The review page's one script: a block's text beside the page while its box is hovered or
// focused, and kept there once it is clicked (click again to let go). It only copies what the
// page holds already in inert <template>s: no text is ever parsed as HTML here.
"use strict";
(() => {
  const show = (box, keep) => {
    const page = box.closest(".page");
    const view = page.querySelector(".block-view");
    if (keep && view.dataset.kept === box.dataset.block) {
      delete view.dataset.kept;
      box.classList.remove("kept");
      return;
    }
    if (!keep && view.dataset.kept) return;
    const detail = document.getElementById(box.dataset.block);
    if (!detail) return;
    view.replaceChildren(detail.content.cloneNode(true));
    page.querySelectorAll(".box.on, .box.kept").forEach((b) => b.classList.remove("on", "kept"));
    box.classList.add("on");
    if (keep) {
      view.dataset.kept = box.dataset.block;
      box.classList.add("kept");
    }
  };
  for (const box of document.querySelectorAll(".box")) {
    box.addEventListener("mouseenter", () => show(box, false));
    box.addEventListener("focus", () => show(box, false));
    box.addEventListener("click", () => show(box, true));
  }
  document.documentElement.classList.add("js");
})();
