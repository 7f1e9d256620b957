// Copy buttons: <button data-copy="#element-id">. The clipboard API needs a secure context
// (https or localhost); elsewhere the text is selected so the user can copy it by hand.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  const status = button.parentElement.querySelector("[data-copy-status]");
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    if (status) status.textContent = "Copied.";
  } catch (error) {
    window.getSelection().selectAllChildren(source);
    if (status) status.textContent = "Selected: press Ctrl+C to copy.";
  }
});

// Destructive actions ask first: <button data-confirm="Open Wave 2 now?"> (or the attribute on
// the <form>). htmx forms use hx-confirm, which htmx asks itself.
document.addEventListener("submit", (event) => {
  const message = event.submitter?.dataset.confirm || event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// A table too wide for the screen scrolls sideways inside its card; while it does, it can be
// focused and scrolled from the keyboard, and is named after its section.
const tableScroll = new ResizeObserver((entries) => {
  for (const { target } of entries) {
    if (target.scrollWidth > target.clientWidth + 1) {
      const heading = target.closest("section, .card")?.querySelector("h2, h3");
      target.tabIndex = 0;
      target.setAttribute("role", "region");
      target.setAttribute("aria-label", `${heading ? heading.textContent.trim() : "Table"} (scrolls sideways)`);
    } else {
      ["tabindex", "role", "aria-label"].forEach((name) => target.removeAttribute(name));
    }
  }
});
const tablesWatch = (root) => root.querySelectorAll(".table-wrap").forEach((el) => tableScroll.observe(el));
document.addEventListener("DOMContentLoaded", () => tablesWatch(document));
document.addEventListener("htmx:load", (event) => tablesWatch(event.target));
