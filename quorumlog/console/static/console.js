// quorumlog console: keeps the sections marked data-live current without a reload. The
// node renders (and escapes) every page; this script only re-reads the page it is on and
// swaps those sections in, so it never builds markup from the cluster's data itself.
"use strict";

const main = document.querySelector("main[data-live-ms]");
const updated = document.getElementById("updated");

async function refresh() {
  const live = document.querySelectorAll("[data-live]");
  if (live.length === 0) return;
  try {
    const response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = page.querySelectorAll("[data-live]");
    if (!response.ok || fresh.length !== live.length) {
      throw new Error(`HTTP ${response.status}`);
    }
    live.forEach((section, i) => section.replaceWith(document.importNode(fresh[i], true)));
    setStatus(`updated ${new Date().toLocaleTimeString()}`, false);
  } catch (error) {
    setStatus(`not updated: ${error.message}`, true);
  }
}

function setStatus(text, stale) {
  if (!updated) return;
  updated.textContent = text;
  updated.classList.toggle("stale", stale);
}

// The next refresh is timed from the end of the last: a slow node is not asked again
// before it answered.
async function keepCurrent(everyMs) {
  await refresh();
  setTimeout(keepCurrent, everyMs, everyMs);
}

if (main) {
  const everyMs = Number(main.dataset.liveMs) || 2000;
  setTimeout(keepCurrent, everyMs, everyMs);
}
