"""JUnit XML for CI systems: one test case per gate spec (and per fuzz finding).

Takes the gate's result as plain data (`GateResult.to_dict()`), so reports never import the engine.
A failing case's `failure` message names the spec's problems and its verdict.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any


def gate_junit(result: dict[str, Any]) -> str:
    """The gate result as a JUnit XML document (one <testsuite>)."""
    device = result["device"].split(":")[0]
    per_spec = (result.get("timings") or {}).get("per_spec_s", {})
    cases = []
    for s in result["specs"]:
        case = ET.Element("testcase", classname=f"divfuzz.gate.{device}", name=s["name"], time=f"{per_spec.get(s['name'], 0.0):.3f}")
        if s["result"] != "pass":
            message = "; ".join(s["problems"]) + f" | verdict: {s['verdict']}"
            failure = ET.SubElement(case, "failure", message=message, type="divergence")
            failure.text = "\n".join(
                [f"spec: {s['name']} (digest {s['digest']})", f"verdict: {s['verdict']}", *(f"problem: {p}" for p in s["problems"])]
            )
        elif s["improvements"] or s.get("moved_bounds"):
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join([*(f"improved: {i}" for i in s["improvements"]),
                                  *(f"moved (same severity, not a failure): {m}" for m in s.get("moved_bounds", []))])
        cases.append(case)
    fuzz = result.get("fuzz")
    if fuzz:
        for f in fuzz["findings"]:
            if not f["fails_gate"]:
                continue
            case = ET.Element("testcase", classname=f"divfuzz.gate.{device}.fuzz", name=f["bucket"], time="0")
            ET.SubElement(case, "failure", message=f"new fuzz finding: {f['bucket']} (triage {f['triage']})", type="fuzz")
            cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    suite = ET.Element(
        "testsuite",
        name="divfuzz gate",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        time=f"{(result.get('timings') or {}).get('total_s', 0.0):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    for key in ("device", "torch", "baseline", "margin"):
        ET.SubElement(props, "property", name=key, value=str(result[key]))
    for i, note in enumerate(result.get("notes") or []):  # e.g. a baseline written for another machine
        ET.SubElement(props, "property", name=f"note{i + 1}", value=note)
    for row in (result.get("machine") or {}).get("rows") or []:  # escaped by divfuzz.fuzzer.gate.machine.machine_rows
        ET.SubElement(props, "property", name=f"machine.{row['field']}",
                      value=f"baseline: {row['baseline']}; this run: {row['current']}")
    suite.extend(cases)
    if result.get("notes"):  # JUnit puts the suite's own output after its cases
        ET.SubElement(suite, "system-out").text = "\n".join(f"note: {n}" for n in result["notes"])
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
