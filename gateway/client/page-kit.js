// What the hosted pages (the waiting page and the room page) share: the declaration's look,
// and times and waits in words. Served at /sdk/v1/page-kit.js beside the module.

/** Applies the page's declared colours, title and message (as text, never markup). */
export function dress(config) {
  const root = document.documentElement.style;
  root.setProperty("--accent", config.accent_color);
  root.setProperty("--background", config.background_color);
  root.setProperty("--text", config.text_color);
  document.title = config.title;
  document.getElementById("title").textContent = config.title;
  document.getElementById("message").textContent = config.message;
}

/** A time of day in the reader's locale, or a dash. */
export function when(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "—" : date.toLocaleTimeString();
}

/** A wait in words, rounded to the minute. */
export function about(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return "less than a minute";
  const minutes = Math.round(seconds / 60);
  return minutes === 1 ? "about a minute" : `about ${minutes} minutes`;
}

/** Says the page cannot keep the person's place here, and why. */
export function refuse(why) {
  document.getElementById("state").textContent = "This page cannot keep your place in this browser.";
  const problem = document.getElementById("problem");
  problem.hidden = false;
  problem.textContent = why;
}

/** [`refuse`] for a browser whose storage refused the page's first write. */
export function refuseStorage(error) {
  refuse(`storage refused (${error?.name ?? "error"}): allow this site to store data for this tab, then reload`);
}
