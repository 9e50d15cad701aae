// The doctor's panel: opened, it asks GET /api/doctor once (the server examines the run's
// weights, metrics and up to 100 validation sentences) and lists each finding with its
// value, the limit it crossed, the fix and what the cause cost in the study notes' recipe.
"use strict";

function findingItem(finding) {
  const item = document.createElement("li");
  const head = document.createElement("p");
  const name = document.createElement("strong");
  name.textContent = finding.id;
  head.append(name, ` ${finding.value} (limit ${finding.limit}): ${finding.message}`);
  item.append(head);
  const follows = (finding.follows_from || []).join(" and ");
  const first = follows ? `may follow from ${follows}: fix that first` : "";
  for (const [label, text] of [["cause", first], ["fix", finding.fix], ["cost", finding.cost]]) {
    if (!text) continue;
    const line = document.createElement("p");
    line.className = "muted";
    line.textContent = `${label}: ${text}`;
    item.append(line);
  }
  return item;
}

async function examine() {
  $("doctor-status").textContent = "examining the run…";
  try {
    const response = await fetch("/api/doctor");
    const report = await response.json();
    if (!response.ok) throw new Error(report.error || `HTTP ${response.status}`);
    $("doctor-findings").replaceChildren(...report.findings.map(findingItem));
    $("doctor-status").textContent = report.findings.length
      ? `${report.findings.length} finding(s):` : "nothing found.";
    const skipped = Object.entries(report.not_checked).map(([id, why]) => `${id} (${why})`);
    $("doctor-checked").textContent = `Checked, nothing found: ${report.checked.join(", ") || "none"}.` +
      (skipped.length ? ` Not checked: ${skipped.join(", ")}.` : "");
  } catch (err) {
    $("doctor-status").textContent = `the doctor could not examine the run: ${err.message}`;
  }
}

$("doctor-panel").addEventListener("toggle", (event) => {
  if (event.target.open && !event.target.dataset.examined) {
    event.target.dataset.examined = "yes";
    examine();
  }
});
