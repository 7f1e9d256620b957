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
